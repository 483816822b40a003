"""DeleteRecords on the log: the log start offset moves, the whole segments below it go from disk, and the
log-start-offset checkpoint brings the start back after a restart (Kafka's deleteLogStartOffsetBreachedSegments)."""

from __future__ import annotations

import os

import pytest

from broker.log.checkpoint import LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile
from broker.log.config import LogConfig
from broker.log.errors import OffsetOutOfRangeError
from broker.log.log_manager import LogManager
from tests.log.test_log_truncation_retention import ONE, filled, log_files


def test_moving_the_log_start_deletes_only_whole_segments_below_it(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0)  # segments at 0, 6, 12 (16 offsets)
    assert log.maybe_increment_log_start_offset(13)
    assert log.delete_segments_below_log_start(high_watermark=16) == 2
    assert [s.base_offset for s in log.segments] == [12]
    assert log.log_start_offset == 13  # inside the remaining segment: it stays where DeleteRecords put it
    assert log_files(log) == ["00000000000000000012.log"]


def test_a_segment_holding_the_log_start_stays(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0)
    log.maybe_increment_log_start_offset(5)  # offset 5 is the last of segment 0
    assert log.delete_segments_below_log_start(high_watermark=16) == 0
    log.maybe_increment_log_start_offset(6)  # exactly the next segment's base: segment 0 is entirely below
    assert log.delete_segments_below_log_start(high_watermark=16) == 1
    assert [s.base_offset for s in log.segments] == [6, 12]


def test_no_segment_holding_the_high_watermark_is_deleted(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0)
    log.maybe_increment_log_start_offset(13)
    assert log.delete_segments_below_log_start(high_watermark=10) == 1  # segment 6..11 holds the HW
    assert [s.base_offset for s in log.segments] == [6, 12]


def test_age_and_size_retention_play_no_part(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0, retention_ms=1, retention_bytes=len(ONE))
    clock.advance(10_000)
    assert log.delete_segments_below_log_start(high_watermark=16) == 0
    assert len(log.segments) == 3


def test_deleted_segments_wait_for_file_delete_delay(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=1000)
    log.maybe_increment_log_start_offset(12)
    assert log.delete_segments_below_log_start(high_watermark=16) == 2
    assert "00000000000000000000.log.deleted" in log_files(log)
    clock.advance(1000)
    log.delete_expired_files()
    assert log_files(log) == ["00000000000000000012.log"]


def test_the_start_cannot_pass_the_log_end(tmp_path, clock):
    log = filled(tmp_path, clock)
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(17)
    assert log.log_start_offset == 0


def test_reads_below_the_new_start_are_out_of_range_and_earliest_is_the_new_start(tmp_path, clock):
    log = filled(tmp_path, clock, file_delete_delay_ms=0)
    log.maybe_increment_log_start_offset(8)
    log.delete_segments_below_log_start(high_watermark=16)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)
    assert log.fetch_offset_by_timestamp(-2).offset == 8
    assert log.read(8, 1000).size > 0


def test_the_log_start_survives_a_restart_through_its_checkpoint(tmp_path, clock):
    config = LogConfig(segment_bytes=3 * len(ONE), file_delete_delay_ms=0)
    manager = LogManager([tmp_path], config, clock=clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    for i in range(8):
        log.append_as_leader(ONE, leader_epoch=i // 3)
    log.maybe_increment_log_start_offset(9)
    log.delete_segments_below_log_start(high_watermark=16)
    manager.checkpoint_log_start_offsets()
    assert OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT).read() == {("t", 0): 9}
    # a crash: no clean shutdown, no marker; the checkpoint alone says where the log starts
    for opened in manager.logs.values():
        opened.close()
    for fd in manager._lock_fds:  # the process is gone, and its locks with it
        os.close(fd)
    reopened = LogManager([tmp_path], config, clock=clock)
    reopened.startup()
    restarted = reopened.get_log("t", 0)
    assert restarted.log_start_offset == 9
    assert [s.base_offset for s in restarted.segments] == [6, 12]
    reopened.shutdown()


def test_the_log_manager_deletes_the_files_of_the_logs_that_scheduled_deletions_only(tmp_path, clock):
    config = LogConfig(segment_bytes=3 * len(ONE), file_delete_delay_ms=1000)
    manager = LogManager([tmp_path], config, clock=clock)
    manager.startup()
    busy, idle = manager.get_or_create_log("t", 0), manager.get_or_create_log("t", 1)
    for _ in range(8):
        busy.append_as_leader(ONE, leader_epoch=0)
    idle.append_as_leader(ONE, leader_epoch=0)
    busy.maybe_increment_log_start_offset(9)
    busy.delete_segments_below_log_start(high_watermark=16)
    assert manager._pending_deletes == {busy}
    manager.delete_expired_files()
    assert any(name.endswith(".deleted") for name in log_files(busy))  # not before file.delete.delay.ms
    clock.advance(1000)
    manager.delete_expired_files()
    assert not any(name.endswith(".deleted") for name in log_files(busy)) and manager._pending_deletes == set()
    manager.shutdown()


def test_an_unchanged_checkpoint_is_not_written_again(tmp_path, clock):
    manager = LogManager([tmp_path], LogConfig(), clock=clock)
    manager.startup()
    manager.get_or_create_log("t", 0)
    manager.write_high_watermarks({("t", 0): 3})
    path = tmp_path / "replication-offset-checkpoint"
    path.unlink()
    manager.write_high_watermarks({("t", 0): 3})
    assert not path.exists()
    manager.write_high_watermarks({("t", 0): 4})
    assert OffsetCheckpointFile(path).read() == {("t", 0): 4}
    manager.shutdown()
