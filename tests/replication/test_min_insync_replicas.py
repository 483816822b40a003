"""Scenario 6: min.insync.replicas=2 on a 3-replica topic. Once both followers are gone and the ISR has shrunk
to the leader, acks=all is refused with NOT_ENOUGH_REPLICAS before anything is appended; a request that was
already waiting in the produce purgatory when the ISR shrank completes with NOT_ENOUGH_REPLICAS_AFTER_APPEND
(its records stay in the log); acks=1 never consults min.insync.replicas. When the followers return and
rejoin the ISR, acks=all succeeds again.

The followers are paused (SIGSTOP) rather than killed, so that they cannot fetch the parked write yet
come back by themselves; the leader is the controller, so the ISR changes do not depend on them.
"""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.harness import wait_until
from tests.replication.support import (
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    SESSION_S,
    batches,
    controller_and_others,
    log_end_offset,
    make_topic,
    produce,
    produce_acknowledged,
    values_by_offset,
    wait_for_identical_replicas,
    wait_for_isr,
    wait_for_leader,
)

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos]
TOPIC = "guarded"


def test_acks_all_needs_min_insync_replicas_and_acks_1_does_not(cluster_factory):
    cluster = cluster_factory(brokers=3)
    leader, followers = controller_and_others(cluster)
    make_topic(cluster, TOPIC, [leader, *followers], {"min.insync.replicas": "2"})
    produce_acknowledged(cluster, leader, TOPIC, [b"all-in-sync"], acks=-1)

    for follower in followers:
        cluster.signal(follower, signal.SIGSTOP)
    with ThreadPoolExecutor(1) as pool:
        try:
            parked = pool.submit(produce, cluster, leader, TOPIC, [b"parked"], acks=-1, timeout_ms=30000)
            shrunk = wait_for_isr(cluster, TOPIC, [leader], SESSION_S + 15)
            # the HW reached the parked batch only because the ISR is now the leader alone: too few
            assert parked.result(timeout=15).error_code == NOT_ENOUGH_REPLICAS_AFTER_APPEND
            end = log_end_offset(cluster, leader, TOPIC)
            assert end == 2, "the parked write was appended"

            refused = produce(cluster, leader, TOPIC, [b"refused"], acks=-1)
            assert refused.error_code == NOT_ENOUGH_REPLICAS
            assert log_end_offset(cluster, leader, TOPIC) == end, "nothing appended"
            accepted = produce(cluster, leader, TOPIC, [b"acks=1"], acks=1)
            assert (accepted.error_code, accepted.base_offset) == (0, end)
        finally:
            for follower in followers:
                cluster.signal(follower, signal.SIGCONT)
    assert shrunk.leader == leader

    wait_for_isr(cluster, TOPIC, [leader, *followers], 30)
    assert produce_acknowledged(cluster, leader, TOPIC, [b"in-sync-again"], acks=-1).base_offset == end + 1
    settled = wait_for_identical_replicas(cluster, TOPIC, [leader, *followers], 10)
    assert values_by_offset(batches(settled)) == {0: b"all-in-sync", 1: b"parked", 2: b"acks=1", 3: b"in-sync-again"}


def test_a_topic_level_min_insync_replicas_survives_a_broker_restart(cluster_factory):
    cluster = cluster_factory(brokers=1)
    make_topic(cluster, TOPIC, [1], {"min.insync.replicas": "2"})
    assert produce(cluster, 1, TOPIC, [b"refused"], acks=-1).error_code == NOT_ENOUGH_REPLICAS
    cluster.signal(1, signal.SIGTERM)  # a clean restart: the bug is not about crashes
    wait_until(lambda: cluster.pid(1) is None, 30, "the broker to stop")
    cluster.start(1)
    wait_for_leader(cluster, TOPIC, 1, 15)
    assert produce(cluster, 1, TOPIC, [b"refused-again"], acks=-1).error_code == NOT_ENOUGH_REPLICAS
