"""Scenario 5: unclean leader election loses committed data by design, and leader epochs still make the logs
converge. Without it the partition stays offline, keeping its last ISR, until that replica returns.

A 2-broker cluster and two topics on the same replicas [A, B]: ``gamble`` allows unclean election (a topic
config), ``careful`` keeps the default.
  1. m0..m4 replicated to both; then B is killed and falls out of the ISR (ISR [A]).
  2. m5..m9 are produced with acks=all and acknowledged: committed, with ISR [A] and min.insync.replicas=1.
  3. A dies too. B comes back first: ``gamble`` elects B uncleanly (ISR [B]); ``careful`` stays offline
     with leader -1 and ISR [A]. B takes x at offset 5.
  4. A returns as follower: it asks B where its epoch ends (5), truncates the committed m5..m9 and fetches x.
"""

from __future__ import annotations

import pytest

from tests.replication.support import (
    SESSION_S,
    batches,
    events,
    leader_epoch_cache,
    make_topic,
    partition_state,
    produce_acknowledged,
    values_by_offset,
    wait_for_event,
    wait_for_identical_replicas,
    wait_for_isr,
    wait_for_leader,
)
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos]
A, B = 1, 2
GAMBLE, CAREFUL = "gamble", "careful"


def test_unclean_election_loses_committed_records_and_the_logs_converge(cluster_factory):
    cluster = cluster_factory(brokers=2)
    make_topic(cluster, GAMBLE, [A, B], {"unclean.leader.election.enable": "true"})
    make_topic(cluster, CAREFUL, [A, B])
    for topic in (GAMBLE, CAREFUL):
        produce_acknowledged(cluster, A, topic, [b"m%d" % i for i in range(5)], acks=-1)
    wait_for_identical_replicas(cluster, GAMBLE, [A, B], 10)

    cluster.kill9(B)  # 1
    for topic in (GAMBLE, CAREFUL):
        wait_for_isr(cluster, topic, [A], SESSION_S + 15)
    committed = produce_acknowledged(cluster, A, GAMBLE, [b"m%d" % i for i in range(5, 10)], acks=-1)  # 2
    assert committed.base_offset == 5
    produce_acknowledged(cluster, A, CAREFUL, [b"m%d" % i for i in range(5, 10)], acks=-1)
    a_epoch = partition_state(cluster, GAMBLE).leader_epoch

    cluster.kill9(A)  # 3
    cluster.start(B)
    elected = wait_for_leader(cluster, GAMBLE, B, SESSION_S + 15)
    assert elected.isr == [B] and elected.leader_epoch == a_epoch + 1
    unclean = wait_for_event(cluster, B, te.LeaderElected, 10, topic=GAMBLE, leader=B)
    assert unclean.election == "unclean"
    offline = partition_state(cluster, CAREFUL)
    assert (offline.leader, offline.isr) == (-1, [A])  # never an empty ISR: waits for A
    assert leader_epoch_cache(cluster, B, GAMBLE) == {0: 0, elected.leader_epoch: 5}
    assert produce_acknowledged(cluster, B, GAMBLE, [b"x"], acks=-1).base_offset == 5

    cluster.start(A)  # 4
    wait_for_isr(cluster, GAMBLE, [A, B], 15)
    wait_for_event(cluster, A, te.FollowerTruncated, 10, topic=GAMBLE)  # flushed by the trace writer's thread
    truncated = [(t.rule, t.from_offset, t.to_offset) for t in events(cluster, A, te.FollowerTruncated, topic=GAMBLE)]
    assert truncated == [("kip-279", 10, 5)]
    settled = values_by_offset(batches(wait_for_identical_replicas(cluster, GAMBLE, [A, B], 10)))
    assert settled == {**{i: b"m%d" % i for i in range(5)}, 5: b"x"}, "the acknowledged m5..m9 are gone everywhere"

    # the careful topic lost nothing: A, its last ISR member, leads it again with all ten records
    wait_for_leader(cluster, CAREFUL, A, 15)
    wait_for_isr(cluster, CAREFUL, [A, B], 15)
    settled = values_by_offset(batches(wait_for_identical_replicas(cluster, CAREFUL, [A, B], 10)))
    assert settled == {i: b"m%d" % i for i in range(10)}
