"""Log appends (leader and follower), segment rolls, reads and timestamp lookups."""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.log.config import LogConfig
from broker.log.errors import InvalidRecordBatchError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from broker.log.log import Log
from broker.log.record_batch import TIMESTAMP_TYPE_FLAG, check_batch_at, parse_header
from broker.log.records import GZIP, Record, build_batch
from tests.log.support import ManualClock


def records(n: int, timestamp: int, size: int = 20) -> list[Record]:
    return [Record(b"k%d" % i, bytes([i % 256]) * size, timestamp + i) for i in range(n)]


def open_log(tmp_path: Path, clock: ManualClock, **config: object) -> Log:
    return Log.open(tmp_path / "orders-3", LogConfig(**config), clock=clock)


def segment_bytes_on_disk(log: Log) -> bytes:
    return b"".join(s.log_path.read_bytes() for s in log.segments)


def test_leader_append_assigns_offsets_from_the_log_end(tmp_path, clock):
    log = open_log(tmp_path, clock)
    first = log.append_as_leader(build_batch(records(3, clock())), leader_epoch=5)
    second = log.append_as_leader(build_batch(records(2, clock())), leader_epoch=5)
    assert (first.first_offset, first.last_offset, second.first_offset, second.last_offset) == (0, 2, 3, 4)
    assert log.log_end_offset == 5 and log.log_start_offset == 0
    assert (second.log_append_time, second.record_count, second.batch_count) == (-1, 2, 1)


def test_leader_append_stores_the_client_bytes_with_only_offset_and_epoch_rewritten(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(build_batch(records(4, clock())), leader_epoch=1)
    sent = build_batch(records(3, clock(), size=100), compression=GZIP)
    log.append_as_leader(sent, leader_epoch=7)
    stored = log.read(4, 1 << 20).read_bytes()
    assert stored[16:] == sent[16:] and stored[8:12] == sent[8:12]
    assert struct.unpack(">qi", stored[:8] + stored[12:16]) == (4, 7)
    check_batch_at(stored, 0, len(stored))  # the CRC still holds


def test_the_segment_file_is_named_by_its_20_digit_base_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(build_batch(records(1, clock())), leader_epoch=0)
    assert sorted(p.name for p in (tmp_path / "orders-3").iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
    ]


@pytest.mark.parametrize(
    ("corrupt", "code"),
    [
        (lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:], ErrorCode.corrupt_message),
        (lambda b: b[:16] + b"\x01" + b[17:], ErrorCode.unsupported_for_message_format),
        (lambda b: b[:8] + struct.pack(">i", 10) + b[12:], ErrorCode.corrupt_message),
        (lambda b: b[:-3], ErrorCode.corrupt_message),
    ],
)
def test_a_bad_batch_is_rejected_and_nothing_of_the_request_is_written(tmp_path, clock, corrupt, code):
    log = open_log(tmp_path, clock)
    log.append_as_leader(build_batch(records(2, clock())), leader_epoch=0)
    before = segment_bytes_on_disk(log)
    good = build_batch(records(2, clock()))
    with pytest.raises(InvalidRecordBatchError) as e:
        log.append_as_leader(good + corrupt(build_batch(records(3, clock()))), leader_epoch=0)
    assert e.value.error_code == code
    assert segment_bytes_on_disk(log) == before and log.log_end_offset == 2


def test_a_batch_above_max_message_bytes_is_message_too_large(tmp_path, clock):
    big = build_batch(records(1, clock(), size=2000))
    log = open_log(tmp_path, clock, max_message_bytes=len(big) - 1)
    with pytest.raises(InvalidRecordBatchError) as e:
        log.append_as_leader(big, leader_epoch=0)
    assert e.value.error_code == ErrorCode.message_too_large
    assert log.log_end_offset == 0 and log.active_segment.log_path.stat().st_size == 0


def test_a_record_set_larger_than_a_segment_is_record_list_too_large(tmp_path, clock):
    data = build_batch(records(1, clock(), size=2000))
    log = open_log(tmp_path, clock, segment_bytes=len(data) - 1)
    with pytest.raises(InvalidRecordBatchError) as e:
        log.append_as_leader(data, leader_epoch=0)
    assert e.value.error_code == ErrorCode.record_list_too_large


def test_log_append_time_topics_stamp_the_broker_clock(tmp_path, clock):
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(build_batch(records(3, 12345)), leader_epoch=0)
    assert info.log_append_time == clock() and info.max_timestamp == clock()
    stored = log.read(0, 1 << 20).read_bytes()
    header = check_batch_at(stored, 0, len(stored))
    assert header.attributes & TIMESTAMP_TYPE_FLAG and header.max_timestamp == clock()
    assert log.fetch_offset_by_timestamp(clock()) == (clock(), 0, 0)


def test_follower_append_is_byte_for_byte(tmp_path, clock):
    log = open_log(tmp_path, clock)
    leader_batches = build_batch(records(3, clock()), base_offset=0, partition_leader_epoch=2) + build_batch(
        records(2, clock()), base_offset=3, partition_leader_epoch=3
    )
    info = log.append_as_follower(leader_batches)
    assert (info.first_offset, info.last_offset, info.batch_count) == (0, 4, 2)
    assert segment_bytes_on_disk(log) == leader_batches
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(2, 0), (3, 3)]


def test_follower_append_below_the_log_end_is_unexpected(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_follower(build_batch(records(3, clock()), base_offset=0))
    with pytest.raises(UnexpectedAppendOffsetError) as e:
        log.append_as_follower(build_batch(records(1, clock()), base_offset=2))
    assert (e.value.first_offset, e.value.log_end_offset) == (2, 3)
    assert e.value.error_code == ErrorCode.unknown_server_error


def test_follower_batches_must_not_go_backwards(tmp_path, clock):
    log = open_log(tmp_path, clock)
    data = build_batch(records(3, clock()), base_offset=10) + build_batch(records(1, clock()), base_offset=11)
    with pytest.raises(InvalidRecordBatchError):
        log.append_as_follower(data)
    assert log.log_end_offset == 0


def test_follower_append_checks_the_crc(tmp_path, clock):
    log = open_log(tmp_path, clock)
    data = bytearray(build_batch(records(3, clock())))
    data[-1] ^= 0xFF
    with pytest.raises(InvalidRecordBatchError) as e:
        log.append_as_follower(bytes(data))
    assert e.value.error_code == ErrorCode.corrupt_message


def test_segments_roll_on_segment_bytes_and_flush_what_they_leave(tmp_path, clock):
    one = build_batch(records(2, clock()))
    log = open_log(tmp_path, clock, segment_bytes=3 * len(one))
    for _ in range(7):
        log.append_as_leader(one, leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 6, 12]
    assert [s.size for s in log.segments] == [3 * len(one), 3 * len(one), len(one)]
    assert log.recovery_point == 12  # a roll flushes everything below the new segment


def test_segments_roll_on_segment_ms_by_record_time(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_ms=1000)
    log.append_as_leader(build_batch(records(1, 5000)), leader_epoch=0)
    log.append_as_leader(build_batch(records(1, 6000)), leader_epoch=0)
    assert len(log.segments) == 1
    log.append_as_leader(build_batch(records(1, 6001)), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_segments_roll_on_segment_ms_by_the_clock_without_timestamps(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_ms=1000)
    log.append_as_leader(build_batch(records(1, -1)), leader_epoch=0)
    clock.advance(1000)
    log.append_as_leader(build_batch(records(1, -1)), leader_epoch=0)
    assert len(log.segments) == 1
    clock.advance(1)
    log.append_as_leader(build_batch(records(1, -1)), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_segments_roll_when_the_offset_index_is_full(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_index_bytes=24, index_interval_bytes=0)
    for _ in range(6):
        log.append_as_leader(build_batch(records(1, clock())), leader_epoch=0)
    # Every batch but a segment's first gets an entry; a 24-byte time index is full after one.
    assert [s.base_offset for s in log.segments] == [0, 2, 4]


def test_index_entries_follow_index_interval_bytes(tmp_path, clock):
    one = build_batch(records(1, clock(), size=100))
    log = open_log(tmp_path, clock, index_interval_bytes=2 * len(one))
    for _ in range(10):
        log.append_as_leader(one, leader_epoch=0)
    index = log.active_segment.offset_index
    # An entry once more than two batches were written since the last one (never for the first).
    assert [index.entry(i) for i in range(index.entries)] == [(3, 3 * len(one)), (6, 6 * len(one)), (9, 9 * len(one))]


def test_a_read_returns_whole_batches_starting_with_the_one_holding_the_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    batches = [build_batch(records(3, clock())) for _ in range(4)]
    for b in batches:
        log.append_as_leader(b, leader_epoch=0)
    region = log.read(4, 2 * len(batches[0]))
    assert region.position == len(batches[0]) and region.size == 2 * len(batches[0])
    data = region.read_bytes()
    assert [parse_header(data, p).base_offset for p in (0, len(batches[0]))] == [3, 6]
    assert os.pread(region.fd, region.size, region.position) == data


def test_a_read_never_splits_a_batch(tmp_path, clock):
    log = open_log(tmp_path, clock)
    one = build_batch(records(2, clock()))
    for _ in range(3):
        log.append_as_leader(one, leader_epoch=0)
    assert log.read(0, 2 * len(one) - 1).size == len(one)
    assert log.read(0, len(one) - 1).size == len(one)  # at least one batch (KIP-74)
    assert log.read(0, len(one) - 1, min_one_message=False).size == 0


def test_a_read_stops_below_max_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    one = build_batch(records(2, clock()))
    for _ in range(3):
        log.append_as_leader(one, leader_epoch=0)
    assert log.read(0, 1 << 20, max_offset=4).size == 2 * len(one)
    assert log.read(0, 1 << 20, max_offset=3).size == len(one)  # offset 3 is inside the second batch
    assert log.read(4, 1 << 20, max_offset=4).size == 0


def test_a_read_at_the_log_end_is_empty_and_beyond_it_is_out_of_range(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(build_batch(records(2, clock())), leader_epoch=0)
    assert log.read(2, 100).size == 0
    with pytest.raises(OffsetOutOfRangeError) as e:
        log.read(3, 100)
    assert e.value.error_code == ErrorCode.offset_out_of_range


def test_reads_cross_into_the_next_segment(tmp_path, clock):
    one = build_batch(records(2, clock()))
    log = open_log(tmp_path, clock, segment_bytes=2 * len(one))
    for _ in range(5):
        log.append_as_leader(one, leader_epoch=0)
    region = log.read(4, 1 << 20)
    assert region.path.name == "00000000000000000004.log" and region.size == 2 * len(one)


def test_timestamp_lookup_finds_the_first_record_at_or_after_the_time(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=400, index_interval_bytes=0)
    for start in range(0, 3000, 100):  # batches of 3 records at t, t+1, t+2
        log.append_as_leader(build_batch(records(3, 10_000 + start)), leader_epoch=start // 1000)
    assert len(log.segments) > 3
    assert log.fetch_offset_by_timestamp(10_000) == (10_000, 0, 0)
    assert log.fetch_offset_by_timestamp(10_201) == (10_201, 7, 0)
    assert log.fetch_offset_by_timestamp(11_150) == (11_200, 36, 1)
    assert log.fetch_offset_by_timestamp(12_902) == (12_902, 89, 2)
    assert log.fetch_offset_by_timestamp(12_903) is None
    assert log.fetch_offset_by_timestamp(-2) == (-1, 0, 0)
    assert log.fetch_offset_by_timestamp(-1) == (-1, 90, 2)


def test_timestamp_lookup_reads_inside_gzip_batches(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(build_batch(records(5, 1000), compression=GZIP), leader_epoch=0)
    assert log.fetch_offset_by_timestamp(1003) == (1003, 3, 0)


def test_timestamp_lookup_skips_records_below_the_log_start(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(build_batch(records(5, 1000)), leader_epoch=0)
    log.maybe_increment_log_start_offset(3)
    assert log.fetch_offset_by_timestamp(1000) == (1003, 3, 0)
    assert log.fetch_offset_by_timestamp(-2) == (-1, 3, 0)


def test_flush_messages_flushes_after_that_many_unflushed_records(tmp_path, clock):
    log = open_log(tmp_path, clock, flush_messages=5)
    log.append_as_leader(build_batch(records(4, clock())), leader_epoch=0)
    assert log.recovery_point == 0
    log.append_as_leader(build_batch(records(1, clock())), leader_epoch=0)
    assert log.recovery_point == 5


def test_flush_ms_flushes_when_due(tmp_path, clock):
    log = open_log(tmp_path, clock, flush_ms=1000)
    log.append_as_leader(build_batch(records(2, clock())), leader_epoch=0)
    clock.advance(999)
    assert not log.flush_if_due() and log.recovery_point == 0
    clock.advance(1)
    assert log.flush_if_due() and log.recovery_point == 2


def test_by_default_the_log_never_flushes_on_its_own(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for _ in range(50):
        log.append_as_leader(build_batch(records(10, clock())), leader_epoch=0)
    clock.advance(10**9)
    assert not log.flush_if_due() and log.recovery_point == 0


async def _until(condition, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def test_a_roll_on_the_event_loop_flushes_in_a_thread_and_then_moves_the_recovery_point(tmp_path, clock):
    """Kafka schedules the roll's flush: the append that rolled does not wait for the fsyncs, and the recovery point
    moves only once they are done."""
    one = build_batch(records(2, clock()))
    log = open_log(tmp_path, clock, segment_bytes=3 * len(one))

    async def run() -> tuple[int, int]:
        for _ in range(4):
            log.append_as_leader(one, leader_epoch=0)
        right_after = log.recovery_point
        await _until(lambda: log.recovery_point == 6)
        return right_after, log.recovery_point

    right_after, later = asyncio.run(run())
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert right_after == 0 and later == 6  # not moved by the roll itself, moved by the flush's end


def test_a_truncation_during_a_rolls_background_flush_keeps_the_recovery_point(tmp_path, clock):
    one = build_batch(records(2, clock()))
    log = open_log(tmp_path, clock, segment_bytes=3 * len(one))

    async def run() -> None:
        for _ in range(4):
            log.append_as_leader(one, leader_epoch=0)
        log.truncate_to(4)  # before the flush thread's answer is handled on the loop
        for _ in range(50):
            await asyncio.sleep(0.01)

    asyncio.run(run())
    assert log.log_end_offset == 4 and log.recovery_point == 0
