"""After a bounded bout of failures, once the cluster settles (every ISR complete again), the replicas of every
partition hold byte-identical logs: followers append the leader's batches byte for byte and truncate, by
leader epochs, whatever the leader does not have. Compared on the .log segment files themselves.

Writes go to whoever ZooKeeper names leader at that moment (acks=all and acks=1 mixed). Meanwhile the leader
of partition 0 gets an acks=1 write and is killed at once (so its tail may never reach a follower) and comes
back; then the controller is killed and comes back. Every acks=1 write is followed by acks=all writes to the
same partition before the next failure, so only the record written just before the first kill may be lost.
"""

from __future__ import annotations

import pytest

from zk.admin import create_topic
from tests.harness import wait_until, zk_call
from tests.replication.support import (
    RETRIABLE_ROUTING,
    SESSION_S,
    batches,
    produce,
    values_by_offset,
    wait_for_identical_replicas,
)

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos]
TOPIC = "settle"
PARTITIONS = 4


def produce_to_leader(cluster, partition: int, value: bytes, acks: int) -> int:
    """Retries (the leader may be dead or moving) until the current leader accepts; returns the offset."""
    def attempt() -> int | None:
        leader = cluster.state([TOPIC]).partition(TOPIC, partition).leader
        if leader < 0:
            return None
        result = produce(cluster, leader, TOPIC, [value], acks=acks, partition=partition, timeout_ms=5000)
        if result.error_code in RETRIABLE_ROUTING:
            return None
        assert result.error_code == 0, f"{TOPIC}-{partition} on broker {leader}: error {result.error_code}"
        return result.base_offset + 1  # 0 is a valid offset: never falsy

    return wait_until(attempt, SESSION_S + 15, f"a leader of {TOPIC}-{partition} to accept a write") - 1


def write_round(cluster, round_: int, acks: int) -> None:
    for partition in range(PARTITIONS):
        produce_to_leader(cluster, partition, b"p%d-r%d" % (partition, round_), acks)


def test_every_partition_has_byte_identical_replicas_after_the_cluster_settles(cluster_factory):
    cluster = cluster_factory(brokers=3)
    zk_call(cluster.zk_connect, lambda zk: create_topic(zk, TOPIC, PARTITIONS, 3))
    wait_until(lambda: len(ps := cluster.state([TOPIC]).partitions) == PARTITIONS
               and all(len(p.isr) == 3 for p in ps), 15, "the topic to be online with full ISRs")
    for round_ in range(3):
        write_round(cluster, round_, acks=-1)

    victim = cluster.state([TOPIC]).partition(TOPIC, 0).leader
    produce(cluster, victim, TOPIC, [b"maybe-lost"], acks=1)
    cluster.kill9(victim)
    for round_ in range(3, 6):
        write_round(cluster, round_, acks=-1 if round_ % 2 else 1)
    cluster.start(victim)
    for round_ in range(6, 8):
        write_round(cluster, round_, acks=-1)
    controller = cluster.controller()
    cluster.kill9(controller)
    for round_ in range(8, 10):
        write_round(cluster, round_, acks=-1 if round_ % 2 else 1)
    cluster.start(controller)

    wait_until(lambda: all(sorted(p.isr) == sorted(p.replicas) for p in cluster.state([TOPIC]).partitions),
               30, "every ISR to be complete again")
    for view in cluster.state([TOPIC]).partitions:
        settled = batches(wait_for_identical_replicas(cluster, TOPIC, view.replicas, 15, view.partition))
        written = {b"p%d-r%d" % (view.partition, r) for r in range(10)}
        values = set(values_by_offset(settled).values())
        assert written <= values, f"an acknowledged write to {TOPIC}-{view.partition} is missing"
        assert values - written <= {b"maybe-lost"}
