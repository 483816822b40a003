"""Bad input to the group coordinator, with real clients: Kafka's error codes come back, nothing changes, and
the group keeps working for its other members."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.cluster.test_controller import make_topic
from tests.groups.support import committed_offsets, produce
from tests.harness import RunningCluster

pytestmark = [pytest.mark.processes]


def consume(consumer: Consumer, count: int, timeout_s: float = 60) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += [(m.partition(), m.offset()) for m in consumer.consume(100, timeout=0.5) if m.error() is None]
    return got


def test_a_session_timeout_outside_the_brokers_bounds_fails_that_member_only(shared_cluster: RunningCluster):
    topic, group = "bad-session", "bad-session-group"
    bootstrap = shared_cluster.spec.bootstrap_servers
    make_topic(shared_cluster, topic, 2, 3)
    produce(bootstrap, topic, {0: 5, 1: 5})
    good = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000})
    bad = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                    "session.timeout.ms": 1000, "heartbeat.interval.ms": 100})
    try:
        good.subscribe([topic])
        bad.subscribe([topic])
        errors: list[int] = []
        deadline = time.monotonic() + 60
        # transient errors (a connection being set up) may come first; the refusal must come
        while KafkaError.INVALID_SESSION_TIMEOUT not in errors and time.monotonic() < deadline:
            message = bad.poll(0.5)
            if message is not None and message.error() is not None:
                errors.append(message.error().code())
        assert KafkaError.INVALID_SESSION_TIMEOUT in errors, f"errors seen: {errors}"
        assert sorted(consume(good, 10)) == [(p, o) for p in (0, 1) for o in range(5)]
    finally:
        bad.close()
        good.close()


def test_commits_for_partitions_that_do_not_exist_are_refused_and_the_others_stored(shared_cluster: RunningCluster):
    topic, group = "bad-commit", "bad-commit-group"
    bootstrap = shared_cluster.spec.bootstrap_servers
    make_topic(shared_cluster, topic, 1, 3)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException):
            consumer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 7, 3),
                                     TopicPartition("no-such-topic", 0, 3)], asynchronous=False)
        # librdkafka raises on the first failed partition; the valid one was stored all the same
        stored = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 7)], timeout=15)
        assert (stored[0].partition, stored[0].offset, stored[0].error) == (0, 3, None)
        assert stored[1].offset < 0 or stored[1].error is not None
    finally:
        consumer.close()
    assert committed_offsets(AdminClient({"bootstrap.servers": bootstrap}), group) == {0: 3}


def test_an_unknown_group_has_no_offsets_and_describes_as_dead(shared_cluster: RunningCluster):
    admin = AdminClient({"bootstrap.servers": shared_cluster.spec.bootstrap_servers})
    assert committed_offsets(admin, "nobody-ever-used-this") == {}
    description = admin.describe_consumer_groups(["nobody-ever-used-this"], request_timeout=10)[
        "nobody-ever-used-this"].result(15)
    assert description.state.name == "DEAD" and description.members == []
