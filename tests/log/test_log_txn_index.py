"""The aborted transaction index on real files: Kafka's ``.txnindex`` bytes (34-byte big-endian entries), written
when an ABORT marker is appended (leader or follower), cut by truncation, deleted with its segment, rebuilt by
recovery; the log's LSO and collectAbortedTransactions over it."""

from __future__ import annotations

import struct
from pathlib import Path

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.records import Record, build_batch, build_end_txn_marker
from broker.log.transactions import TXN_INDEX_ENTRY_SIZE, AbortedTxn
from tests.log.support import ManualClock

TXN_FILE = "00000000000000000000.txnindex"


def txn_batch(producer_id: int, sequence: int, count: int = 2, timestamp: int = 1_700_000_000_000) -> bytes:
    records = [Record(b"k", f"p{producer_id}-{sequence + i}".encode(), timestamp) for i in range(count)]
    return build_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                       transactional=True)


def end_marker(producer_id: int, *, abort: bool, timestamp: int = 1_700_000_000_000) -> bytes:
    return build_end_txn_marker(producer_id=producer_id, producer_epoch=0, abort=abort, coordinator_epoch=3,
                                timestamp=timestamp)


def entry_bytes(producer_id: int, first: int, last: int, lso: int) -> bytes:
    return struct.pack(">hqqqq", 0, producer_id, first, last, lso)


def two_transactions(log: Log) -> None:
    """pid 1 at 0-1, pid 2 at 2-3, pid 1 at 4-5, ABORT pid 1 at 6 (pid 2 still open: LSO 2), COMMIT pid 2 at 7."""
    log.append_as_leader(txn_batch(1, 0), 0)
    log.append_as_leader(txn_batch(2, 0), 0)
    log.append_as_leader(txn_batch(1, 2), 0)
    log.append_as_leader(end_marker(1, abort=True), 0, from_coordinator=True)
    log.append_as_leader(end_marker(2, abort=False), 0, from_coordinator=True)


def test_an_abort_marker_appends_kafkas_34_byte_entry(tmp_path: Path, clock: ManualClock):
    log = Log.open(tmp_path / "t-0", LogConfig(), clock=clock)
    two_transactions(log)
    data = (tmp_path / "t-0" / TXN_FILE).read_bytes()
    assert TXN_INDEX_ENTRY_SIZE == 34
    assert data == entry_bytes(1, 0, 6, 2)  # the commit adds nothing
    assert log.collect_aborted_transactions(0, 8) == [AbortedTxn(1, 0, 6, 2)]
    assert log.collect_aborted_transactions(7, 8) == []  # the transaction ended before offset 7


def test_no_abort_no_file_and_the_lso_follows_open_transactions(tmp_path: Path, clock: ManualClock):
    log = Log.open(tmp_path / "t-0", LogConfig(), clock=clock)
    log.append_as_leader(build_batch([Record(b"k", b"v", 1_700_000_000_000)]), 0)
    log.append_as_leader(txn_batch(1, 0), 0)
    assert log.last_stable_offset(high_watermark=3) == 1
    log.append_as_leader(end_marker(1, abort=False), 0, from_coordinator=True)
    assert log.last_stable_offset(high_watermark=3) == 1  # the marker (3) is not below the HW yet
    assert log.last_stable_offset(high_watermark=4) == 4
    assert not (tmp_path / "t-0" / TXN_FILE).exists()


def test_a_follower_writes_the_same_index(tmp_path: Path, clock: ManualClock):
    leader = Log.open(tmp_path / "t-0", LogConfig(), clock=clock)
    two_transactions(leader)
    follower = Log.open(tmp_path / "f" / "t-0", LogConfig(), clock=clock)
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    assert (tmp_path / "f" / "t-0" / TXN_FILE).read_bytes() == entry_bytes(1, 0, 6, 2)


def test_truncation_drops_entries_at_or_above_the_cut_and_reopens_the_transaction(tmp_path: Path,
                                                                                   clock: ManualClock):
    log = Log.open(tmp_path / "t-0", LogConfig(), clock=clock)
    two_transactions(log)
    log.truncate_to(7)  # the commit goes, the abort stays
    assert (tmp_path / "t-0" / TXN_FILE).read_bytes() == entry_bytes(1, 0, 6, 2)
    assert log.ongoing_transactions == {2: 2}
    log.truncate_to(6)  # the abort goes: pid 1's transaction is open again
    assert not (tmp_path / "t-0" / TXN_FILE).exists()
    assert log.ongoing_transactions == {1: 0, 2: 2}
    assert log.last_stable_offset(high_watermark=6) == 0
    log.append_as_leader(end_marker(1, abort=True), 0, from_coordinator=True)
    assert (tmp_path / "t-0" / TXN_FILE).read_bytes() == entry_bytes(1, 0, 6, 2)


def test_recovery_rebuilds_a_missing_or_damaged_index(tmp_path: Path, clock: ManualClock):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(), clock=clock)
    two_transactions(log)
    log.close()
    (directory / TXN_FILE).unlink()
    log = Log.open(directory, LogConfig(), clock=clock, recovery_point=0, had_clean_shutdown=False)
    assert (directory / TXN_FILE).read_bytes() == entry_bytes(1, 0, 6, 2)
    assert log.ongoing_transactions == {}
    log.close()
    (directory / TXN_FILE).write_bytes(entry_bytes(9, 0, 1, 2) * 3 + b"\x00\x01")
    log = Log.open(directory, LogConfig(), clock=clock, recovery_point=0, had_clean_shutdown=False)
    assert (directory / TXN_FILE).read_bytes() == entry_bytes(1, 0, 6, 2)
    log.close()


def test_a_clean_shutdown_keeps_the_index_and_the_open_transactions(tmp_path: Path, clock: ManualClock):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(), clock=clock)
    log.append_as_leader(txn_batch(1, 0), 0)
    log.append_as_leader(txn_batch(2, 0), 0)
    log.append_as_leader(end_marker(1, abort=True), 0, from_coordinator=True)
    log.flush()
    log.close()
    log = Log.open(directory, LogConfig(), clock=clock, recovery_point=5, had_clean_shutdown=True)
    assert (directory / TXN_FILE).read_bytes() == entry_bytes(1, 0, 4, 2)
    assert log.ongoing_transactions == {2: 2}
    assert log.last_stable_offset(high_watermark=5) == 2


def test_entries_live_in_the_marker_segment_and_go_with_it(tmp_path: Path, clock: ManualClock):
    directory = tmp_path / "t-0"
    one = txn_batch(1, 0)
    log = Log.open(directory, LogConfig(segment_bytes=2 * len(one) + 10, file_delete_delay_ms=0), clock=clock)
    log.append_as_leader(one, 0)  # pid 1 at 0-1
    log.append_as_leader(txn_batch(2, 0), 0)  # pid 2 at 2-3
    log.append_as_leader(end_marker(1, abort=True), 0, from_coordinator=True)  # 4, rolls: segment at 4
    log.append_as_leader(end_marker(2, abort=True), 0, from_coordinator=True)  # 5
    assert [s.base_offset for s in log.segments] == [0, 4]
    second = directory / "00000000000000000004.txnindex"
    assert second.read_bytes() == entry_bytes(1, 0, 4, 2) + entry_bytes(2, 2, 5, 6)
    # a fetch from offset 0 starts with the first segment's (empty) index and goes on to the second
    assert log.collect_aborted_transactions(0, 6) == [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 5, 6)]
    # the first entry's LSO (2) is not past the bound, so the search does not stop there
    assert log.collect_aborted_transactions(5, 6) == [AbortedTxn(2, 2, 5, 6)]
    log.truncate_fully_and_start_at(10)
    assert not second.exists() and not list(directory.glob("*.txnindex*"))


def test_a_damaged_index_fails_the_start_up_check_and_is_rebuilt_after_a_clean_shutdown(tmp_path: Path,
                                                                                         clock: ManualClock):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(), clock=clock)
    two_transactions(log)
    log.flush()
    log.close()
    (directory / TXN_FILE).write_bytes(struct.pack(">hqqqq", 7, 1, 0, 6, 2))  # unknown version
    log = Log.open(directory, LogConfig(), clock=clock, recovery_point=8, had_clean_shutdown=True)
    assert (directory / TXN_FILE).read_bytes() == entry_bytes(1, 0, 6, 2)
    assert log.collect_aborted_transactions(0, 8) == [AbortedTxn(1, 0, 6, 2)]


def test_an_abort_in_a_later_segment_is_found_for_a_range_it_overlaps(tmp_path: Path, clock: ManualClock):
    directory = tmp_path / "t-0"
    one = txn_batch(1, 0)
    log = Log.open(directory, LogConfig(segment_bytes=len(one) + 10), clock=clock)
    log.append_as_leader(one, 0)  # pid 1 at 0-1, segment 0
    log.append_as_leader(build_batch([Record(b"k", b"v", 1_700_000_000_000)]), 0)  # 2, segment 2
    log.append_as_leader(end_marker(1, abort=True), 0, from_coordinator=True)  # 3, segment 3
    assert [s.base_offset for s in log.segments] == [0, 2, 3]
    # a read of offsets 0-1 (upper bound 2) must still list pid 1, whose abort lies two segments on
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(1, 0, 3, 4)]


def test_the_first_append_after_a_reopen_sees_the_transactions_already_in_the_log(tmp_path: Path,
                                                                                  clock: ManualClock):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(), clock=clock)
    log.append_as_leader(txn_batch(1, 0), 0)  # 0-1
    log.append_as_leader(txn_batch(2, 0), 0)  # 2-3
    log.flush()
    log.close()
    log = Log.open(directory, LogConfig(), clock=clock, recovery_point=4, had_clean_shutdown=True)
    log.append_as_leader(end_marker(2, abort=True), 0, from_coordinator=True)  # 4: pid 1 still open from 0
    assert (directory / TXN_FILE).read_bytes() == entry_bytes(2, 2, 4, 0)
    log.truncate_to(4)
    log.append_as_follower(build_end_txn_marker(producer_id=1, producer_epoch=0, abort=True, base_offset=4,
                                                timestamp=1_700_000_000_000))
    assert (directory / TXN_FILE).read_bytes() == entry_bytes(1, 0, 4, 2)
    assert log.ongoing_transactions == {2: 2}
