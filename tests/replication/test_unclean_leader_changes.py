"""Scenario 3 (KIP-279, from Kafka's EpochDrivenReplicationProtocolAcceptanceTest
.logsShouldNotDivergeOnUncleanLeaderElections): two replicas take turns leading, each alone, through unclean
elections (unclean.leader.election.enable=true, min.insync.replicas=1, acks=1). KIP-101's single lookup of
"where does my latest epoch end on the leader" answers with an offset past the divergence, so the follower
keeps a stale tail; KIP-279 walks back epoch by epoch to the common ancestor.

A 2-broker cluster: whichever broker is up alone is also the controller, and elects itself.
Epoch numbers and logs below are the reference's (kafka-internals.md 3.10, scenario 3):
  1. A leads e0, m0 replicated.                       A = B = [0:e0]
  2. A down, B leads e1, writes 1.                    B = [0:e0, 1:e1]
  3. B down, A up: unclean e2, writes 3.              A = [0:e0, 1:e2, 2:e2, 3:e2]
  4. A down, B up: unclean e3, writes 1.              B = [0:e0, 1:e1, 2:e3]
  5. B down, A up: unclean e4, writes 2.              A = [0:e0, 1:e2, 2:e2, 3:e2, 4:e4, 5:e4]
  6. B starts as follower of A.
"""

from __future__ import annotations

import pytest

from tests.replication.support import (
    SESSION_S,
    events,
    leader_epoch_cache,
    log_bytes,
    make_topic,
    produce_acknowledged,
    replica_log,
    wait_for_event,
    wait_for_identical_replicas,
    wait_for_isr,
    wait_for_leader,
)
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos]
TOPIC = "flipflop"
A, B = 1, 2
FINAL_A = [(0, 0, b"m0"), (1, 2, b"a1"), (2, 2, b"a2"), (3, 2, b"a3"), (4, 4, b"a4"), (5, 4, b"a5")]
FINAL_A_CACHE = {0: 0, 2: 1, 4: 4}


def write(cluster, leader: int, values: list[bytes]) -> None:
    for value in values:  # one batch each, as the acceptance test sends them
        produce_acknowledged(cluster, leader, TOPIC, [value], acks=1)


def hand_over(cluster, down: int, up: int | None, leader: int, epoch: int, values: list[bytes]) -> None:
    cluster.kill9(down)
    if up is not None:
        cluster.start(up)
    view = wait_for_leader(cluster, TOPIC, leader, SESSION_S + 15)
    assert view.leader_epoch == epoch and view.isr == [leader]
    write(cluster, leader, values)


def offsets_epochs_values(cluster, broker: int) -> list[tuple[int, int, bytes]]:
    return [(s.base_offset, s.leader_epoch, s.values[0]) for s in replica_log(cluster, broker, TOPIC)]


def flip_flop(cluster_factory, rule: str):
    cluster = cluster_factory(brokers=2, overrides={"kafkasim.replica.truncation.rule": rule,
                                                    "unclean.leader.election.enable": "true"})
    make_topic(cluster, TOPIC, [A, B])
    produce_acknowledged(cluster, A, TOPIC, [b"m0"], acks=-1)  # 1: replicated to both
    hand_over(cluster, down=A, up=None, leader=B, epoch=1, values=[b"b1"])  # 2: a clean election
    hand_over(cluster, down=B, up=A, leader=A, epoch=2, values=[b"a1", b"a2", b"a3"])  # 3
    hand_over(cluster, down=A, up=B, leader=B, epoch=3, values=[b"b2"])  # 4
    assert offsets_epochs_values(cluster, B) == [(0, 0, b"m0"), (1, 1, b"b1"), (2, 3, b"b2")]
    assert leader_epoch_cache(cluster, B, TOPIC) == {0: 0, 1: 1, 3: 2}
    hand_over(cluster, down=B, up=A, leader=A, epoch=4, values=[b"a4", b"a5"])  # 5
    assert offsets_epochs_values(cluster, A) == FINAL_A
    assert leader_epoch_cache(cluster, A, TOPIC) == FINAL_A_CACHE
    cluster.start(B)  # 6
    wait_for_isr(cluster, TOPIC, [A, B], 20)
    return cluster


def test_kip101_single_epoch_lookup_diverges_after_fast_unclean_leader_changes(cluster_factory):
    cluster = flip_flop(cluster_factory, "kip-101")
    # B asked for the end of its epoch 3; A answered 4 (where its epoch 4 starts), so B cut nothing
    # (min(4, LEO 3)) and fetched offsets 3..5 on top of its own 1..2
    assert events(cluster, B, te.FollowerTruncated, topic=TOPIC) == []
    assert offsets_epochs_values(cluster, B) == [(0, 0, b"m0"), (1, 1, b"b1"), (2, 3, b"b2"),
                                                 (3, 2, b"a3"), (4, 4, b"a4"), (5, 4, b"a5")]
    assert offsets_epochs_values(cluster, A) == FINAL_A
    assert log_bytes(cluster, A, TOPIC) != log_bytes(cluster, B, TOPIC)
    # B's epoch cache no longer even mentions epoch 3, whose batch it still holds at offset 2
    assert leader_epoch_cache(cluster, B, TOPIC) == {0: 0, 1: 1, 2: 3, 4: 4}


def test_kip279_walks_back_to_the_common_ancestor_and_converges(cluster_factory):
    cluster = flip_flop(cluster_factory, "kip-279")
    # epoch 3 -> A says (2, 4); B has no epoch 2: cut to where B's epoch 1 ends (2) and ask about epoch 1
    # -> A says (0, 1); B's epoch 0 also ends at 1: cut to 1, done. B's trace writer flushes on its own
    # thread, so the last step may reach the file just after B is back in the ISR.
    wait_for_event(cluster, B, te.FollowerTruncated, 10, where=lambda e: e.to_offset == 1, topic=TOPIC)
    steps = [(t.rule, t.from_offset, t.to_offset) for t in events(cluster, B, te.FollowerTruncated, topic=TOPIC)]
    assert steps == [("kip-279", 3, 2), ("kip-279", 2, 1)]
    wait_for_identical_replicas(cluster, TOPIC, [A, B], 10)
    assert offsets_epochs_values(cluster, B) == FINAL_A
    assert leader_epoch_cache(cluster, B, TOPIC) == FINAL_A_CACHE
