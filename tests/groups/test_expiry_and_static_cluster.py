"""Offset expiry and static membership on a real 3-broker cluster with confluent-kafka clients.

- The brokers run with ``offsets.retention.minutes=1`` (the smallest value Kafka accepts) and a check every second:
  a group that committed and went Empty loses its committed offsets a minute later (OffsetFetch answers -1, the
  AdminClient lists none) and its __consumer_offsets partition holds the tombstones.
- Two consumers with ``group.instance.id``: one closes (librdkafka sends no LeaveGroup for a static member) and a
  new consumer with the same instance id takes its partitions back without a rebalance: the same generation
  (read from the coordinator's trace, DescribeGroups has none), the other member untouched. Two live consumers
  with the same instance id: the older one is fenced (FENCED_INSTANCE_ID, a fatal error in librdkafka)."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient

from broker.group import records as rec
from broker.group.coordinator import partition_for
from tests.client.support import bootstrap, leader_of
from tests.cluster.test_controller import make_topic
from tests.groups.support import committed_offsets, coordinator_of, produce
from tests.harness import RunningCluster, module_cluster, wait_until
from tests.log.cleaner_support import read_segments
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow]

RETENTION_S = 60
cluster = module_cluster("expiry-static-cluster", overrides={
    "offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000"})


def offsets_partition(cluster: RunningCluster, group: str) -> int:
    partitions = len([p for p in cluster.state(["__consumer_offsets"]).partitions if p.topic == "__consumer_offsets"])
    return partition_for(group, partitions)


def test_an_empty_groups_offsets_expire_after_the_retention_and_are_tombstoned(cluster):
    topic, group = "expiring", "expiring-group"
    make_topic(cluster, topic, 2, 3)
    produce(bootstrap(cluster), topic, {0: 5, 1: 5})
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 10 and time.monotonic() < deadline:
        seen += len([m for m in consumer.consume(10, timeout=0.5) if m.error() is None])
    consumer.commit(asynchronous=False)
    consumer.close()  # a dynamic member: LeaveGroup, the group is Empty from now
    emptied = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    assert seen == 10 and committed_offsets(admin, group) == {0: 5, 1: 5}

    def expired() -> bool:
        try:
            return committed_offsets(admin, group) == {}
        except Exception:
            return False

    wait_until(expired, RETENTION_S + 40, "the group's offsets to expire", interval_s=1)
    waited = time.monotonic() - emptied
    assert waited >= RETENTION_S - 3, f"offsets gone after {waited:.1f} s, before the retention"

    partition = offsets_partition(cluster, group)
    coordinator = leader_of(cluster, "__consumer_offsets", partition)
    directory = cluster.layout.broker_dir(coordinator) / "logs" / f"__consumer_offsets-{partition}"
    deleted = {rec.decode_key(r.key) for r in read_segments(directory) if r.value is None}
    assert {rec.OffsetKey(group, topic, 0), rec.OffsetKey(group, topic, 1), rec.GroupKey(group)} <= deleted
    dead = [e for e in cluster.traces(coordinator)
            if isinstance(e, te.GroupStateChanged) and e.group_id == group and e.new_state == "Dead"]
    assert dead and dead[-1].reason == "its offsets expired"


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def static_consumer(cluster: RunningCluster, group: str, instance: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group, "group.instance.id": instance,
                     "session.timeout.ms": 30000, "auto.offset.reset": "earliest", **extra})


def poll_until(consumers: list[Consumer], condition, timeout_s: float, what) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.1)
        if condition():
            return
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def partitions_of(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def group_events(cluster: RunningCluster, broker: int, group: str) -> list[te.GroupStateChanged]:
    return [e for e in cluster.traces(broker) if isinstance(e, te.GroupStateChanged) and e.group_id == group]


def test_a_restarted_static_member_gets_its_partitions_back_in_the_same_generation(cluster):
    topic, group = "static-topic", "static-group"
    make_topic(cluster, topic, 4, 3)
    first, second = static_consumer(cluster, group, "inst-1"), static_consumer(cluster, group, "inst-2")
    replacement = None
    # what the replacement hears: librdkafka reports FENCED_INSTANCE_ID as a fatal error (error_cb) or, when it
    # meets it on a heartbeat after a commit, in its log lines only
    errors: list[KafkaError] = []
    logged = ListHandler()
    client_log = logging.getLogger(f"rdkafka-{group}-replacement")
    client_log.addHandler(logged)
    try:
        first.subscribe([topic])
        second.subscribe([topic])
        poll_until([first, second], lambda: partitions_of(first) | partitions_of(second) == set(range(4))
                   and not partitions_of(first) & partitions_of(second), 60, "both members assigned")
        admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
        coordinator = coordinator_of(admin, group)
        wait_until(lambda: group_events(cluster, coordinator, group)
                   and group_events(cluster, coordinator, group)[-1].new_state == "Stable", 10, "a Stable group")
        before = group_events(cluster, coordinator, group)
        generation = before[-1].generation_id
        described = admin.describe_consumer_groups([group])[group].result(15)
        old_ids = {m.group_instance_id: m.member_id for m in described.members}
        first_owns, second_owned = partitions_of(first), partitions_of(second)

        second.close()  # static: no LeaveGroup, the member stays in the group for its session
        replacement = static_consumer(cluster, group, "inst-2", error_cb=errors.append, logger=client_log)
        replacement.subscribe([topic])
        poll_until([first, replacement], lambda: bool(partitions_of(replacement)), 25,
                   "the restarted member's assignment")
        assert partitions_of(replacement) == second_owned and partitions_of(first) == first_owns
        described = admin.describe_consumer_groups([group])[group].result(15)
        new_ids = {m.group_instance_id: m.member_id for m in described.members}
        assert described.state.name == "STABLE" and set(new_ids) == {"inst-1", "inst-2"}
        assert new_ids["inst-1"] == old_ids["inst-1"] and new_ids["inst-2"] != old_ids["inst-2"]
        assert new_ids["inst-2"].startswith("inst-2-")
        # no state change at all since: the generation did not move, nobody rebalanced
        assert group_events(cluster, coordinator, group) == before and before[-1].generation_id == generation

        # a second live consumer with the same instance id fences the one there
        duplicate = static_consumer(cluster, group, "inst-2")
        duplicate.subscribe([topic])

        def replacement_fenced() -> bool:
            return (any(e.code() == KafkaError.FENCED_INSTANCE_ID or "fenced" in e.str().lower() for e in errors)
                    or any("Static consumer fenced" in line for line in logged.lines))

        try:
            poll_until([first, duplicate, replacement],
                       lambda: replacement_fenced() and partitions_of(duplicate) == second_owned,
                       45, lambda: f"the older incarnation fenced and the new one given its partitions: errors "
                       f"{[(e.code(), e.fatal(), e.str()) for e in errors]}, duplicate's partitions "
                       f"{partitions_of(duplicate)}, log {logged.lines[-5:]}")
        finally:
            duplicate.close()
    finally:
        first.close()
        if replacement is not None:
            try:
                replacement.close()
            except Exception:
                pass  # a fenced consumer may refuse to close cleanly


def test_static_members_survive_the_coordinators_kill9_and_a_restart_after_it_needs_no_rebalance(cluster):
    topic, group = "static-failover-topic", "static-failover-group"
    make_topic(cluster, topic, 4, 3)
    first, second = static_consumer(cluster, group, "fo-1"), static_consumer(cluster, group, "fo-2")
    replacement = None
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    try:
        first.subscribe([topic])
        second.subscribe([topic])
        poll_until([first, second], lambda: partitions_of(first) | partitions_of(second) == set(range(4))
                   and not partitions_of(first) & partitions_of(second), 60, "both members assigned")
        coordinator = coordinator_of(admin, group)
        wait_until(lambda: group_events(cluster, coordinator, group)
                   and group_events(cluster, coordinator, group)[-1].new_state == "Stable", 10, "a Stable group")
        generation = group_events(cluster, coordinator, group)[-1].generation_id
        second_owned = partitions_of(second)
        partition = offsets_partition(cluster, group)

        cluster.kill9(coordinator)
        try:
            wait_until(lambda: leader_of(cluster, "__consumer_offsets", partition) not in (coordinator, -1), 30,
                       "a new coordinator")
            successor = leader_of(cluster, "__consumer_offsets", partition)
            wait_until(lambda: group_events(cluster, successor, group), 30, "the group loaded by the new coordinator")
            loaded = group_events(cluster, successor, group)[0]
            assert (loaded.new_state, loaded.generation_id, loaded.members) == ("Stable", generation, 2)

            second.close()  # a static member restarts after the failover
            replacement = static_consumer(cluster, group, "fo-2")
            replacement.subscribe([topic])
            poll_until([first, replacement], lambda: bool(partitions_of(replacement)), 40,
                       "the restarted member's assignment from the new coordinator")
            assert partitions_of(replacement) == second_owned
            described = admin.describe_consumer_groups([group])[group].result(15)
            assert described.state.name == "STABLE" and described.coordinator.id == successor
            assert {m.group_instance_id for m in described.members} == {"fo-1", "fo-2"}
            # the new coordinator never rebalanced: one event, the load, in the old generation
            assert group_events(cluster, successor, group) == [loaded]
        finally:
            cluster.start(coordinator)
    finally:
        for consumer in (first, second, replacement):
            if consumer is not None:
                try:
                    consumer.close()
                except RuntimeError:
                    pass  # closed already
