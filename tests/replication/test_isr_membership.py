"""ISR shrink and expand driven by the leader (kafka-internals.md 3.4-3.6): a follower paused with SIGSTOP
stops fetching; once the leader has records it lacks and it has not caught up for replica.lag.time.max.ms,
the leader's isr-expiration task (every lag/2) writes a smaller ISR to ZooKeeper, by compare-and-set and
without a new leader epoch. Resumed, it catches up and the leader adds it back.

The ZooKeeper session is made longer than the lag time here (10 s against the classroom 3 s): with the
classroom's 2 s session, the controller would remove the paused broker first, on session expiry, and the
leader's own rule would never be seen.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.replication.support import (
    controller_and_others,
    make_topic,
    partition_state,
    produce_acknowledged,
    wait_for_event,
    wait_for_identical_replicas,
    wait_for_isr,
)
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos]
TOPIC = "lagging"
LAG_S = 3.0  # the classroom profile's replica.lag.time.max.ms
FETCH_WAIT_S = 0.5  # replica.fetch.wait.max.ms: a caught-up follower's last fetch may be this old when paused


def test_a_paused_follower_leaves_the_isr_after_the_lag_time_and_rejoins_after_sigcont(cluster_factory):
    cluster = cluster_factory(brokers=2, overrides={"zookeeper.session.timeout.ms": "10000"})
    leader, (follower,) = controller_and_others(cluster)
    make_topic(cluster, TOPIC, [leader, follower])
    produce_acknowledged(cluster, leader, TOPIC, [b"both"], acks=-1)
    before = partition_state(cluster, TOPIC)
    registered = {b.broker_id: b.broker_epoch for b in cluster.state(topics=[]).brokers}

    cluster.signal(follower, signal.SIGSTOP)
    paused_at = time.time()
    try:
        produce_acknowledged(cluster, leader, TOPIC, [b"leader-only"], acks=1)  # now it lags
        shrunk = wait_for_isr(cluster, TOPIC, [leader], LAG_S * 1.5 + 10)
        shrink = wait_for_event(cluster, leader, te.IsrChanged, 10, topic=TOPIC, kind="shrink")
    finally:
        cluster.signal(follower, signal.SIGCONT)
    assert shrink.ts_ms / 1000 - paused_at >= LAG_S - FETCH_WAIT_S, "not before the lag time"
    assert (sorted(shrink.old_isr), shrink.new_isr) == (sorted([leader, follower]), [leader])
    # the leader's own change: same leader epoch, the next zkVersion
    assert (shrunk.leader, shrunk.leader_epoch) == (leader, before.leader_epoch)
    assert shrunk.zk_version == shrink.zk_version == before.zk_version + 1

    expanded = wait_for_isr(cluster, TOPIC, [leader, follower], 15)
    expand = wait_for_event(cluster, leader, te.IsrChanged, 10, topic=TOPIC, kind="expand")
    assert sorted(expand.new_isr) == sorted([leader, follower]) and expand.ts_ms > shrink.ts_ms
    assert expanded.leader_epoch == before.leader_epoch and expanded.zk_version == before.zk_version + 2
    # the pause stayed inside the session: no re-registration, no controller involvement
    assert {b.broker_id: b.broker_epoch for b in cluster.state(topics=[]).brokers} == registered
    wait_for_identical_replicas(cluster, TOPIC, [leader, follower], 10)
