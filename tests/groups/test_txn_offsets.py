"""Transactional offset commits in the group coordinator (TxnOffsetCommit, KIP-98/447), driven directly: pending per
producer until its marker, COMMIT applies only what is newer in the log, ABORT drops, OffsetFetch with
require_stable, expiry keeps the group, and a coordinator replaying the partition rebuilds the same state."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.group.coordinator import GroupCoordinator
from broker.group.manager import logged_records
from broker.group.metadata import GroupState, OffsetAndMetadata
from broker.group.replay import LoggedRecord, TxnMarker
from broker.log.records import Record, build_batch, build_end_txn_marker
from tests.groups.test_coordinator_rules import GROUP, Harness, Store, stable_group_of_two

ORDERS, AUDIT = ("orders", 0), ("audit", 1)
PID, OTHER_PID, EPOCH = 4000, 4001, 3
RETENTION_MS = 60_000


def txn_commit(h: Harness, offsets: dict, producer_id: int = PID, member_id: str = "", generation: int = -1,
               instance_id: str | None = None) -> dict:
    answers: list[dict] = []
    h.coordinator.handle_txn_commit_offsets(GROUP, producer_id, EPOCH, member_id, instance_id, generation,
                                            offsets, answers.append)
    (answer,) = answers
    return answer


def fetch(h: Harness, *partitions, require_stable: bool = False) -> dict:
    error, offsets = h.coordinator.handle_fetch_offsets(GROUP, list(partitions), require_stable)
    assert error == ErrorCode.none
    return {tp: v if v is None or isinstance(v, ErrorCode) else v.offset for tp, v in offsets.items()}


def complete(h: Harness, producer_id: int, committed: bool) -> int:
    h.store.marker(producer_id, committed)
    return h.coordinator.handle_txn_completion(producer_id, [h.coordinator.partition_of(GROUP)], committed)


def reload(h: Harness) -> GroupCoordinator:
    other = GroupCoordinator(2, h.coordinator.config, Store().append, lambda: h.now)
    other.load_partition(h.coordinator.partition_of(GROUP), h.store.log)
    return other


def test_a_txn_commit_is_written_transactionally_and_stays_invisible_until_the_commit_marker():
    h = Harness()
    assert txn_commit(h, {ORDERS: OffsetAndMetadata(10)}) == {ORDERS: ErrorCode.none}
    (record,) = h.store.log
    assert record.transactional and record.producer_id == PID
    assert fetch(h, ORDERS) == {ORDERS: None}
    assert fetch(h, ORDERS, AUDIT, require_stable=True) == {ORDERS: ErrorCode.unstable_offset_commit, AUDIT: None}
    assert complete(h, PID, committed=True) == 1
    assert fetch(h, ORDERS, require_stable=True) == {ORDERS: 10}


def test_an_abort_marker_drops_the_pending_offsets_and_keeps_the_committed_ones():
    h = Harness()
    h.commit("", -1, {ORDERS: OffsetAndMetadata(5)})
    txn_commit(h, {ORDERS: OffsetAndMetadata(10)})
    assert complete(h, PID, committed=False) == 0
    assert fetch(h, ORDERS, require_stable=True) == {ORDERS: 5}
    assert h.group.pending_txn_offsets == {}


def test_a_marker_completes_only_its_own_producers_offsets_and_only_on_its_partition():
    h = Harness()
    txn_commit(h, {ORDERS: OffsetAndMetadata(10)})
    txn_commit(h, {AUDIT: OffsetAndMetadata(20)}, producer_id=OTHER_PID)
    other_partition = (h.coordinator.partition_of(GROUP) + 1) % 3
    assert h.coordinator.handle_txn_completion(PID, [other_partition], True) == 0
    assert complete(h, PID, committed=True) == 1
    assert fetch(h, ORDERS, AUDIT) == {ORDERS: 10, AUDIT: None}
    assert list(h.group.pending_txn_offsets) == [OTHER_PID]


def test_a_regular_commit_written_after_the_txn_commit_is_not_overwritten_by_its_completion():
    h = Harness()
    txn_commit(h, {ORDERS: OffsetAndMetadata(10), AUDIT: OffsetAndMetadata(20)})
    h.commit("", -1, {ORDERS: OffsetAndMetadata(7)})  # later in the log than the transactional batch
    complete(h, PID, committed=True)
    assert fetch(h, ORDERS, AUDIT) == {ORDERS: 7, AUDIT: 20}
    # and a replay of the same log agrees
    error, offsets = reload(h).handle_fetch_offsets(GROUP, [ORDERS, AUDIT])
    assert error == ErrorCode.none
    assert {tp: v.offset for tp, v in offsets.items()} == {ORDERS: 7, AUDIT: 20}


def test_a_group_that_does_not_exist_is_created_empty_to_hold_the_pending_offsets():
    h = Harness()
    assert GROUP not in h.coordinator.groups
    txn_commit(h, {ORDERS: OffsetAndMetadata(10)})
    assert h.group.state is GroupState.EMPTY and h.group.offsets == {}


def test_v3_checks_the_member_and_generation_only_when_given():
    h = Harness()
    a, _b, generation = stable_group_of_two(h)
    assert txn_commit(h, {ORDERS: OffsetAndMetadata(1)}, member_id=a, generation=generation + 1) == {
        ORDERS: ErrorCode.illegal_generation}
    assert txn_commit(h, {ORDERS: OffsetAndMetadata(1)}, member_id="ghost", generation=generation) == {
        ORDERS: ErrorCode.unknown_member_id}
    assert txn_commit(h, {ORDERS: OffsetAndMetadata(1)}, member_id=a, generation=generation) == {
        ORDERS: ErrorCode.none}
    # v0-v2 send no member and no generation: nothing to check
    assert txn_commit(h, {AUDIT: OffsetAndMetadata(2)}) == {AUDIT: ErrorCode.none}


def test_oversized_metadata_is_refused_per_partition_and_the_rest_is_written():
    h = Harness()
    big = OffsetAndMetadata(1, metadata="x" * (h.coordinator.config.offset_metadata_max_bytes + 1))
    assert txn_commit(h, {ORDERS: big, AUDIT: OffsetAndMetadata(2)}) == {
        ORDERS: ErrorCode.offset_metadata_too_large, AUDIT: ErrorCode.none}
    assert list(h.group.pending_txn_offsets[PID]) == [AUDIT]


def test_a_failed_write_forgets_the_pending_offsets_and_answers_the_mapped_error():
    h = Harness()
    h.store.error = ErrorCode.not_leader_or_follower
    assert txn_commit(h, {ORDERS: OffsetAndMetadata(10)}) == {ORDERS: ErrorCode.not_coordinator}
    assert h.group.pending_txn_offsets == {}
    assert fetch(h, ORDERS, require_stable=True) == {ORDERS: None}


def test_a_partition_this_broker_does_not_lead_is_not_coordinator_and_one_loading_is_load_in_progress():
    h = Harness()
    partition = h.coordinator.partition_of(GROUP)
    h.coordinator.unload_partition(partition)
    assert txn_commit(h, {ORDERS: OffsetAndMetadata(10)}) == {ORDERS: ErrorCode.not_coordinator}
    h.coordinator.begin_loading(partition)
    assert txn_commit(h, {ORDERS: OffsetAndMetadata(10)}) == {ORDERS: ErrorCode.coordinator_load_in_progress}
    assert h.store.log == []


def test_expiry_keeps_an_empty_group_while_a_transaction_holds_offsets_for_it():
    h = Harness()
    txn_commit(h, {ORDERS: OffsetAndMetadata(10, commit_timestamp=h.now)})
    h.now += 10 * RETENTION_MS
    assert h.coordinator.cleanup_group_metadata(RETENTION_MS) == 0
    assert GROUP in h.coordinator.groups and PID in h.group.pending_txn_offsets
    complete(h, PID, committed=False)
    h.coordinator.cleanup_group_metadata(RETENTION_MS)
    assert GROUP not in h.coordinator.groups  # nothing left: Kafka removes it


def test_replaying_the_log_applies_committed_transactions_drops_aborted_ones_and_keeps_open_ones_pending():
    h = Harness()
    txn_commit(h, {ORDERS: OffsetAndMetadata(10)}, producer_id=PID)
    txn_commit(h, {AUDIT: OffsetAndMetadata(20)}, producer_id=OTHER_PID)
    complete(h, PID, committed=True)
    complete(h, OTHER_PID, committed=False)
    txn_commit(h, {AUDIT: OffsetAndMetadata(30)}, producer_id=OTHER_PID)  # no marker yet
    other = reload(h)
    error, offsets = other.handle_fetch_offsets(GROUP, [ORDERS, AUDIT], True)
    assert error == ErrorCode.none
    assert offsets[ORDERS].offset == 10 and offsets[AUDIT] == ErrorCode.unstable_offset_commit
    # the marker written after the failover completes what the replay left pending
    assert other.handle_txn_completion(OTHER_PID, [other.partition_of(GROUP)], True) == 1
    assert other.handle_fetch_offsets(GROUP, [AUDIT])[1][AUDIT].offset == 30


def test_the_log_reader_yields_transactional_records_and_the_markers_of_real_batches():
    key, value = b"\x00\x01k", b"v"
    plain = build_batch([Record(key, value, 1)], base_offset=0)
    txn = build_batch([Record(key, value, 1)], base_offset=1, producer_id=PID, producer_epoch=EPOCH,
                      transactional=True)
    marker = bytearray(build_end_txn_marker(producer_id=PID, producer_epoch=EPOCH, abort=False, timestamp=1))
    marker[0:8] = (2).to_bytes(8, "big")  # base offset 2, as the log assigns it
    assert list(logged_records(plain + txn + bytes(marker))) == [
        LoggedRecord(key, value, 0, -1, False), LoggedRecord(key, value, 1, PID, True), TxnMarker(PID, True)]
    assert list(logged_records(plain + txn + bytes(marker), from_offset=2)) == [TxnMarker(PID, True)]
