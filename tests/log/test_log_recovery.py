"""Start-up: recovery after an unclean shutdown, the clean shutdown marker, damaged files, the
classroom option that loses the unflushed tail, and the log manager's per-directory files."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from broker.log.config import LogConfig
from broker.log.errors import LogDirInUseError
from broker.log.log import Log
from broker.log.log_manager import CLEAN_SHUTDOWN_MARKER, LogManager
from broker.log.record_batch import parse_header
from broker.log.records import Record, build_batch
from broker.log.segment import LogSegment
from tests.log.support import ManualClock

ONE = build_batch([Record(b"k", b"v" * 100, 1000), Record(b"k", b"w" * 100, 1001)])  # two offsets
CONFIG = LogConfig(segment_bytes=4 * len(ONE), index_interval_bytes=len(ONE))  # four batches per segment


def filled(directory: Path, clock: ManualClock, batches: int, config: LogConfig = CONFIG) -> Log:
    log = Log.open(directory, config, clock=clock)
    for i in range(batches):
        log.append_as_leader(ONE, leader_epoch=i // 4)
    return log


def reopen(directory: Path, clock: ManualClock, *, recovery_point: int = 0, config: LogConfig = CONFIG) -> Log:
    return Log.open(directory, config, clock=clock, recovery_point=recovery_point, had_clean_shutdown=False)


def all_bytes(log: Log) -> bytes:
    return (
        log.read(log.log_start_offset, 1 << 30).read_bytes()
        if len(log.segments) == 1
        else b"".join(s.log_path.read_bytes() for s in log.segments)
    )


def test_a_torn_tail_is_cut_back_to_the_last_whole_batch(tmp_path, clock):
    directory = tmp_path / "t-0"
    filled(directory, clock, 3).close()  # one segment, three batches, nothing flushed
    segment = directory / "00000000000000000000.log"
    os.truncate(segment, 2 * len(ONE) + 40)
    log = reopen(directory, clock)
    assert log.log_end_offset == 4
    assert segment.stat().st_size == 2 * len(ONE)
    assert log.append_as_leader(ONE, leader_epoch=0).first_offset == 4


def test_a_corrupt_batch_cuts_the_log_there_and_drops_later_segments(tmp_path, clock, caplog):
    directory = tmp_path / "t-0"
    filled(directory, clock, 10).close()  # segments at 0, 8, 16
    second = directory / "00000000000000000008.log"
    data = bytearray(second.read_bytes())
    data[len(ONE) + 70] ^= 0xFF  # inside the second batch of the second segment
    second.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        log = reopen(directory, clock)
    assert log.log_end_offset == 10
    assert [s.base_offset for s in log.segments] == [0, 8]
    assert not (directory / "00000000000000000016.log").exists()
    assert "CRC-32C mismatch" in caplog.text and "00000000000000000016.log" in caplog.text
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(0, 0), (1, 8)]


def test_garbage_after_the_last_batch_is_cut(tmp_path, clock):
    directory = tmp_path / "t-0"
    filled(directory, clock, 2).close()
    segment = directory / "00000000000000000000.log"
    with open(segment, "ab") as f:
        f.write(bytes(4096))  # a file system may expose zeros after a crash
    log = reopen(directory, clock)
    assert log.log_end_offset == 4 and segment.stat().st_size == 2 * len(ONE)


def test_recovery_starts_at_the_segment_holding_the_recovery_point(tmp_path, clock, monkeypatch):
    directory = tmp_path / "t-0"
    filled(directory, clock, 10).close()  # segments at 0, 8, 16; the rolls flushed below 16
    recovered = []
    original = LogSegment.recover
    monkeypatch.setattr(
        LogSegment, "recover", lambda self, *a: recovered.append(self.base_offset) or original(self, *a)
    )
    log = reopen(directory, clock, recovery_point=16)
    assert recovered == [16] and log.log_end_offset == 20


def test_a_clean_shutdown_skips_recovery(tmp_path, clock, monkeypatch):
    directory = tmp_path / "t-0"
    log = filled(directory, clock, 10)
    log.flush()
    log.close()
    monkeypatch.setattr(LogSegment, "recover", lambda *a: pytest.fail("recovery after a clean shutdown"))
    log = Log.open(directory, CONFIG, clock=clock, had_clean_shutdown=True)
    assert (log.log_end_offset, log.recovery_point) == (20, 20)


def test_a_torn_segment_is_repaired_even_after_a_clean_shutdown(tmp_path, clock, caplog):
    directory = tmp_path / "t-0"
    log = filled(directory, clock, 3)
    log.flush()
    log.close()
    os.truncate(directory / "00000000000000000000.log", 3 * len(ONE) - 1)
    with caplog.at_level(logging.WARNING):
        log = Log.open(directory, CONFIG, clock=clock, had_clean_shutdown=True)
    assert log.log_end_offset == 4
    assert "failed its start-up check" in caplog.text


@pytest.mark.parametrize("damage", ["delete", "odd-size", "points-past-data"])
def test_a_missing_or_broken_index_is_rebuilt_identically(tmp_path, clock, damage):
    directory = tmp_path / "t-0"
    log = filled(directory, clock, 10)
    log.flush()
    log.close()
    index = directory / "00000000000000000000.index"
    time_index = directory / "00000000000000000000.timeindex"
    expected = (index.read_bytes(), time_index.read_bytes())
    assert len(expected[0]) > 0 and len(expected[1]) > 0
    if damage == "delete":
        index.unlink()
    elif damage == "odd-size":
        with open(time_index, "ab") as f:
            f.write(b"\x00")
    else:
        index.write_bytes(expected[0][:-8] + (10**6).to_bytes(4, "big") + (10).to_bytes(4, "big"))
    log = Log.open(directory, CONFIG, clock=clock, had_clean_shutdown=True)
    log.close()
    assert (index.read_bytes(), time_index.read_bytes()) == expected


def test_stray_files_from_an_interrupted_delete_are_removed(tmp_path, clock):
    directory = tmp_path / "t-0"
    filled(directory, clock, 2).close()
    (directory / "00000000000000000099.log.deleted").write_bytes(b"old")
    (directory / "00000000000000000099.index").write_bytes(b"")
    (directory / "leader-epoch-checkpoint.tmp").write_text("half")
    reopen(directory, clock).close()
    assert sorted(p.name for p in directory.iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
    ]


def test_a_corrupt_leader_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path, clock, caplog):
    directory = tmp_path / "t-0"
    filled(directory, clock, 9).close()  # epochs 0, 1, 2 at 0, 8, 16
    (directory / "leader-epoch-checkpoint").write_text("0\n3\n0 0\n")
    with caplog.at_level(logging.ERROR):
        log = reopen(directory, clock, recovery_point=18)
    assert "leader-epoch-checkpoint" in caplog.text
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(0, 0), (1, 8), (2, 16)]
    assert (directory / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n1 8\n2 16\n"


def test_a_crash_keeps_unflushed_data_that_reached_the_page_cache(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = filled(directory, clock, 2)
    log.flush()
    log.append_as_leader(ONE, leader_epoch=0)
    log.close()  # kill -9: the OS still has the bytes
    assert reopen(directory, clock, recovery_point=4).log_end_offset == 6


def test_the_unflushed_loss_option_drops_what_was_never_flushed(tmp_path, clock):
    config = CONFIG.model_copy(update={"simulate_unflushed_loss": True})
    directory = tmp_path / "t-0"
    log = filled(directory, clock, 2, config)
    log.flush()
    log.append_as_leader(ONE, leader_epoch=0)
    log.append_as_leader(ONE, leader_epoch=0)
    log.close()
    log = reopen(directory, clock, recovery_point=0, config=config)  # even with a stale checkpoint
    assert log.log_end_offset == 4
    assert (directory / "kafkasim-flushed-offset-checkpoint").read_text() == "0\n1\nt 0 4\n"
    assert [parse_header(log.read(o, 1).read_bytes()).base_offset for o in (0, 2)] == [0, 2]


def test_the_unflushed_loss_option_keeps_everything_after_a_clean_shutdown(tmp_path, clock):
    config = CONFIG.model_copy(update={"simulate_unflushed_loss": True})
    manager = LogManager([tmp_path / "d"], config, clock=clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    for _ in range(3):
        log.append_as_leader(ONE, leader_epoch=0)
    manager.shutdown()
    manager = LogManager([tmp_path / "d"], config, clock=clock)
    manager.startup()
    assert manager.get_log("t", 0).log_end_offset == 6


# ------------------------------------------------------------------------------------------ LogManager


def test_log_manager_shutdown_writes_checkpoints_and_the_clean_marker(tmp_path, clock):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, CONFIG, clock=clock)
    manager.startup()
    for partition in range(3):
        log = manager.get_or_create_log("orders", partition)
        for _ in range(partition + 1):
            log.append_as_leader(ONE, leader_epoch=0)
    manager.get_log("orders", 2).maybe_increment_log_start_offset(3)
    manager.write_high_watermarks({("orders", 0): 2, ("orders", 1): 4, ("orders", 2): 6})
    manager.shutdown()
    assert sorted(p.name for p in dirs[0].iterdir() if p.is_dir()) == ["orders-0", "orders-2"]
    assert (dirs[0] / "recovery-point-offset-checkpoint").read_text() == "0\n2\norders 0 2\norders 2 6\n"
    assert (dirs[1] / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 1 4\n"
    assert (dirs[0] / "log-start-offset-checkpoint").read_text() == "0\n1\norders 2 3\n"
    assert (dirs[0] / "replication-offset-checkpoint").read_text() == "0\n2\norders 0 2\norders 2 6\n"
    assert (dirs[0] / CLEAN_SHUTDOWN_MARKER).exists() and (dirs[1] / CLEAN_SHUTDOWN_MARKER).exists()

    again = LogManager(dirs, CONFIG, clock=clock)
    again.startup()
    assert not (dirs[0] / CLEAN_SHUTDOWN_MARKER).exists()
    assert {tp: log.log_end_offset for tp, log in again.logs.items()} == {
        ("orders", 0): 2,
        ("orders", 1): 4,
        ("orders", 2): 6,
    }
    assert again.get_log("orders", 2).log_start_offset == 3
    assert again.read_high_watermarks() == {("orders", 0): 2, ("orders", 1): 4, ("orders", 2): 6}
    again.shutdown()


def test_log_manager_recovers_from_the_checkpointed_recovery_points_without_a_marker(tmp_path, clock, monkeypatch):
    manager = LogManager([tmp_path / "d"], CONFIG, clock=clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    for _ in range(10):
        log.append_as_leader(ONE, leader_epoch=0)
    manager.checkpoint_recovery_points()  # the rolls flushed up to 16
    for fd in manager._lock_fds:  # the process dies: its lock goes with it
        os.close(fd)
    recovered = []
    original = LogSegment.recover
    monkeypatch.setattr(
        LogSegment, "recover", lambda self, *a: recovered.append(self.base_offset) or original(self, *a)
    )
    again = LogManager([tmp_path / "d"], CONFIG, clock=clock)
    again.startup()
    assert recovered == [16] and again.get_log("t", 0).log_end_offset == 20


def test_log_manager_truncation_checkpoints_the_lowered_recovery_point(tmp_path, clock):
    manager = LogManager([tmp_path / "d"], CONFIG, clock=clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    for _ in range(10):
        log.append_as_leader(ONE, leader_epoch=0)
    manager.truncate_to({("t", 0): 6})
    assert (tmp_path / "d" / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 6\n"


def test_a_log_dir_is_locked_against_a_second_broker(tmp_path, clock):
    first = LogManager([tmp_path / "d"], CONFIG, clock=clock)
    first.startup()
    with pytest.raises(LogDirInUseError, match="another broker"):
        LogManager([tmp_path / "d"], CONFIG, clock=clock).startup()
    first.shutdown()


def test_a_malformed_recovery_checkpoint_means_a_full_recovery(tmp_path, clock, caplog):
    manager = LogManager([tmp_path / "d"], CONFIG, clock=clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    for _ in range(3):
        log.append_as_leader(ONE, leader_epoch=0)
    manager.shutdown()
    (tmp_path / "d" / CLEAN_SHUTDOWN_MARKER).unlink()
    (tmp_path / "d" / "recovery-point-offset-checkpoint").write_text("0\n7\n")
    with caplog.at_level(logging.ERROR):
        again = LogManager([tmp_path / "d"], CONFIG, clock=clock)
        again.startup()
    assert "recovery-point-offset-checkpoint is malformed" in caplog.text
    assert again.get_log("t", 0).log_end_offset == 6


def test_topic_names_are_checked_before_a_directory_is_made(tmp_path, clock):
    manager = LogManager([tmp_path / "d"], CONFIG, clock=clock)
    manager.startup()
    with pytest.raises(ValueError, match="illegal topic name"):
        manager.get_or_create_log("../etc", 0)
