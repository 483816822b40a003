"""Static membership (KIP-345) at the coordinator, driven directly with an injected clock: a member with a
group.instance.id that restarts takes its old place without a rebalance, older incarnations are fenced
(FENCED_INSTANCE_ID), static members leave only by session timeout or a LeaveGroup naming them, and the group
record keeps their instance ids across a coordinator failover."""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode

from broker.group import records as rec
from broker.group.coordinator import GroupCoordinator
from broker.group.metadata import GroupState, JoinResult, OffsetAndMetadata
from tests.groups.test_coordinator_rules import (
    GROUP,
    INITIAL_DELAY_MS,
    REBALANCE_MS,
    SESSION_MS,
    Harness,
)

RANGE = [("range", b"r")]


def join(h: Harness, instance: str | None, member_id: str = "", protocols=RANGE) -> list[JoinResult]:
    answers: list[JoinResult] = []
    h.coordinator.handle_join_group(GROUP, member_id, instance, True, "client", "/127.0.0.1", REBALANCE_MS,
                                    SESSION_MS, "consumer", list(protocols), answers.append)
    return answers


def sync(h: Harness, member_id: str, generation: int, assignments=None, instance: str | None = None) -> list:
    answers: list = []
    h.coordinator.handle_sync_group(GROUP, generation, member_id, assignments or {},
                                    lambda error, assignment: answers.append((error, assignment)), instance)
    return answers


def static_pair(h: Harness, protocols=RANGE) -> tuple[str, str, int]:
    """Two static members, a (leader) with assignment A and b with B, Stable."""
    a_join = join(h, "inst-a", protocols=protocols)
    b_join = join(h, "inst-b", protocols=protocols)
    h.advance(2 * INITIAL_DELAY_MS)
    a, b, generation = a_join[0].member_id, b_join[0].member_id, a_join[0].generation_id
    assert a_join[0].leader_id == a and a.startswith("inst-a-") and b.startswith("inst-b-")
    sync(h, b, generation, instance="inst-b")
    sync(h, a, generation, {a: b"A", b: b"B"}, instance="inst-a")
    assert h.group.state is GroupState.STABLE
    return a, b, generation


def test_a_static_member_joins_without_member_id_required():
    h = Harness()
    (answer,) = join(h, "inst-a") or [None]
    assert answer is None  # waiting in the initial delay, already a member
    assert [m.group_instance_id for m in h.group.members.values()] == ["inst-a"] and not h.group.pending_members


def test_a_restarted_static_member_gets_its_assignment_back_without_a_rebalance():
    h = Harness()
    a, b, generation = static_pair(h)
    changes = len(h.changes)
    (answer,) = join(h, "inst-b")
    new_b = answer.member_id
    assert answer.error == ErrorCode.none and new_b != b and new_b.startswith("inst-b-")
    assert answer.generation_id == generation and answer.leader_id == a and answer.members == ()
    assert h.group.state is GroupState.STABLE and len(h.changes) == changes and h.group.generation_id == generation
    assert set(h.group.members) == {a, new_b}
    assert sync(h, new_b, generation, instance="inst-b") == [(ErrorCode.none, b"B")]
    stored = rec.decode_group_value(h.store.entries[-1][2])
    assert {m.member_id: (m.group_instance_id, m.assignment) for m in stored.members} == {
        a: ("inst-a", b"A"), new_b: ("inst-b", b"B")}
    assert stored.generation_id == generation


def test_a_restarted_static_leader_is_answered_with_the_old_leader_id_so_it_does_not_assign():
    h = Harness()
    a, _b, generation = static_pair(h)
    (answer,) = join(h, "inst-a")
    assert answer.leader_id == a != answer.member_id and answer.generation_id == generation
    assert h.group.leader_id == answer.member_id and h.group.state is GroupState.STABLE
    assert sync(h, answer.member_id, generation, instance="inst-a") == [(ErrorCode.none, b"A")]


def test_the_old_incarnation_of_a_static_member_is_fenced_everywhere():
    h = Harness()
    a, b, generation = static_pair(h)
    (answer,) = join(h, "inst-b")
    c = h.coordinator
    assert c.handle_heartbeat(GROUP, b, generation, "inst-b") == ErrorCode.fenced_instance_id
    assert c.handle_heartbeat(GROUP, answer.member_id, generation, "inst-b") == ErrorCode.none
    assert sync(h, b, generation, instance="inst-b") == [(ErrorCode.fenced_instance_id, b"")]
    assert join(h, "inst-b", b)[0].error == ErrorCode.fenced_instance_id
    commits: list = []
    c.handle_commit_offsets(GROUP, b, generation, {("t", 0): OffsetAndMetadata(1)}, commits.append, "inst-b")
    assert commits == [{("t", 0): ErrorCode.fenced_instance_id}]
    assert c.handle_leave_group(GROUP, [b], ["inst-b"]) == (ErrorCode.none, [ErrorCode.fenced_instance_id])
    # a static member joining with a member id the group never gave its instance starts over
    assert join(h, "inst-z", a)[0].error == ErrorCode.unknown_member_id
    assert h.group.state is GroupState.STABLE and len(h.group.members) == 2


def test_a_static_member_that_misses_a_rebalance_stays_until_its_session_ends():
    h = Harness()
    a, b, generation = static_pair(h)
    (new_c,) = join(h, None)  # a dynamic member arrives: MEMBER_ID_REQUIRED, then joins
    c_join = join(h, None, new_c.member_id)
    a_join = join(h, "inst-a", a)
    for _ in range(REBALANCE_MS // 1000):  # b does not rejoin, but heartbeats (as a restarting process would not)
        h.advance(1000)
        h.coordinator.handle_heartbeat(GROUP, b, generation, "inst-b")
    assert a_join and c_join and a_join[0].generation_id == generation + 1
    assert b in h.group.members and {m[0] for m in a_join[0].members} == {a, b, new_c.member_id}
    # silent now: the session timeout removes it, and the others rebalance without it
    h.advance(SESSION_MS + 100)
    assert b not in h.group.members


def test_leave_group_by_instance_id_alone_removes_the_static_member():
    h = Harness()
    a, _b, _generation = static_pair(h)
    assert h.coordinator.handle_leave_group(GROUP, ["", ""], ["inst-b", "inst-x"]) == (
        ErrorCode.none, [ErrorCode.none, ErrorCode.unknown_member_id])
    assert set(h.group.members) == {a} and h.group.state is GroupState.PREPARING_REBALANCE


def test_a_failed_write_keeps_the_old_incarnation():
    h = Harness()
    _a, b, generation = static_pair(h)
    h.store.error = ErrorCode.not_leader_or_follower
    (answer,) = join(h, "inst-b")
    assert answer.error == ErrorCode.not_coordinator and answer.member_id == ""
    assert b in h.group.members and h.group.state is GroupState.STABLE
    h.store.error = ErrorCode.none
    assert h.coordinator.handle_heartbeat(GROUP, b, generation, "inst-b") == ErrorCode.none


def test_a_static_rejoin_with_another_protocol_or_during_completing_rebalance_rebalances():
    h = Harness()
    static_pair(h, [("range", b""), ("roundrobin", b"")])
    assert join(h, "inst-b", protocols=[("roundrobin", b"")]) == []  # the vote would now pick roundrobin
    assert h.group.state is GroupState.PREPARING_REBALANCE

    h = Harness()
    a_join = join(h, "inst-a")
    join(h, "inst-b")
    h.advance(2 * INITIAL_DELAY_MS)
    assert h.group.state is GroupState.COMPLETING_REBALANCE
    assert join(h, "inst-b") == [] and h.group.state is GroupState.PREPARING_REBALANCE
    assert a_join[0].generation_id == 1


def test_a_new_coordinator_keeps_static_members_and_their_rejoin_needs_no_rebalance():
    h = Harness()
    a, b, generation = static_pair(h)
    other = Harness()
    other.coordinator = GroupCoordinator(2, h.coordinator.config, other.store.append, lambda: other.now)
    other.coordinator.heartbeat_purgatory.advance_clock(other.now)
    other.coordinator.join_purgatory.advance_clock(other.now)
    other.coordinator.load_partition(h.coordinator.partition_of(GROUP), [(k, v) for _, k, v in h.store.entries])
    group = other.group
    assert group.state is GroupState.STABLE and group.generation_id == generation
    assert {m.member_id: m.group_instance_id for m in group.members.values()} == {a: "inst-a", b: "inst-b"}
    (answer,) = join(other, "inst-b")
    assert answer.error == ErrorCode.none and answer.generation_id == generation
    assert sync(other, answer.member_id, generation, instance="inst-b") == [(ErrorCode.none, b"B")]


def test_below_inter_broker_protocol_2_3_an_instance_id_is_unsupported_version():
    h = Harness()
    h.coordinator.config = dataclasses.replace(h.coordinator.config, static_membership=False)
    (answer,) = join(h, "inst-a")
    assert (answer.error, answer.member_id) == (ErrorCode.unsupported_version, "")
    assert sync(h, "m", 1, instance="inst-a") == [(ErrorCode.unsupported_version, b"")]
    assert h.coordinator.handle_heartbeat(GROUP, "m", 1, "inst-a") == ErrorCode.unsupported_version
    commits: list = []
    h.coordinator.handle_commit_offsets(GROUP, "m", 1, {("t", 0): OffsetAndMetadata(1)}, commits.append, "inst-a")
    assert commits == [{("t", 0): ErrorCode.unsupported_version}]
    assert join(h, None)[0].error == ErrorCode.member_id_required  # dynamic members are unaffected


def test_static_membership_follows_the_inter_broker_protocol_version():
    from broker.config import KafkaConfig
    from broker.group.manager import group_config

    def config(**extra: str) -> KafkaConfig:
        return KafkaConfig(**{"broker.id": 1, "zookeeper.connect": "127.0.0.1:2181", **extra})

    assert group_config(config()).static_membership
    assert group_config(config(**{"inter.broker.protocol.version": "2.3"})).static_membership
    assert not group_config(config(**{"inter.broker.protocol.version": "2.2-IV1"})).static_membership
