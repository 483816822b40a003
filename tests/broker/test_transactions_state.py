"""The log side of transactions, driven directly: each producer's open transaction in the producer state, the
partition's ongoing and completed transactions, the LSO and the aborted-transaction entries (Kafka 2.8's
ProducerStateManager / Log.lastStableOffset rules)."""

from kio.schema.errors import ErrorCode

from broker.log.record_batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, BatchHeader
from broker.log.records import Record, build_batch, build_end_txn_marker
from broker.log.transactions import (
    ABORT,
    COMMIT,
    AbortedTxn,
    TransactionTracker,
    control_record_type,
    end_transaction_marker,
    last_stable_offset,
)
from broker.replication.producer_state import ProducerStateManager

TXN = TRANSACTIONAL_FLAG
MARKER = TRANSACTIONAL_FLAG | CONTROL_FLAG


def header(offset: int, producer_id: int, *, count: int = 1, attributes: int = TXN, epoch: int = 0,
           first_seq: int = 0) -> BatchHeader:
    return BatchHeader(base_offset=offset, batch_length=0, partition_leader_epoch=0, magic=2, crc=0,
                       attributes=attributes, last_offset_delta=count - 1, base_timestamp=1000,
                       max_timestamp=1000, producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=-1 if attributes & CONTROL_FLAG else first_seq, records_count=count)


def marker(offset: int, producer_id: int) -> BatchHeader:
    return header(offset, producer_id, attributes=MARKER)


# --- control records ---------------------------------------------------------------------------------------


def test_end_txn_marker_is_a_control_batch_with_kafkas_key_and_value():
    batch = build_end_txn_marker(producer_id=5, producer_epoch=2, abort=True, coordinator_epoch=9)
    assert batch[21:23] == b"\x00\x30"  # attributes: transactional | control
    assert control_record_type(batch) == ABORT
    assert control_record_type(build_end_txn_marker(producer_id=5, producer_epoch=2, abort=False)) == COMMIT
    # the record: key = version 0, type 0; value = version 0, coordinator epoch 9
    assert b"\x08\x00\x00\x00\x00" in batch  # key length 4 (zigzag 8), key bytes
    assert b"\x0c\x00\x00\x00\x00\x00\x09" in batch  # value length 6 (zigzag 12), value bytes


def control_batch(key: bytes | None, value: bytes | None) -> bytes:
    return build_batch([Record(key, value, 0)], producer_id=5, producer_epoch=2, base_sequence=-1,
                       transactional=True, control=True)


def test_end_txn_marker_gives_its_type_and_coordinator_epoch():
    commit = build_end_txn_marker(producer_id=5, producer_epoch=2, abort=False, coordinator_epoch=9)
    assert end_transaction_marker(commit) == (COMMIT, 9)
    assert end_transaction_marker(memoryview(commit)) == (COMMIT, 9)
    assert end_transaction_marker(build_end_txn_marker(producer_id=5, producer_epoch=2, abort=True)) == (ABORT, 0)


def test_a_control_record_that_is_no_end_txn_marker_has_a_type_but_no_marker():
    raft = control_batch(b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01")  # KIP-595's LEADER_CHANGE
    assert control_record_type(raft) == 2 and end_transaction_marker(raft) is None
    short_value = control_batch(b"\x00\x00\x00\x01", b"\x00\x00")
    assert control_record_type(short_value) == COMMIT and end_transaction_marker(short_value) is None
    for not_a_control_key in (b"\xff\xff\x00\x01", b"\x00\x01", None):  # a negative version, too short, none
        batch = control_batch(not_a_control_key, b"\x00\x00\x00\x00\x00\x01")
        assert control_record_type(batch) is None and end_transaction_marker(batch) is None


def test_a_batch_cut_short_is_no_marker():
    batch = build_end_txn_marker(producer_id=5, producer_epoch=2, abort=True, coordinator_epoch=9)
    ends_with_the_value = len(batch) - 1  # the record's last byte is its header count, after the value
    assert [end_transaction_marker(batch[:cut]) for cut in range(ends_with_the_value)] == [None] * ends_with_the_value
    assert end_transaction_marker(batch[:ends_with_the_value]) == (ABORT, 9)
    assert control_record_type(batch[:61]) is None


# --- the partition's transactions (TransactionTracker) -------------------------------------------------------


def test_a_transactional_batch_opens_a_transaction_its_marker_completes():
    tracker = TransactionTracker()
    assert tracker.append([(header(0, 1), None), (header(1, 1), None)]) == []
    assert tracker.ongoing == {1: 0}
    assert tracker.first_unstable_offset(high_watermark=2) == 0
    assert tracker.append([(marker(2, 1), COMMIT)]) == []  # a commit is never indexed
    assert tracker.ongoing == {}
    # decided, but the marker is not below the HW yet: still unstable
    assert tracker.first_unstable_offset(high_watermark=2) == 0
    assert tracker.first_unstable_offset(high_watermark=3) is None


def test_an_abort_is_indexed_with_the_lso_of_the_other_producers():
    tracker = TransactionTracker()
    tracker.append([(header(0, 1), None)])
    tracker.append([(header(1, 2), None)])
    tracker.append([(header(2, 1), None)])
    # producer 2's transaction (from 1) is still open: the entry's LSO is 1
    assert tracker.append([(marker(3, 1), ABORT)]) == [AbortedTxn(1, 0, 3, 1)]
    assert tracker.first_unstable_offset(high_watermark=3) == 0  # the marker is not replicated yet
    assert tracker.first_unstable_offset(high_watermark=4) == 1
    # nothing else open: LSO = marker + 1
    assert tracker.append([(marker(4, 2), ABORT)]) == [AbortedTxn(2, 1, 4, 5)]


def test_empty_transactions_unknown_controls_and_plain_batches_leave_no_trace():
    tracker = TransactionTracker()
    assert tracker.append([(marker(0, 1), ABORT)]) == []  # marker without data
    assert tracker.append([(header(1, 1), 7)]) == []  # not a control batch
    assert tracker.append([(marker(2, 1), 3)]) == []  # an UNKNOWN control type is ignored
    assert tracker.ongoing == {1: 1}
    tracker.append([(header(3, -1, attributes=0), None), (header(4, 2, attributes=0), None)])
    assert tracker.ongoing == {1: 1}


def test_a_transaction_started_in_the_same_append_counts_for_the_lso():
    tracker = TransactionTracker()
    tracker.append([(header(0, 1), None)])
    assert tracker.append([(header(1, 2), None), (marker(2, 1), ABORT)]) == [AbortedTxn(1, 0, 2, 1)]


def test_lso_is_the_first_unstable_offset_bounded_by_the_high_watermark():
    assert last_stable_offset(10, None) == 10
    assert last_stable_offset(10, 4) == 4
    assert last_stable_offset(10, 10) == 10
    assert last_stable_offset(3, 4) == 3


# --- each producer's open transaction (ProducerStateManager) ------------------------------------------------


def test_producer_state_tracks_the_current_transaction_first_offset():
    state = ProducerStateManager()
    state.record_header(header(0, 1, count=2, attributes=TXN))
    state.record_header(header(2, 1, count=1, attributes=TXN, first_seq=2))
    assert state.producers[1].current_txn_first_offset == 0
    state.record_header(marker(3, 1))
    assert state.producers[1].current_txn_first_offset is None
    # the idempotent rules still hold after a marker: the next sequence is 3
    assert state.check(1, 0, 3, 3, transactional=True).should_append
    assert state.check(1, 0, 5, 5, transactional=True).error_code is ErrorCode.out_of_order_sequence_number


def test_a_non_transactional_batch_during_a_transaction_is_invalid_txn_state():
    state = ProducerStateManager()
    state.record_header(header(0, 1, count=2, attributes=TXN))
    decision = state.check(1, 0, 2, 2, transactional=False)
    assert decision.error_code is ErrorCode.invalid_txn_state
    assert state.check(1, 0, 2, 2, transactional=True).should_append
    state.record_header(marker(2, 1))
    assert state.check(1, 0, 2, 2, transactional=False).should_append


def test_truncation_below_a_transaction_start_closes_it_and_rebuild_replays_it():
    state = ProducerStateManager()
    headers = [header(0, 1, attributes=0), header(1, 1, attributes=TXN, first_seq=1)]
    for h in headers:
        state.record_header(h)
    state.truncate_to(1)
    assert state.producers[1].current_txn_first_offset is None
    state.rebuild((h, None) for h in headers)
    assert state.producers[1].current_txn_first_offset == 1
