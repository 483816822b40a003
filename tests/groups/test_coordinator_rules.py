"""The group coordinator's rules, driven directly with an injected clock: joins, the protocol vote,
SyncGroup, heartbeats and session expiry, LeaveGroup, offset commits with generation checks, and loading a
partition's groups from the records another coordinator wrote."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.group import records as rec
from broker.group.coordinator import GroupConfig, GroupCoordinator, java_string_hash, partition_for
from broker.group.manager import keys_and_values
from broker.group.metadata import GroupState, JoinResult, OffsetAndMetadata
from broker.group.replay import LoggedRecord, TxnMarker
from broker.log.records import Record, build_batch

GROUP = "orders-app"
SESSION_MS, REBALANCE_MS, INITIAL_DELAY_MS = 10_000, 30_000, 3_000
T0 = 1_000_000


class Store:
    """What the coordinator appends to __consumer_offsets, answered at once or held (not yet replicated)."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, bytes, bytes | None]] = []
        # the log as a coordinator replaying it sees it: records with their batch's offset and producer, markers
        self.log: list = []
        self.held: list = []
        self.hold = False
        self.error = ErrorCode.none

    def append(self, partition, entries, done, producer=None) -> None:
        if self.error != ErrorCode.none:
            done(self.error)
            return
        base_offset = len(self.log)
        self.entries += [(partition, key, value) for key, value in entries]
        producer_id = -1 if producer is None else producer[0]
        self.log += [LoggedRecord(key, value, base_offset, producer_id, producer is not None) for key, value in entries]
        if self.hold:
            self.held.append((done, base_offset))
        else:
            done(ErrorCode.none, base_offset)

    def marker(self, producer_id: int, committed: bool) -> None:
        self.log.append(TxnMarker(producer_id, committed))

    def release(self) -> None:
        held, self.held = self.held, []
        for done, base_offset in held:
            done(ErrorCode.none, base_offset)


class Harness:
    def __init__(self, partitions: int = 3) -> None:
        self.store = Store()
        self.now = T0
        self.changes: list[tuple[str, str]] = []
        self.coordinator = GroupCoordinator(
            1, GroupConfig(offsets_topic_partitions=partitions, initial_rebalance_delay_ms=INITIAL_DELAY_MS),
            self.store.append, lambda: self.now,
            lambda group, old, reason: self.changes.append((old, group.state.value)))
        # time starts at T0 on both wheels
        self.coordinator.heartbeat_purgatory.advance_clock(T0)
        self.coordinator.join_purgatory.advance_clock(T0)
        self.coordinator.load_partition(self.coordinator.partition_of(GROUP), [])

    def advance(self, ms: int) -> None:
        # in small steps, as the loop's timer would: an expiry that schedules the next one reads the clock
        end = self.now + ms
        while self.now < end:
            self.now = min(end, self.now + 10)
            self.coordinator.join_purgatory.advance_clock(self.now)
            self.coordinator.heartbeat_purgatory.advance_clock(self.now)

    def join(self, member_id: str = "", protocols=(("range", b"r"),), *, session_ms: int = SESSION_MS,
             require_known: bool = True, protocol_type: str = "consumer") -> list[JoinResult]:
        answers: list[JoinResult] = []
        self.coordinator.handle_join_group(GROUP, member_id, None, require_known, "client", "/127.0.0.1",
                                           REBALANCE_MS, session_ms, protocol_type, list(protocols),
                                           answers.append)
        return answers

    def new_member(self, protocols=(("range", b"r"),)) -> tuple[str, list[JoinResult]]:
        (required,) = self.join("", protocols)
        assert required.error == ErrorCode.member_id_required
        return required.member_id, self.join(required.member_id, protocols)

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None) -> list:
        answers: list = []
        self.coordinator.handle_sync_group(GROUP, generation, member_id, assignments or {},
                                           lambda error, assignment: answers.append((error, assignment)))
        return answers

    def commit(self, member_id: str, generation: int, offsets: dict) -> list[dict]:
        answers: list[dict] = []
        self.coordinator.handle_commit_offsets(GROUP, member_id, generation, offsets, answers.append)
        return answers

    @property
    def group(self):
        return self.coordinator.groups[GROUP]


def stable_group_of_two(h: Harness) -> tuple[str, str, int]:
    a, a_join = h.new_member()
    b, _b_join = h.new_member()
    h.advance(2 * INITIAL_DELAY_MS)  # the second member extended the initial delay once
    generation = a_join[0].generation_id
    h.sync(b, generation)
    h.sync(a, generation, {a: b"A", b: b"B"})
    assert h.group.state is GroupState.STABLE
    return a, b, generation


def test_a_new_member_is_asked_to_come_back_with_the_id_it_was_given():
    h = Harness()
    (answer,) = h.join("")
    assert answer.error == ErrorCode.member_id_required and answer.member_id.startswith("client-")
    assert h.group.members == {} and answer.member_id in h.group.pending_members


def test_members_arriving_during_the_initial_delay_extend_it_and_form_one_generation_seen_by_the_leader():
    h = Harness()
    a, a_join = h.new_member([("range", b"meta-a")])
    h.advance(INITIAL_DELAY_MS - 1000)
    b, b_join = h.new_member([("range", b"meta-b")])
    h.advance(1000)
    assert a_join == [] and b_join == []  # b arrived during the delay: it is extended once more
    h.advance(INITIAL_DELAY_MS)
    assert a_join[0].generation_id == b_join[0].generation_id == 1
    assert a_join[0].leader_id == a and {m[0]: m[2] for m in a_join[0].members} == {a: b"meta-a", b: b"meta-b"}
    assert b_join[0].members == ()
    assert h.group.state is GroupState.COMPLETING_REBALANCE


def test_the_protocol_is_chosen_by_each_members_first_choice_among_those_all_support():
    h = Harness()
    _, first = h.new_member([("range", b""), ("roundrobin", b"")])
    _, second = h.new_member([("roundrobin", b""), ("range", b"")])
    _, third = h.new_member([("roundrobin", b""), ("cooperative-sticky", b""), ("range", b"")])
    h.advance(2 * INITIAL_DELAY_MS)
    assert first[0].protocol_name == second[0].protocol_name == third[0].protocol_name == "roundrobin"


def test_a_member_with_no_protocol_in_common_is_refused_and_the_group_keeps_its_members():
    h = Harness()
    _a, _, generation = stable_group_of_two(h)
    (answer,) = h.join("", [("cooperative-sticky", b"")])
    assert answer.error == ErrorCode.inconsistent_group_protocol
    (other_type,) = h.join("", [("range", b"")], protocol_type="connect")
    assert other_type.error == ErrorCode.inconsistent_group_protocol
    assert h.group.state is GroupState.STABLE and len(h.group.members) == 2 and h.group.generation_id == generation


def test_a_session_timeout_outside_the_brokers_bounds_is_refused():
    h = Harness()
    for session_ms in (5_999, 1_800_001):
        (answer,) = h.join("", session_ms=session_ms)
        assert answer.error == ErrorCode.invalid_session_timeout
    assert GROUP not in h.coordinator.groups


def test_sync_answers_every_member_only_once_the_leaders_assignment_is_replicated():
    h = Harness()
    a, a_join = h.new_member()
    b, _ = h.new_member()
    h.advance(2 * INITIAL_DELAY_MS)
    generation = a_join[0].generation_id
    follower = h.sync(b, generation)
    h.store.hold = True
    leader = h.sync(a, generation, {a: b"A", b: b"B", "stranger": b"X"})
    assert follower == [] and leader == [] and h.group.state is GroupState.COMPLETING_REBALANCE
    h.store.release()
    assert leader == [(ErrorCode.none, b"A")] and follower == [(ErrorCode.none, b"B")]
    assert h.group.state is GroupState.STABLE
    stored = rec.decode_group_value(h.store.entries[-1][2])
    assert stored.generation_id == generation and {m.member_id: m.assignment for m in stored.members} == {
        a: b"A", b: b"B"}


def test_a_failed_group_write_sends_the_members_back_to_rejoin():
    h = Harness()
    a, a_join = h.new_member()
    h.advance(INITIAL_DELAY_MS)
    h.store.error = ErrorCode.not_leader_or_follower
    assert h.sync(a, a_join[0].generation_id, {a: b"A"}) == [(ErrorCode.not_coordinator, b"")]
    assert h.group.state is GroupState.PREPARING_REBALANCE


def test_heartbeats_say_whether_the_member_must_rejoin():
    h = Harness()
    a, b, generation = stable_group_of_two(h)
    c = h.coordinator
    assert c.handle_heartbeat(GROUP, a, generation) == ErrorCode.none
    assert c.handle_heartbeat(GROUP, a, generation - 1) == ErrorCode.illegal_generation
    assert c.handle_heartbeat(GROUP, "nobody", generation) == ErrorCode.unknown_member_id
    h.join(a)  # the leader rejoins: a rebalance starts
    assert c.handle_heartbeat(GROUP, b, generation) == ErrorCode.rebalance_in_progress
    assert c.handle_heartbeat("other-group", a, generation) in (ErrorCode.not_coordinator,
                                                                       ErrorCode.unknown_member_id)


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout():
    h = Harness()
    a, b, generation = stable_group_of_two(h)
    for _ in range(4):  # a keeps heartbeating, b is silent
        h.advance(SESSION_MS // 4 - 100)
        assert h.coordinator.handle_heartbeat(GROUP, a, generation) == ErrorCode.none
    assert b in h.group.members
    h.advance(500)
    assert b not in h.group.members and h.group.state is GroupState.PREPARING_REBALANCE
    rejoin = h.join(a)
    assert rejoin[0].error == ErrorCode.none and rejoin[0].generation_id == generation + 1
    assert [m[0] for m in rejoin[0].members] == [a]


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_dropped():
    h = Harness()
    a, b, generation = stable_group_of_two(h)
    answers = h.join(a)
    for _ in range(REBALANCE_MS // 2000):  # b only heartbeats, it never rejoins
        h.advance(2000)
        h.coordinator.handle_heartbeat(GROUP, b, generation)
    h.advance(1000)
    assert answers[0].generation_id == generation + 1 and set(h.group.members) == {a}


def test_leave_group_removes_several_members_at_once_and_reports_unknown_ones():
    h = Harness()
    a, b, _ = stable_group_of_two(h)
    error, errors = h.coordinator.handle_leave_group(GROUP, [a, "ghost", b])
    assert error == ErrorCode.none and errors == [ErrorCode.none, ErrorCode.unknown_member_id, ErrorCode.none]
    assert h.group.members == {}
    h.advance(INITIAL_DELAY_MS)
    assert h.group.state is GroupState.EMPTY


def test_commits_are_checked_against_the_generation_and_member():
    h = Harness()
    a, _b, generation = stable_group_of_two(h)
    tp = ("orders", 0)
    assert h.commit(a, generation, {tp: OffsetAndMetadata(5, 3)}) == [{tp: ErrorCode.none}]
    assert h.commit(a, generation - 1, {tp: OffsetAndMetadata(9)}) == [{tp: ErrorCode.illegal_generation}]
    assert h.commit("ghost", generation, {tp: OffsetAndMetadata(9)}) == [{tp: ErrorCode.unknown_member_id}]
    assert h.coordinator.handle_fetch_offsets(GROUP, [tp, ("orders", 1)]) == (
        ErrorCode.none, {tp: h.group.offsets[tp], ("orders", 1): None})
    assert h.group.offsets[tp].offset == 5 and h.group.offsets[tp].leader_epoch == 3
    h.join(a)
    h.advance(SESSION_MS)  # b never rejoined and its session ended; the new generation waits for SyncGroup
    assert h.group.state is GroupState.COMPLETING_REBALANCE and set(h.group.members) == {a}
    assert h.commit(a, generation + 1, {tp: OffsetAndMetadata(7)}) == [{tp: ErrorCode.rebalance_in_progress}]


def test_an_assign_mode_consumer_commits_without_a_generation():
    h = Harness()
    tp = ("orders", 2)
    assert h.commit("", -1, {tp: OffsetAndMetadata(42)}) == [{tp: ErrorCode.none}]
    assert h.group.state is GroupState.EMPTY and h.group.offsets[tp].offset == 42


def test_a_commit_is_acknowledged_only_once_stored_and_a_lost_leadership_says_not_coordinator():
    h = Harness()
    tp = ("orders", 0)
    h.store.hold = True
    answers = h.commit("", -1, {tp: OffsetAndMetadata(1)})
    assert answers == [] and tp not in h.group.offsets
    h.store.release()
    assert answers == [{tp: ErrorCode.none}]
    h.store.error = ErrorCode.not_leader_or_follower
    assert h.commit("", -1, {tp: OffsetAndMetadata(2)}) == [{tp: ErrorCode.not_coordinator}]
    assert h.group.offsets[tp].offset == 1
    too_long = OffsetAndMetadata(3, metadata="x" * 5000)
    h.store.error = ErrorCode.none
    assert h.commit("", -1, {tp: too_long}) == [{tp: ErrorCode.offset_metadata_too_large}]


def test_a_new_coordinator_loads_groups_and_offsets_from_the_records_of_the_old_one():
    old = Harness()
    a, b, generation = stable_group_of_two(old)
    tp = ("orders", 1)
    old.commit(a, generation, {tp: OffsetAndMetadata(10, 4, "m")})
    old.commit(a, generation, {tp: OffsetAndMetadata(12, 5, "n")})
    partition = old.coordinator.partition_of(GROUP)
    new = GroupCoordinator(2, old.coordinator.config, Store().append, lambda: T0)
    new.begin_loading(partition)
    assert new.coordinator_error(GROUP) == ErrorCode.coordinator_load_in_progress
    assert new.load_partition(partition, [(k, v) for _, k, v in old.store.entries]) == 1
    group = new.groups[GROUP]
    assert group.state is GroupState.STABLE and group.generation_id == generation
    assert set(group.members) == {a, b} and group.members[b].assignment == b"B"
    assert group.offsets[tp] == OffsetAndMetadata(12, 5, "n", -1)
    assert new.handle_heartbeat(GROUP, a, generation) == ErrorCode.none


def test_losing_leadership_answers_parked_joins_with_not_coordinator():
    h = Harness()
    _a, a_join = h.new_member()
    assert a_join == []
    assert h.coordinator.unload_partition(h.coordinator.partition_of(GROUP)) == 1
    assert a_join[0].error == ErrorCode.not_coordinator
    assert h.coordinator.coordinator_error(GROUP) == ErrorCode.not_coordinator
    assert h.changes[-1] == ("PreparingRebalance", "Dead")


def test_a_groups_partition_is_the_one_kafka_computes_from_javas_string_hash():
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50


def test_offsets_topic_records_read_back_as_written():
    key = rec.OffsetKey("g", "t", 7)
    value = rec.OffsetValue(123, 4, "meta", 1_700_000_000_000)
    assert rec.decode_key(rec.encode_key(key)) == key
    assert rec.decode_offset_value(rec.encode_offset_value(value)) == value
    group = rec.GroupValue("consumer", 3, "range", "m1", 5, (
        rec.MemberValue("m1", None, "c", "/h", 300000, 10000, b"sub", b"asg"),))
    assert rec.decode_group_value(rec.encode_group_value(group)) == group
    assert rec.decode_key(rec.encode_key(rec.GroupKey("g"))) == rec.GroupKey("g")


def test_the_manager_reads_back_every_record_of_its_batches_from_a_given_offset():
    entries = [(rec.encode_key(rec.GroupKey(f"g{i}")), None if i == 2 else b"v%d" % i) for i in range(4)]
    first = build_batch([Record(k, v, 1) for k, v in entries[:2]], base_offset=10)
    second = build_batch([Record(k, v, 1) for k, v in entries[2:]], base_offset=12)
    assert list(keys_and_values(first + second)) == entries
    assert list(keys_and_values(first + second, from_offset=11)) == entries[1:]
