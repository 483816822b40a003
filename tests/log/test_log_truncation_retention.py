"""Truncation (followers), the log start offset, and retention by time, size and log start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.log.config import LogConfig
from broker.log.errors import OffsetOutOfRangeError
from broker.log.log import Log
from broker.log.record_batch import parse_header
from broker.log.records import Record, build_batch
from broker.log.retention import deletable_segments
from tests.log.support import ManualClock

ONE = build_batch([Record(b"k", b"v" * 40, 0), Record(b"k", b"v" * 40, 0)])  # two records


def batch_at(timestamp: int) -> bytes:
    return build_batch([Record(b"k", b"v" * 40, timestamp), Record(b"k", b"v" * 40, timestamp)])


def open_log(tmp_path: Path, clock: ManualClock, **config: object) -> Log:
    config.setdefault("segment_bytes", 3 * len(ONE))  # three batches (six offsets) per segment
    return Log.open(tmp_path / "t-0", LogConfig(**config), clock=clock)


def filled(tmp_path: Path, clock: ManualClock, batches: int = 8, **config: object) -> Log:
    log = open_log(tmp_path, clock, **config)
    for i in range(batches):
        log.append_as_leader(ONE, leader_epoch=i // 3)
    return log


def log_files(log: Log) -> list[str]:
    return sorted(p.name for p in log.directory.glob("*.log*"))


def test_truncation_inside_a_segment_cuts_the_file_at_a_batch_boundary(tmp_path, clock):
    log = filled(tmp_path, clock)
    assert log.truncate_to(8)
    assert log.log_end_offset == 8
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert log.active_segment.log_path.stat().st_size == len(ONE)
    info = log.append_as_leader(ONE, leader_epoch=9)
    assert info.first_offset == 8


def test_truncation_removes_later_segments_after_the_delete_delay(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=60_000)
    log.truncate_to(3)
    assert [s.base_offset for s in log.segments] == [0]
    assert "00000000000000000006.log.deleted" in log_files(log)
    clock.advance(60_000)
    log.delete_expired_files()
    assert log_files(log) == ["00000000000000000000.log"]


def test_truncation_inside_a_batch_removes_the_whole_batch(tmp_path, clock):
    log = filled(tmp_path, clock)
    log.truncate_to(5)  # offsets 4..5 are one batch
    assert log.log_end_offset == 4
    assert parse_header(log.read(2, 1 << 20).read_bytes()).next_offset == 4


def test_truncation_trims_the_leader_epoch_cache(tmp_path, clock):
    log = filled(tmp_path, clock)
    assert [e.start_offset for e in log.leader_epoch_cache.entries] == [0, 6, 12]
    log.truncate_to(6)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(0, 0)]


def test_truncation_to_the_log_end_or_beyond_does_nothing(tmp_path, clock):
    log = filled(tmp_path, clock)
    assert not log.truncate_to(16)
    assert not log.truncate_to(99)
    assert log.log_end_offset == 16


def test_truncation_lowers_the_recovery_point(tmp_path, clock):
    log = filled(tmp_path, clock)
    log.flush()
    log.truncate_to(10)
    assert log.recovery_point == 10


def test_truncate_fully_restarts_the_log_at_a_new_offset(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (500, 500, 500)
    assert log_files(log) == ["00000000000000000500.log"]
    assert log.leader_epoch_cache.entries == []
    assert log.append_as_follower(build_batch([Record(None, b"x", 0)], base_offset=500)).first_offset == 500


def test_truncate_fully_at_the_current_base_offset_keeps_no_stale_bytes(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0)
    log.truncate_fully_and_start_at(0)
    assert log.log_end_offset == 0 and log.active_segment.log_path.stat().st_size == 0


def test_reads_below_the_log_start_offset_are_out_of_range(tmp_path, clock):
    log = filled(tmp_path, clock)
    assert log.maybe_increment_log_start_offset(7)
    assert not log.maybe_increment_log_start_offset(5)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 100)
    assert parse_header(log.read(7, 1).read_bytes()).base_offset == 6  # the batch holding 7 starts earlier
    with pytest.raises(OffsetOutOfRangeError) as e:
        log.maybe_increment_log_start_offset(17)
    assert e.value.error_code == ErrorCode.offset_out_of_range


def test_segments_below_the_log_start_offset_are_deleted_by_retention(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0, retention_ms=-1)
    log.maybe_increment_log_start_offset(13)
    assert log.delete_old_segments(high_watermark=16) == 2
    assert [s.base_offset for s in log.segments] == [12]
    assert log.log_start_offset == 13
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(2, 13)]


def test_retention_bytes_deletes_whole_leading_segments(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0, retention_bytes=4 * len(ONE), retention_ms=-1)
    assert log.size_in_bytes == 8 * len(ONE)
    assert log.delete_old_segments(high_watermark=16) == 1  # deleting a second would go below 4 batches
    assert log.log_start_offset == 6 and log.size_in_bytes == 5 * len(ONE)


def test_retention_ms_deletes_segments_whose_newest_record_is_too_old(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=1000, file_delete_delay_ms=0)
    now = clock()
    for t in [now - 5000, now - 4000, now - 3000, now - 900, now - 800, now - 700, now, now]:
        log.append_as_leader(batch_at(t), leader_epoch=0)
    assert log.delete_old_segments(high_watermark=16) == 1
    assert log.log_start_offset == 6
    clock.advance(300)
    assert log.delete_old_segments(high_watermark=16) == 0  # newest record is exactly 1000 ms old
    clock.advance(1)
    assert log.delete_old_segments(high_watermark=16) == 1
    assert [s.base_offset for s in log.segments] == [12]


def test_retention_never_deletes_beyond_the_high_watermark(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0, retention_bytes=0, retention_ms=-1)
    assert log.delete_old_segments(high_watermark=5) == 0  # the first segment ends at offset 6
    assert log.delete_old_segments(high_watermark=11) == 1
    assert log.delete_old_segments(high_watermark=12) == 1
    assert log.log_start_offset == 12


def test_retention_of_every_segment_rolls_a_new_empty_one(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0, retention_bytes=0, retention_ms=-1)
    assert log.delete_old_segments(high_watermark=16) == 3
    assert [(s.base_offset, s.size) for s in log.segments] == [(16, 0)]
    assert (log.log_start_offset, log.log_end_offset) == (16, 16)
    assert log.delete_old_segments(high_watermark=16) == 0


@dataclass
class FakeSegment:
    base_offset: int
    size: int
    largest_timestamp: int


def test_deletable_segments_applies_time_then_size_then_log_start():
    segments = [FakeSegment(0, 100, 10), FakeSegment(10, 100, 20), FakeSegment(20, 100, 90), FakeSegment(30, 50, 95)]
    rules = {"log_end_offset": 40, "high_watermark": 40, "now_ms": 100}
    assert deletable_segments(segments, log_start_offset=0, retention_ms=85, retention_bytes=-1, **rules)[0] == 1
    assert deletable_segments(segments, log_start_offset=0, retention_ms=-1, retention_bytes=150, **rules)[0] == 2
    count, reasons = deletable_segments(segments, log_start_offset=25, retention_ms=85, retention_bytes=-1, **rules)
    assert count == 2 and len(reasons) == 2
    assert deletable_segments(segments, log_start_offset=0, retention_ms=-1, retention_bytes=-1, **rules)[0] == 0
