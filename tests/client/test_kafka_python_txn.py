"""A second client library's transactions against kafkasim (issue 20): kafka-python's KafkaProducer with a
transactional_id (its own InitProducerId, AddPartitionsToTxn, EndTxn code, not librdkafka's) and its KafkaConsumer
with isolation_level read_committed. A committed transaction's values are read back, an aborted one's are not,
and a second producer with the same transactional id fences the first."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaError as KafkaPythonError

from tests.client.support import bootstrap
from tests.cluster.test_controller import make_topic

pytestmark = [pytest.mark.processes]


def kp_producer(servers: list[str], transactional_id: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=servers, transactional_id=transactional_id,
                             enable_idempotence=True, acks="all", request_timeout_ms=30_000)
    producer.init_transactions()
    return producer


def read_all(servers: list[str], topic: str, isolation_level: str, expected: int, timeout_s: float = 30) -> list:
    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False, isolation_level=isolation_level,
                             fetch_max_wait_ms=100, request_timeout_ms=20_000)
    got: list[bytes] = []
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=300).values():
                got.extend(m.value for m in messages)
            if len(got) >= expected and consumer.position(tp) >= consumer.end_offsets([tp])[tp]:
                break
    finally:
        consumer.close()
    return got


def test_kafka_pythons_transactional_producer_commits_aborts_and_is_fenced(shared_cluster):
    topic = "kafka-python-txn"
    make_topic(shared_cluster, topic, 1, 3)
    servers = bootstrap(shared_cluster).split(",")
    producer = kp_producer(servers, "kafka-python-txn-id")
    producer.begin_transaction()
    for i in range(5):
        producer.send(topic, value=f"committed-{i}".encode(), partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(5):
        producer.send(topic, value=f"aborted-{i}".encode(), partition=0)
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic, value=b"zombie", partition=0)
    producer.flush()

    successor = kp_producer(servers, "kafka-python-txn-id")  # fences the first; its open transaction is aborted
    successor.begin_transaction()
    successor.send(topic, value=b"successor", partition=0)
    successor.commit_transaction()
    with pytest.raises(KafkaPythonError):
        producer.commit_transaction()
    producer.close(timeout=5)
    successor.close(timeout=5)

    committed = [f"committed-{i}".encode() for i in range(5)] + [b"successor"]
    assert read_all(servers, topic, "read_committed", len(committed)) == committed
    everything = read_all(servers, topic, "read_uncommitted", 12)
    assert everything == ([f"committed-{i}".encode() for i in range(5)] + [f"aborted-{i}".encode() for i in range(5)]
                          + [b"zombie", b"successor"])
