"""A full disk under a real log (a 1 MiB tmpfs, filled with kafkasim's own filler): the append that hits ENOSPC
raises KAFKA_STORAGE_ERROR, takes the log directory offline on the LogDirFailureChannel, leaves no part of
the refused batch behind, and once space is freed the recovery at the next start finds every batch written
before the failure (and cuts a torn tail, should one have been left)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.log import segment as segment_module
from broker.log.config import LogConfig
from broker.log.errors import KafkaStorageError
from broker.log.log import Log
from broker.log.log_dir_failure_channel import LogDirFailureChannel
from broker.log.log_manager import LogManager
from broker.log.records import Record, build_batch
from cluster.disk import MOUNT_PREFIX, fill_until_full, remove_filler, tmpfs_mount_command, unmount_named
from tests.log.support import ManualClock

SMALL = build_batch([Record(b"k", b"v" * 200, 1000)])
# larger than the free part of a segment's last page, so the write needs a page the full disk cannot give
LARGE = build_batch([Record(b"k", b"x" * 12_000, 1001)])
CONFIG = LogConfig(index_interval_bytes=len(SMALL))


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB file system, named like every kafkasim mount and unmounted by that name even when the
    test fails."""
    name = f"{MOUNT_PREFIX}test-{uuid.uuid4().hex[:10]}"
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    subprocess.run(tmpfs_mount_command(name, mount_point, 1), check=True, capture_output=True)
    try:
        yield mount_point
    finally:
        assert unmount_named(name) == [str(mount_point)]


class Offline:
    """A listener on the channel: the directories it was told about, in order."""

    def __init__(self, channel: LogDirFailureChannel) -> None:
        self.told: list[tuple[Path, str]] = []
        channel.add_listener(lambda log_dir, reason: self.told.append((log_dir, reason)))


def written_log(disk: Path, clock: ManualClock, batches: int = 5) -> tuple[Log, LogDirFailureChannel]:
    channel = LogDirFailureChannel()
    log = Log.open(disk / "t-0", CONFIG, clock=clock, log_dir_failure_channel=channel)
    for _ in range(batches):
        log.append_as_leader(SMALL, leader_epoch=0)
    return log, channel


def segment_file(disk: Path) -> Path:
    return disk / "t-0" / "00000000000000000000.log"


def test_an_append_on_a_full_disk_raises_kafka_storage_error_and_takes_the_log_dir_offline(tiny_disk, clock):
    log, channel = written_log(tiny_disk, clock)
    offline = Offline(channel)
    before = segment_file(tiny_disk).stat().st_size
    assert fill_until_full(tiny_disk) > 0

    with pytest.raises(KafkaStorageError) as failed:
        log.append_as_leader(LARGE, leader_epoch=0)
    assert failed.value.error_code == ErrorCode.kafka_storage_error
    assert failed.value.log_dir == tiny_disk
    assert "No space left on device" in str(failed.value) and str(tiny_disk) in str(failed.value)
    assert [d for d, _ in offline.told] == [tiny_disk]
    assert channel.has_offline_log_dir(tiny_disk)
    # the part of the batch that fitted in the last page was cut again: the file ends on a whole batch
    assert segment_file(tiny_disk).stat().st_size == before
    assert log.log_end_offset == 5


def test_an_offline_log_dir_refuses_every_later_operation_and_is_reported_once(tiny_disk, clock):
    log, channel = written_log(tiny_disk, clock)
    offline = Offline(channel)
    fill_until_full(tiny_disk)
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(LARGE, leader_epoch=0)
    remove_filler(tiny_disk)  # even with space again: a disk that failed is not trusted until a restart
    for operation in (lambda: log.append_as_leader(SMALL, leader_epoch=0), lambda: log.read(0, 1 << 20),
                      lambda: log.flush(), lambda: log.truncate_to(2), lambda: log.roll()):
        with pytest.raises(KafkaStorageError, match="offline since an earlier I/O error"):
            operation()
    assert len(offline.told) == 1


def test_a_follower_append_on_a_full_disk_raises_kafka_storage_error(tiny_disk, clock):
    log, channel = written_log(tiny_disk, clock)
    fill_until_full(tiny_disk)
    fetched = build_batch([Record(b"k", b"f" * 12_000, 1002)], base_offset=5, partition_leader_epoch=0)
    with pytest.raises(KafkaStorageError):
        log.append_as_follower(fetched)
    assert channel.has_offline_log_dir(tiny_disk)
    assert log.log_end_offset == 5


def test_after_the_space_is_freed_recovery_opens_every_batch_written_before_the_failure(tiny_disk, clock):
    log, _ = written_log(tiny_disk, clock)
    expected = log.read(0, 1 << 20).read_bytes()
    fill_until_full(tiny_disk)
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(LARGE, leader_epoch=0)
    with contextlib.suppress(OSError):
        log.close()
    remove_filler(tiny_disk)

    # no clean shutdown: the broker halted, so the next start recovers the log from its recovery point
    reopened = Log.open(tiny_disk / "t-0", CONFIG, clock=clock, had_clean_shutdown=False)
    assert reopened.log_end_offset == 5
    assert reopened.read(0, 1 << 20).read_bytes() == expected
    assert reopened.append_as_leader(LARGE, leader_epoch=1).first_offset == 5


def test_a_torn_tail_left_when_the_cut_fails_too_is_removed_by_recovery(tiny_disk, clock, monkeypatch):
    log, _ = written_log(tiny_disk, clock)
    valid = segment_file(tiny_disk).stat().st_size

    def broken_ftruncate(fd: int, length: int) -> None:
        raise OSError(5, "Input/output error")

    fill_until_full(tiny_disk)
    monkeypatch.setattr(segment_module.os, "ftruncate", broken_ftruncate)
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(LARGE, leader_epoch=0)
    monkeypatch.undo()
    torn = segment_file(tiny_disk).stat().st_size
    assert torn > valid, "the short write should have left part of the batch in the last page"
    with contextlib.suppress(OSError):
        log.close()
    remove_filler(tiny_disk)

    reopened = Log.open(tiny_disk / "t-0", CONFIG, clock=clock, had_clean_shutdown=False)
    assert segment_file(tiny_disk).stat().st_size == valid
    assert reopened.log_end_offset == 5
    assert [h.base_offset for h in reopened.batch_headers()] == [0, 1, 2, 3, 4]


def test_the_high_watermark_checkpoint_written_in_a_thread_reads_back_and_a_full_disk_takes_the_dir_offline(
        tiny_disk, clock):
    """The broker's periodic high watermark checkpoint: the file is written in a thread; a failure there is reported
    on the loop as a write in place reports it."""
    channel = LogDirFailureChannel()
    manager = LogManager([tiny_disk], CONFIG, clock=clock, log_dir_failure_channel=channel)
    manager.startup()
    manager.get_or_create_log("t", 0).append_as_leader(SMALL, leader_epoch=0)
    asyncio.run(manager.write_high_watermarks_in_thread({("t", 0): 1}))
    assert manager.read_high_watermarks() == {("t", 0): 1}
    fill_until_full(tiny_disk)
    with pytest.raises(KafkaStorageError, match="high watermark checkpoint"):
        asyncio.run(manager.write_high_watermarks_in_thread({("t", 0): 2}))
    assert channel.has_offline_log_dir(tiny_disk)
    manager.handle_log_dir_failure(tiny_disk)
    manager.shutdown()
    remove_filler(tiny_disk)


def test_a_checkpoint_that_cannot_be_written_takes_the_log_dir_offline_and_no_log_is_created_there(tiny_disk,
                                                                                                    clock):
    channel = LogDirFailureChannel()
    manager = LogManager([tiny_disk], CONFIG, clock=clock, log_dir_failure_channel=channel)
    manager.startup()
    manager.get_or_create_log("t", 0).append_as_leader(SMALL, leader_epoch=0)
    fill_until_full(tiny_disk)
    with pytest.raises(KafkaStorageError, match="high watermark checkpoint"):
        manager.write_high_watermarks({("t", 0): 1})
    assert channel.has_offline_log_dir(tiny_disk)

    assert manager.handle_log_dir_failure(tiny_disk) == [("t", 0)]
    assert manager.live_log_dirs == [] and manager.logs == {}
    with pytest.raises(KafkaStorageError, match="every log dir"):
        manager.get_or_create_log("t", 1)
    manager.shutdown()  # nothing is written to the offline directory, not even the clean shutdown marker
    remove_filler(tiny_disk)
    assert not (tiny_disk / ".kafka_cleanshutdown").exists()
