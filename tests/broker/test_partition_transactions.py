"""Partition over the file-backed Log with transactions: the LSO as markers are replicated and the HW advances,
read_committed reads bounded by it with the aborted transactions of the range, a follower that becomes leader
with the same transactions, INVALID_TXN_STATE for a producer mixing batches, and what the leader reports of its
markers and LSO for the trace."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.log.record_batch import parse_header
from broker.log.records import Record, build_batch, build_end_txn_marker
from broker.replication.partition import FetchIsolation, LastStableOffsetReport, TxnMarkerAppended
from tests.broker.support import FOLLOWER, LEADER, RECORD_TIME, T0, leadership, new_partition, open_log

BIG = 1 << 20


def txn(producer_id: int, sequence: int, count: int = 2) -> bytes:
    return build_batch([Record(b"k", b"v", RECORD_TIME)] * count, producer_id=producer_id, producer_epoch=0,
                       base_sequence=sequence, transactional=True)


def marker(producer_id: int, *, abort: bool) -> bytes:
    return build_end_txn_marker(producer_id=producer_id, producer_epoch=0, abort=abort, timestamp=RECORD_TIME)


def leader_partition(tmp_path):
    partition = new_partition(open_log(tmp_path / "leader"))
    partition.make_leader(leadership(), T0)
    return partition


def last_offset_read(partition, isolation: FetchIsolation) -> int:
    read = partition.read_records(0, BIG, isolation=isolation, current_leader_epoch=None)
    data = read.region.read_bytes() if read.region is not None else b""
    position, last = 0, -1
    while position < len(data):
        header = parse_header(data, position)
        last, position = header.last_offset, position + header.size
    return last


def test_the_lso_follows_open_transactions_and_replicated_markers(tmp_path):
    partition = leader_partition(tmp_path)
    partition.append_records_to_leader(txn(1, 0), 1, 1, T0)  # 0-1
    partition.append_records_to_leader(txn(2, 0), 1, 1, T0)  # 2-3
    partition.append_records_to_leader(marker(1, abort=True), 1, 1, T0, from_coordinator=True)  # 4
    partition.update_follower_fetch_state(FOLLOWER, 5, 0, 5, T0)
    assert partition.high_watermark == 5
    assert partition.last_stable_offset == 2  # producer 2's transaction is open from 2
    read = partition.read_records(0, BIG, isolation=FetchIsolation.TXN_COMMITTED, current_leader_epoch=None)
    assert (read.last_stable_offset, read.aborted_transactions) == (2, ((1, 0),))
    assert last_offset_read(partition, FetchIsolation.TXN_COMMITTED) == 1
    assert last_offset_read(partition, FetchIsolation.HIGH_WATERMARK) == 4

    partition.append_records_to_leader(marker(2, abort=False), 1, 1, T0, from_coordinator=True)  # 5
    assert partition.last_stable_offset == 2  # the commit marker is not below the HW yet
    partition.update_follower_fetch_state(FOLLOWER, 6, 0, 6, T0)
    assert partition.last_stable_offset == partition.high_watermark == 6
    assert last_offset_read(partition, FetchIsolation.TXN_COMMITTED) == 5


def test_a_follower_keeps_the_same_transactions_and_serves_them_as_leader(tmp_path):
    leader = leader_partition(tmp_path)
    leader.append_records_to_leader(txn(1, 0), 1, 1, T0)
    leader.append_records_to_leader(marker(1, abort=True), 1, 1, T0, from_coordinator=True)
    leader.append_records_to_leader(txn(2, 0), 1, 1, T0)  # 3-4, open
    follower = new_partition(open_log(tmp_path / "follower"), broker_id=FOLLOWER)
    follower.make_follower(leadership())
    data = leader.read_records(0, BIG, isolation=FetchIsolation.LOG_END, current_leader_epoch=None)
    follower.append_records_to_follower(data.region.read_bytes(), 5, 0)
    assert (tmp_path / "follower" / "orders-0" / "00000000000000000000.txnindex").read_bytes() == \
        (tmp_path / "leader" / "orders-0" / "00000000000000000000.txnindex").read_bytes()
    follower.make_leader(leadership(leader=FOLLOWER, leader_epoch=2, isr=(FOLLOWER, LEADER)), T0)
    follower.update_follower_fetch_state(LEADER, 5, 0, 5, T0)
    assert follower.last_stable_offset == 3
    assert follower.producer_state.producers[2].current_txn_first_offset == 3
    # producer 2 may not write outside its transaction while it is open
    plain = build_batch([Record(b"k", b"v", RECORD_TIME)], producer_id=2, producer_epoch=0, base_sequence=2)
    assert follower.check_producer_batch(parse_header(plain)).error_code is ErrorCode.invalid_txn_state
    assert follower.check_producer_batch(parse_header(txn(2, 2))) is None


def test_the_lso_is_reported_while_a_transaction_holds_it_and_once_when_released(tmp_path):
    partition = leader_partition(tmp_path)
    partition.append_records_to_leader(build_batch([Record(b"k", b"v", RECORD_TIME)]), 1, 1, T0)  # 0, plain
    assert (partition.lso_watched, partition.last_stable_offset_change()) == (False, None)
    partition.update_follower_fetch_state(FOLLOWER, 1, 0, 1, T0)  # HW 1: nothing to report, nothing open

    partition.append_records_to_leader(txn(1, 0), 1, 1, T0)  # 1-2: opens while LSO = HW = 1
    assert partition.last_stable_offset_change() == LastStableOffsetReport(1, 1, 1)
    assert partition.last_stable_offset_change() is None  # nothing new
    partition.update_follower_fetch_state(FOLLOWER, 3, 0, 3, T0)  # HW 3 passes the first offset: held at 1
    assert partition.last_stable_offset_change() == LastStableOffsetReport(1, 3, 1)
    partition.append_records_to_leader(txn(1, 2), 1, 1, T0)  # 3-4, the same transaction
    partition.update_follower_fetch_state(FOLLOWER, 5, 0, 5, T0)
    assert partition.last_stable_offset_change() is None  # the HW moved, the held LSO did not

    partition.append_records_to_leader(marker(1, abort=False), 1, 1, T0, from_coordinator=True)  # 5
    assert partition.last_stable_offset_change() == LastStableOffsetReport(1, 5, 0)  # decided, marker not below HW
    partition.update_follower_fetch_state(FOLLOWER, 6, 0, 6, T0)
    assert partition.last_stable_offset_change() == LastStableOffsetReport(6, 6, 0)  # released
    assert (partition.lso_watched, partition.last_stable_offset_change()) == (False, None)


def test_a_new_leader_watches_the_transactions_it_inherits(tmp_path):
    partition = leader_partition(tmp_path)
    partition.append_records_to_leader(txn(7, 0), 1, 1, T0)
    partition.make_follower(leadership(leader=FOLLOWER, leader_epoch=2))
    assert (partition.lso_watched, partition.last_stable_offset_change()) == (False, None)
    partition.make_leader(leadership(leader_epoch=3), T0)
    partition.update_follower_fetch_state(FOLLOWER, 2, 0, 2, T0)
    assert partition.last_stable_offset_change() == LastStableOffsetReport(0, 2, 1)


def test_the_markers_appended_carry_their_offsets_and_coordinator_epochs(tmp_path):
    partition = leader_partition(tmp_path)
    partition.append_records_to_leader(txn(3, 0), 1, 1, T0)  # 0-1
    records = build_end_txn_marker(producer_id=3, producer_epoch=0, abort=True, coordinator_epoch=9,
                                   timestamp=RECORD_TIME)
    partition.append_records_to_leader(records, 1, 1, T0, from_coordinator=True)
    assert partition.appended_markers == [TxnMarkerAppended(3, 0, True, 2, 9)]
    partition.append_records_to_leader(txn(3, 2), 1, 1, T0)  # data batches are no markers
    assert partition.appended_markers == []


def test_the_coordinator_epoch_fence_holds_on_a_follower_turned_leader_and_after_a_restart(tmp_path):
    """Kafka keeps a marker's coordinator epoch in every replica's producer state: a zombie coordinator (an older
    epoch) cannot write a marker to the partition's next leader either, nor to one that reloaded its log."""
    from broker.replication.txn_markers import check_marker

    leader = leader_partition(tmp_path)
    leader.append_records_to_leader(txn(1, 0), 1, 1, T0)
    epoch_7 = build_end_txn_marker(producer_id=1, producer_epoch=0, abort=False, coordinator_epoch=7,
                                   timestamp=RECORD_TIME)
    leader.append_records_to_leader(epoch_7, 1, 1, T0, from_coordinator=True)
    follower = new_partition(open_log(tmp_path / "follower"), broker_id=FOLLOWER)
    follower.make_follower(leadership())
    data = leader.read_records(0, BIG, isolation=FetchIsolation.LOG_END, current_leader_epoch=None)
    follower.append_records_to_follower(data.region.read_bytes(), 3, 0)
    assert follower.producer_state.producers[1].coordinator_epoch == 7
    follower.make_leader(leadership(leader=FOLLOWER, leader_epoch=2, isr=(FOLLOWER, LEADER)), T0)
    stale = build_end_txn_marker(producer_id=1, producer_epoch=0, abort=True, coordinator_epoch=6,
                                 timestamp=RECORD_TIME)
    refused = check_marker(follower, stale, 6)
    assert refused is not None and refused.error is ErrorCode.transaction_coordinator_fenced
    assert check_marker(follower, stale, 7) is None, "the same coordinator epoch is still welcome"

    follower.log.close()
    reloaded = new_partition(open_log(tmp_path / "follower"), broker_id=FOLLOWER)
    assert reloaded.producer_state.producers[1].coordinator_epoch == 7, "rebuilt from the marker in the log"
    refused = check_marker(reloaded, stale, 6)
    assert refused is not None and refused.error is ErrorCode.transaction_coordinator_fenced
