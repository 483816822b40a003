"""The leader-epoch checkpoint written off the event loop, batched (KAFKA-15046): a change made on the loop is
written later by the flusher's threads, atomically, never replaced by an older content; a crash mid-write
leaves the old file or the new one; what must be durable now (a flush, a clean shutdown) is written at once;
recovery rebuilds what a crash lost."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from broker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCheckpointFile
from broker.log import checkpoint
from broker.log.checkpoint_flusher import CheckpointFlusher, Deferred, write_batch
from broker.log.config import LogConfig
from broker.log.leader_epoch_cache import LeaderEpochFileCache
from broker.log.log import Log
from broker.log.log_manager import LogManager
from broker.log.records import Record, build_batch
from tests.log.support import ManualClock

ONE = build_batch([Record(b"k", b"v", 1000)])


def deferred_cache(path: Path, flusher: CheckpointFlusher) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path), lambda: 0)
    deferred = Deferred(take=cache.take_pending_write, on_error=lambda e: pytest.fail(f"write failed: {e}"))
    cache.defer = lambda _: flusher.schedule(cache, deferred)
    return cache


def test_assigns_on_the_loop_are_written_later_in_one_batch(tmp_path: Path):
    flusher = CheckpointFlusher()

    async def scenario() -> None:
        caches = [deferred_cache(tmp_path / f"p{i}", flusher) for i in range(50)]
        for cache in caches:
            cache.assign(3, 100)
        # nothing written on the loop
        assert not any((tmp_path / f"p{i}").exists() for i in range(50))
        assert flusher.pending == 50
        await flusher.drain()
        assert [LeaderEpochCheckpointFile(tmp_path / f"p{i}").read() for i in range(50)] == [[EpochEntry(3, 100)]] * 50
        assert flusher.rounds == 1 and flusher.written == 50
        assert not any(c.has_pending_write for c in caches)

    asyncio.run(scenario())
    flusher.close()


def test_a_newer_epoch_replacing_an_empty_one_is_deferred_an_older_one_is_written_at_once(tmp_path: Path):
    path = tmp_path / "p"
    flusher = CheckpointFlusher()

    async def scenario() -> None:
        cache = deferred_cache(path, flusher)
        cache.assign(0, 0)
        await flusher.drain()
        cache.assign(1, 0)  # the next leader of an empty partition: (0, 0) replaced at the same offset
        assert cache.has_pending_write
        assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(0, 0)]
        await flusher.drain()
        assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(1, 0)]
        cache.assign(0, 0)  # an epoch going back drops a newer one: a truncation, written now
        assert not cache.has_pending_write
        assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(0, 0)]

    asyncio.run(scenario())
    flusher.close()


def test_without_a_running_loop_the_change_is_written_at_once(tmp_path: Path):
    flusher = CheckpointFlusher()
    cache = deferred_cache(tmp_path / "p", flusher)
    cache.assign(1, 0)
    assert LeaderEpochCheckpointFile(tmp_path / "p").read() == [EpochEntry(1, 0)]
    assert not cache.has_pending_write


def test_a_truncation_is_written_at_once_and_an_older_deferred_content_never_replaces_it(tmp_path: Path):
    path = tmp_path / "p"
    flusher = CheckpointFlusher()

    async def scenario() -> None:
        cache = deferred_cache(path, flusher)
        cache.assign(1, 0)
        stale_write = cache.take_pending_write()  # the flusher's snapshot of [(1, 0), (2, 50)] comes next
        cache.assign(2, 50)
        newer_write = cache.take_pending_write()
        cache.truncate_from_end(50)  # written now: [(1, 0)]
        assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(1, 0)]
        # the deferred writes of older generations arrive late, in a thread: both are dropped
        assert await asyncio.to_thread(write_batch, [newer_write]) == 0
        assert await asyncio.to_thread(write_batch, [stale_write]) == 0
        assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(1, 0)]
        await flusher.drain()
        assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(1, 0)]

    asyncio.run(scenario())
    flusher.close()


@pytest.mark.parametrize("syncfs", [True, False], ids=["syncfs", "fsync-per-file"])
def test_a_crash_mid_batch_leaves_each_file_old_or_new(tmp_path: Path, monkeypatch, syncfs: bool):
    paths = [tmp_path / f"p{i}" / LEADER_EPOCH_CHECKPOINT for i in range(3)]
    old, new = [EpochEntry(1, 0)], [EpochEntry(1, 0), EpochEntry(2, 10)]
    real_replace, real_syncfs, real_fsync = os.replace, checkpoint._syncfs, os.fsync
    crash = {"at": None, "renames": 0}

    class Crash(BaseException):
        pass

    def replace(src, dst):
        if crash["at"] == "mid renames" and crash["renames"] == 1:
            raise Crash
        real_replace(src, dst)
        crash["renames"] += 1

    def sync(directory):
        if crash["at"] == "syncing the tmp files":
            raise Crash
        return real_syncfs(directory) if syncfs else False

    def fsync(fd):
        if crash["at"] == "syncing the tmp files":
            raise Crash
        real_fsync(fd)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(checkpoint, "_syncfs", sync)
    for at, expected in [("syncing the tmp files", [old, old, old]), ("mid renames", [new, old, old]),
                         (None, [new, new, new])]:
        writes = []
        for path in paths:
            path.parent.mkdir(exist_ok=True)
            LeaderEpochCheckpointFile(path).write(old)
            cache = LeaderEpochFileCache.load(LeaderEpochCheckpointFile(path), lambda: 0)
            cache.defer = lambda _: True  # held pending; the test runs the batch itself
            cache.assign(2, 10)
            writes.append(cache.take_pending_write())
        crash.update(at=at, renames=0)
        if at is None:
            assert write_batch(writes) == 3
        else:
            with pytest.raises(Crash):
                write_batch(writes)
        crash["at"] = None
        # what a restart reads: whole files, each old or new (a leftover .tmp is not read)
        assert [LeaderEpochCheckpointFile(p).read() for p in paths] == expected, at


def test_a_write_failing_in_the_thread_is_reported_on_the_loop(tmp_path: Path):
    flusher = CheckpointFlusher()
    errors: list[OSError] = []
    loop_thread = threading.get_ident()
    reported_on: list[int] = []

    async def scenario() -> None:
        cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "missing-dir" / "p"), lambda: 0)

        def on_error(error: OSError) -> None:
            errors.append(error)
            reported_on.append(threading.get_ident())

        deferred = Deferred(take=cache.take_pending_write, on_error=on_error)
        cache.defer = lambda _: flusher.schedule(cache, deferred)
        cache.assign(0, 0)
        await flusher.drain()

    asyncio.run(scenario())
    flusher.close()
    assert len(errors) == 1 and isinstance(errors[0], FileNotFoundError)
    assert reported_on == [loop_thread]


def test_log_flush_writes_the_pending_epoch_before_the_recovery_point_moves(tmp_path: Path):
    clock = ManualClock()
    directory = tmp_path / "t-0"
    flusher = CheckpointFlusher()

    async def scenario() -> None:
        log = Log.open(directory, LogConfig(), clock=clock, checkpoint_flusher=flusher)
        log.maybe_assign_epoch_start_offset(4, 0)
        log.append_as_leader(ONE, leader_epoch=4)
        assert log.leader_epoch_cache.has_pending_write
        log.flush()
        # durable before the recovery point covers the batch that recovery would have rebuilt it from
        assert LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT).read() == [EpochEntry(4, 0)]
        assert log.recovery_point == 1
        log.close()

    asyncio.run(scenario())
    flusher.close()


def test_an_epoch_lost_in_a_crash_is_rebuilt_by_recovery_from_the_batches(tmp_path: Path):
    clock = ManualClock()
    directory = tmp_path / "t-0"
    flusher = CheckpointFlusher()

    async def scenario() -> None:
        log = Log.open(directory, LogConfig(), clock=clock, checkpoint_flusher=flusher)
        log.maybe_assign_epoch_start_offset(7, 0)
        log.append_as_leader(ONE, leader_epoch=7)
        log.append_as_leader(ONE, leader_epoch=7)
        # "crash": the deferred write never ran
        assert not (directory / LEADER_EPOCH_CHECKPOINT).exists()
        log.close()

    asyncio.run(scenario())
    flusher.close()
    reopened = Log.open(directory, LogConfig(), clock=clock, recovery_point=0, had_clean_shutdown=False)
    assert reopened.leader_epoch_cache.entries == [EpochEntry(7, 0)]
    assert reopened.end_offset_for_epoch(7) == (7, 2)


def test_a_deleted_log_drops_its_pending_write(tmp_path: Path):
    clock = ManualClock()
    directory = tmp_path / "t-0"
    flusher = CheckpointFlusher()

    async def scenario() -> None:
        log = Log.open(directory, LogConfig(), clock=clock, checkpoint_flusher=flusher)
        log.maybe_assign_epoch_start_offset(2, 0)
        log.delete()
        await flusher.drain()  # no FileNotFoundError reported: the write was dropped
        assert not directory.exists()

    asyncio.run(scenario())
    flusher.close()


def test_clean_shutdown_writes_every_pending_epoch(tmp_path: Path):
    clock = ManualClock()

    async def scenario() -> None:
        manager = LogManager([tmp_path], LogConfig(), clock=clock)
        manager.startup()
        logs = [manager.get_or_create_log("t", p) for p in range(5)]
        for log in logs:
            log.maybe_assign_epoch_start_offset(3, 0)
        assert all(log.leader_epoch_cache.has_pending_write for log in logs)
        manager.shutdown()

    asyncio.run(scenario())
    for p in range(5):
        assert LeaderEpochCheckpointFile(tmp_path / f"t-{p}" / LEADER_EPOCH_CHECKPOINT).read() == [EpochEntry(3, 0)]
