"""__consumer_offsets is Kafka's internal topic: created on first use with offsets.topic.num.partitions and
offsets.topic.replication.factor (10 and 3 in the classroom profile), flagged internal in Metadata."""

from __future__ import annotations

import warnings

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.group.manager import OFFSETS_TOPIC
from tests.cluster.test_controller import make_topic
from tests.harness import RunningCluster, wait_until

pytestmark = [pytest.mark.processes]


def test_the_first_group_creates_the_internal_offsets_topic(shared_cluster: RunningCluster):
    assert shared_cluster.state([OFFSETS_TOPIC]).partitions == []  # nothing used a group yet
    make_topic(shared_cluster, "first-commit", 1, 1)
    consumer = Consumer({"bootstrap.servers": shared_cluster.spec.bootstrap_servers, "group.id": "first"})
    try:
        consumer.commit(offsets=[TopicPartition("first-commit", 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    partitions = shared_cluster.state([OFFSETS_TOPIC]).partitions
    assert len(partitions) == 10 and all(len(p.replicas) == 3 for p in partitions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=shared_cluster.spec.bootstrap_servers)
    try:
        described = wait_until(lambda: admin.describe_topics([OFFSETS_TOPIC]), 15, "the topic's metadata")
    finally:
        admin.close()
    assert described[0]["is_internal"] is True and len(described[0]["partitions"]) == 10


def test_clients_cannot_produce_to_the_internal_offsets_topic(shared_cluster: RunningCluster):
    from confluent_kafka import KafkaError, Producer

    consumer = Consumer({"bootstrap.servers": shared_cluster.spec.bootstrap_servers, "group.id": "forger"})
    try:  # make sure the topic exists, so the produce reaches a leader
        consumer.commit(offsets=[TopicPartition(OFFSETS_TOPIC, 0, 0)], asynchronous=True)
        wait_until(lambda: shared_cluster.state([OFFSETS_TOPIC]).partitions, 30, "the offsets topic")
    finally:
        consumer.close()
    errors = []
    producer = Producer({"bootstrap.servers": shared_cluster.spec.bootstrap_servers, "retries": 0})
    producer.produce(OFFSETS_TOPIC, b"forged", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    # librdkafka names Kafka's INVALID_TOPIC_EXCEPTION (17) TOPIC_EXCEPTION
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_EXCEPTION
