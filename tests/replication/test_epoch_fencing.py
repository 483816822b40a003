"""Scenario 4 (KIP-320): requests carry the leader epoch their sender believes in, and a leader refuses an
older one with FENCED_LEADER_EPOCH (a newer one: UNKNOWN_LEADER_EPOCH), so nobody truncates or fetches
against a state the leader has already left behind.

A follower is paused (SIGSTOP) past its ZooKeeper session: the controller drops it from the ISR, bumping the
leader epoch, and tells only the live leader, since the follower is not registered any more. Resumed, the
follower still believes in the old epoch: its next fetch is fenced, it stops fetching and waits for the
LeaderAndIsr that its new registration brings, then catches up and rejoins the ISR.
"""

from __future__ import annotations

import signal

import pytest

from tests.harness import wait_until
from tests.replication.support import (
    FENCED_LEADER_EPOCH,
    NOT_LEADER_OR_FOLLOWER,
    SESSION_S,
    UNKNOWN_LEADER_EPOCH,
    broker_log_lines,
    controller_and_others,
    events,
    list_latest_offset,
    make_topic,
    offset_for_leader_epoch,
    produce_acknowledged,
    wait_for_event,
    wait_for_identical_replicas,
    wait_for_isr,
)
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos]
TOPIC = "fenced"


def test_a_follower_with_an_old_leader_epoch_is_fenced_until_its_leader_and_isr_arrives(cluster_factory):
    cluster = cluster_factory(brokers=2)
    leader, (follower,) = controller_and_others(cluster)
    make_topic(cluster, TOPIC, [leader, follower])
    produce_acknowledged(cluster, leader, TOPIC, [b"before"], acks=-1)
    registered = {b.broker_id: b.broker_epoch for b in cluster.state(topics=[]).brokers}

    cluster.signal(follower, signal.SIGSTOP)
    try:
        shrunk = wait_for_isr(cluster, TOPIC, [leader], SESSION_S + 15)
        assert shrunk.leader_epoch == 1  # the controller's ISR change bumps the epoch
        wait_for_event(cluster, leader, te.ReplicaRoleChanged, 10, topic=TOPIC, role="leader", leader_epoch=1)
        produce_acknowledged(cluster, leader, TOPIC, [b"while-paused"], acks=-1)
    finally:
        cluster.signal(follower, signal.SIGCONT)

    # the follower's next fetch named epoch 0; the leader (epoch 1) fenced it
    fenced = wait_until(lambda: broker_log_lines(cluster, follower, f"fenced by leader {leader}"), 10,
                        "the follower to log that the leader fenced it")
    assert f"{TOPIC}-0" in fenced[0] and "epoch 0 is old" in fenced[0]
    # it follows again only in epoch 1, from the LeaderAndIsr sent after it registered again
    wait_for_event(cluster, follower, te.ReplicaRoleChanged, 20, topic=TOPIC, role="follower", leader_epoch=1)
    again = wait_until(lambda: next((b for b in cluster.state(topics=[]).brokers if b.broker_id == follower
                                     and b.broker_epoch > registered[follower]), None), 10, "re-registration")
    assert again.broker_epoch > registered[follower]
    wait_for_isr(cluster, TOPIC, [leader, follower], 20)
    expanded = wait_for_event(cluster, leader, te.IsrChanged, 10, topic=TOPIC, kind="expand")
    assert expanded.leader_epoch == 1 and sorted(expanded.new_isr) == sorted([leader, follower])
    wait_for_identical_replicas(cluster, TOPIC, [leader, follower], 10)
    assert not [e for e in events(cluster, follower, te.FollowerTruncated, topic=TOPIC) if e.leader_epoch < 1]

    # the same fence on the client plane: KIP-320 consumers send current_leader_epoch too
    assert offset_for_leader_epoch(cluster, leader, TOPIC, current_leader_epoch=0, leader_epoch=0)[0] \
        == FENCED_LEADER_EPOCH
    assert offset_for_leader_epoch(cluster, leader, TOPIC, current_leader_epoch=2, leader_epoch=0)[0] \
        == UNKNOWN_LEADER_EPOCH
    # epoch 0 ends where epoch 1 starts: at offset 1, where the leader's LEO was when the ISR shrank
    assert offset_for_leader_epoch(cluster, leader, TOPIC, current_leader_epoch=1, leader_epoch=0) == (0, 0, 1)
    assert list_latest_offset(cluster, leader, TOPIC, current_leader_epoch=0)[0] == FENCED_LEADER_EPOCH
    assert list_latest_offset(cluster, leader, TOPIC, current_leader_epoch=1) == (0, 2, 1)
    # a follower is not asked: it answers NOT_LEADER_OR_FOLLOWER whatever the epoch
    assert list_latest_offset(cluster, follower, TOPIC, current_leader_epoch=1)[0] == NOT_LEADER_OR_FOLLOWER
