"""Scenario 2 (KIP-101 "scenario 2"): both replicas lose power with an unflushed tail. The one that comes back
first is elected and writes at an offset the other still holds from before the crash. Truncating to the
high watermark leaves the logs permanently diverged while both replicas count as in sync; leader epochs
find where the histories part and heal it.

Steering (a 2-broker cluster, so no controller survives the "power failure" to tidy the ISR):
  * the brokers set ``kafkasim.log.simulate.unflushed.loss=true`` (kill -9 then loses what was never
    fsynced) and a ``log.segment.bytes`` that holds one batch, so each append rolls and flushes the one
    before.
  * m1, m2 are produced with acks=all: A = B = [m1 flushed, m2 not]; A's high watermark checkpoint says 2.
  * B is paused and A takes one more write (acks=1): the roll flushes A's m2. Then both get SIGKILL.
  * After recovery A = [0:m1, 1:m2] with HW 2, B = [0:m1]. B restarts first and is elected (epoch 1), takes
    m3 at offset 1; A restarts as follower.
"""

from __future__ import annotations

import signal

import pytest

from tests.harness import wait_until
from tests.replication.support import (
    batches,
    events,
    high_watermark_checkpoint,
    kill9_all,
    log_bytes,
    make_topic,
    produce,
    produce_acknowledged,
    replica_log,
    wait_for_event,
    wait_for_identical_replicas,
    wait_for_isr,
    wait_for_leader,
)
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos]
TOPIC = "powerloss"
UNFLUSHED_LOSS = {"kafkasim.log.simulate.unflushed.loss": "true"}
ONE_BATCH_SEGMENTS = {"segment.bytes": "120"}  # a 1-record batch of these values is 70 bytes


def crash_both_with_unflushed_tails(cluster_factory, rule: str):
    # no automatic preferred election: A (preferred) leading again would make B follow A's log after all
    cluster = cluster_factory(brokers=2, overrides={"kafkasim.replica.truncation.rule": rule, **UNFLUSHED_LOSS,
                                                    "log.segment.bytes": ONE_BATCH_SEGMENTS["segment.bytes"],
                                                    "auto.leader.rebalance.enable": "false"})
    a, b = 1, 2
    make_topic(cluster, TOPIC, [a, b])
    produce_acknowledged(cluster, a, TOPIC, [b"m1"], acks=-1)
    assert produce(cluster, a, TOPIC, [b"m2"], acks=-1).error_code == 0
    wait_until(lambda: high_watermark_checkpoint(cluster, a, TOPIC) == 2, 15, "A to checkpoint HW 2")
    wait_until(lambda: len(replica_log(cluster, b, TOPIC)) == 2, 5, "B to hold m2")

    cluster.signal(b, signal.SIGSTOP)
    assert produce(cluster, a, TOPIC, [b"lost-with-A's-page-cache"], acks=1).error_code == 0
    kill9_all(cluster, [a, b])

    cluster.start(b)  # B comes back first: recovery drops its unflushed m2
    elected = wait_for_leader(cluster, TOPIC, b, 15)
    assert elected.leader_epoch == 1 and elected.isr == [b]
    assert [s.values for s in replica_log(cluster, b, TOPIC)] == [(b"m1",)]
    assert produce_acknowledged(cluster, b, TOPIC, [b"m3"], acks=-1).base_offset == 1

    cluster.start(a)  # recovery keeps A's flushed [m1, m2]; then it follows B
    wait_for_isr(cluster, TOPIC, [a, b], 15)  # both count as in sync either way
    return cluster, a, b


def test_high_watermark_truncation_leaves_the_logs_diverged(cluster_factory):
    cluster, a, b = crash_both_with_unflushed_tails(cluster_factory, "high-watermark")
    # A truncated to its HW (2): nothing. Offset 1 is m2 (epoch 0) on A and m3 (epoch 1) on B, for good.
    assert events(cluster, a, te.FollowerTruncated, topic=TOPIC) == []
    on_a = [(s.base_offset, s.leader_epoch, s.values) for s in replica_log(cluster, a, TOPIC)]
    on_b = [(s.base_offset, s.leader_epoch, s.values) for s in replica_log(cluster, b, TOPIC)]
    assert on_a == [(0, 0, (b"m1",)), (1, 0, (b"m2",))]
    assert on_b == [(0, 0, (b"m1",)), (1, 1, (b"m3",))]
    assert log_bytes(cluster, a, TOPIC) != log_bytes(cluster, b, TOPIC)


def test_leader_epochs_truncate_to_the_divergence_point_and_converge(cluster_factory):
    cluster, a, b = crash_both_with_unflushed_tails(cluster_factory, "kip-279")
    # A asked where epoch 0 ends on B (offset 1) and cut m2 there, then fetched m3 (the trace writer
    # flushes on its own thread: the event may reach the file a moment after the cut)
    wait_for_event(cluster, a, te.FollowerTruncated, 10, topic=TOPIC)
    truncated = [(t.rule, t.from_offset, t.to_offset) for t in events(cluster, a, te.FollowerTruncated, topic=TOPIC)]
    assert truncated == [("kip-279", 2, 1)]
    settled = batches(wait_for_identical_replicas(cluster, TOPIC, [a, b], 10))
    assert [(s.base_offset, s.leader_epoch, s.values) for s in settled] == [(0, 0, (b"m1",)), (1, 1, (b"m3",))]


def test_a_topic_level_unflushed_loss_setting_applies_to_the_recovery_after_kill9(cluster_factory):
    cluster = cluster_factory(brokers=1)
    make_topic(cluster, TOPIC, [1], {**UNFLUSHED_LOSS, **ONE_BATCH_SEGMENTS})
    produce_acknowledged(cluster, 1, TOPIC, [b"m1"], acks=1)
    produce_acknowledged(cluster, 1, TOPIC, [b"m2"], acks=1)  # rolls: m1 is flushed, m2 is not
    cluster.kill9(1)
    cluster.start(1)
    wait_for_leader(cluster, TOPIC, 1, 15)
    assert [s.values for s in replica_log(cluster, 1, TOPIC)] == [(b"m1",)]
