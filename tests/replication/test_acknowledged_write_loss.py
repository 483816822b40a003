"""Scenario 1 (KIP-101 "scenario 1"): a follower that truncates to its high watermark when it becomes a
follower again, and is elected before it refetches, loses a write the leader already acknowledged to an
acks=all producer. With leader epochs (KIP-279) the follower never cuts what it cannot prove is divergent.

How the real processes are steered (brokers L, F, X; F is the controller, so nothing else moves):
  1. ISR [L, F, X], L leads epoch 0. m1 and m2 are produced with acks=all; m2 is acknowledged once both
     followers fetched past it. F's next fetch, the one that would bring it HW = 2, is parked at L for
     replica.fetch.wait.max.ms (raised to 2 s so the window is wide): F = [m1, m2] with HW = 1.
  2. L is killed (kill -9) inside that window. F's fetches now fail; F still has HW = 1.
  3. X shuts down cleanly: the controller takes X out of the ISR, which bumps the leader epoch to 1 and sends
     F a LeaderAndIsr "follow L in epoch 1". F becomes a follower in a new epoch, so it truncates by its rule.
  4. L's ZooKeeper session expires: F, in the ISR, is elected leader (epoch 2) with whatever its log holds.
  5. L and X come back as followers of F.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

import pytest

from cluster.chaos.checker import CheckResult, check
from cluster.chaos.history import FinalReads, Recorder, ReplicaRead
from tests.harness import RunningCluster, wait_until
from tests.replication.support import (
    SESSION_S,
    batches,
    controller_and_others,
    events,
    make_topic,
    partition_state,
    produce,
    produce_acknowledged,
    replica_log,
    values_by_offset,
    wait_for_event,
    wait_for_identical_replicas,
    wait_for_isr,
    wait_for_leader,
)
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos]
TOPIC = "acked"


@dataclass
class Outcome:
    cluster: RunningCluster
    old_leader: int
    new_leader: int
    truncations: list[te.FollowerTruncated]  # on the new leader, while it was a follower
    after_election: dict[int, bytes | None]  # the new leader's log when it was elected
    settled: dict[int, bytes | None]  # every replica's log once all three are back in sync


def run_scenario(cluster_factory, rule: str) -> Outcome:
    cluster = cluster_factory(brokers=3, overrides={"kafkasim.replica.truncation.rule": rule,
                                                    "replica.fetch.wait.max.ms": "2000"})
    follower, (leader, other) = controller_and_others(cluster)
    make_topic(cluster, TOPIC, [leader, follower, other])
    assert produce_acknowledged(cluster, leader, TOPIC, [b"m1"], acks=-1).base_offset == 0
    acked = produce(cluster, leader, TOPIC, [b"m2"], acks=-1)
    cluster.kill9(leader)  # step 2, while F's fetch that would carry HW = 2 is still parked at L
    assert (acked.error_code, acked.base_offset) == (0, 1), "m2 was acknowledged to the acks=all producer"

    cluster.signal(other, signal.SIGTERM)  # step 3
    bumped = wait_for_event(cluster, follower, te.ReplicaRoleChanged, 10, topic=TOPIC, role="follower",
                            leader=leader, leader_epoch=1)
    assert sorted(bumped.isr) == sorted([leader, follower])
    elected = wait_for_leader(cluster, TOPIC, follower, SESSION_S + 15)  # step 4
    assert elected.leader_epoch == 2
    # elected alone (F is the controller, so its trace has the election); X, still waiting for its controlled
    # shutdown's answer, may follow F and be taken back into the ISR before it exits, as in Kafka 2.8
    election = wait_for_event(cluster, follower, te.LeaderElected, 10, topic=TOPIC, leader=follower, leader_epoch=2)
    assert election.isr == [follower]
    truncations = events(cluster, follower, te.FollowerTruncated, topic=TOPIC)
    after_election = values_by_offset(replica_log(cluster, follower, TOPIC))

    wait_until(lambda: cluster.pid(other) is None, 15, "X to finish its controlled shutdown")
    for broker in (leader, other):  # step 5
        cluster.start(broker)
    wait_for_isr(cluster, TOPIC, [leader, follower, other], 20)
    settled = values_by_offset(batches(wait_for_identical_replicas(cluster, TOPIC, [leader, follower, other], 10)))
    return Outcome(cluster, leader, follower, truncations, after_election, settled)


def test_high_watermark_truncation_and_reelection_lose_an_acknowledged_write(cluster_factory):
    outcome = run_scenario(cluster_factory, "high-watermark")
    # F cut m2 because its HW (1) lagged the leader's (2), then it was elected without it
    assert [(t.rule, t.from_offset, t.to_offset, t.leader, t.leader_epoch) for t in outcome.truncations] == [
        ("high-watermark", 2, 1, outcome.old_leader, 1)]
    assert outcome.after_election == {0: b"m1"}
    # and when the old leader returns as follower it loses m2 too: gone from every replica
    assert outcome.settled == {0: b"m1"}
    assert partition_state(outcome.cluster, TOPIC).leader == outcome.new_leader


def test_leader_epochs_keep_the_acknowledged_write(cluster_factory):
    outcome = run_scenario(cluster_factory, "kip-279")
    # KIP-279: F could not ask the dead leader where epoch 0 ends, so it cut nothing; elected, it serves m2
    assert outcome.truncations == []
    assert outcome.after_election == {0: b"m1", 1: b"m2"}
    assert outcome.settled == {0: b"m1", 1: b"m2"}
    hw = wait_for_event(outcome.cluster, outcome.new_leader, te.HighWatermarkUpdated, 10, topic=TOPIC,
                        role="leader", where=lambda e: e.high_watermark >= 2)
    assert hw.high_watermark == 2


def chaos_check(outcome: Outcome) -> CheckResult:
    """The chaos checker on this scenario: two acknowledged sends, and every replica's log once settled."""
    operations = []
    recorder = Recorder(operations.append, lambda _: None, lambda: time.time() * 1000, time.monotonic_ns)
    for offset, value in enumerate(("m1", "m2")):
        recorder.complete(recorder.invoke("producer", "send", topic=TOPIC, partition=0, value=value), "ok",
                          partition=0, offset=offset)
    replicas = tuple(
        ReplicaRead(broker=broker, topic=TOPIC, partition=0, leader=broker == outcome.new_leader, records=tuple(
            (offset, value.decode()) for offset, value in sorted(values_by_offset(
                replica_log(outcome.cluster, broker, TOPIC)).items())))
        for broker in (outcome.old_leader, outcome.new_leader, *(b.broker_id for b in outcome.cluster.spec.brokers
                                                                 if b.broker_id not in (outcome.old_leader,
                                                                                        outcome.new_leader))))
    return check(operations, FinalReads(replicas=replicas))


def test_the_chaos_checker_names_the_write_the_high_watermark_rule_lost(cluster_factory):
    result = chaos_check(run_scenario(cluster_factory, "high-watermark"))
    assert result.verdict == "invalid"
    assert result.counts["lost-write"] == 1
    [lost] = next(r for r in result.anomalies if r.name == "lost-write").examples
    assert (lost.values, lost.offsets) == (("m2",), (1,))
