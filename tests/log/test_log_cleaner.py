"""The cleaner on real segment files: what survives a cleaning, read back by an independent parser, and the swap's
recovery after a crash at each step."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from kio.schema.errors import ErrorCode

from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.cleaner.cleaner import CleaningAborted, clean
from broker.log.cleaner.log_cleaner import CleanerConfig, LogCleaner
from broker.log.cleaner.manager import CLEANER_OFFSET_CHECKPOINT, CleanerManager
from broker.log.cleaner.offset_map import OffsetMap
from broker.log.cleaner.throttler import Throttler
from broker.log.cleaner.worker import CleanerProcess, CleanerWorkerDied
from broker.log.errors import InvalidRecordBatchError
from broker.log.log import Log
from broker.log.records import GZIP, Record, build_batch, build_end_txn_marker
from broker.log.transactions import AbortedTxn
from tests.harness import wait_until
from tests.log.cleaner_support import clean_once, open_log, produce, read_batches, read_segments
from traces.events import LogCleaned

KEYS = [f"key-{i}".encode() for i in range(20)]


def _fill(log_, clock, *, batches: int, seed: int = 7, tombstone_keys: frozenset[bytes] = frozenset(),
          compression: int = 0) -> dict[bytes, bytes | None]:
    """Random values over KEYS; the listed keys end with a tombstone. Returns each key's last value."""
    rng = random.Random(seed)
    latest: dict[bytes, bytes | None] = {}
    for n in range(batches):
        pairs = []
        for _ in range(rng.randint(1, 6)):
            key = rng.choice(KEYS)
            value = f"{key.decode()}={n}-{rng.random():.6f}".encode()
            pairs.append((key, value))
            latest[key] = value
        produce(log_, clock, pairs, compression=compression if n % 2 else 0)
        clock.advance(10)
    for key in sorted(tombstone_keys):
        produce(log_, clock, [(key, None)])
        latest[key] = None
    return latest


def _active_base(log_) -> int:
    return log_.active_segment.base_offset


def _check_compacted(log_, latest: dict[bytes, bytes | None], *, tombstones_gone: bool) -> None:
    records = read_segments(log_.directory)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), "offsets must increase strictly"
    active = _active_base(log_)
    cleaned = [r for r in records if r.offset < active]
    by_key: dict[bytes, list] = {}
    for r in cleaned:
        by_key.setdefault(r.key, []).append(r)
    tail_keys = {r.key for r in records if r.offset >= active}
    for key, value in latest.items():
        if key in tail_keys:
            continue  # its latest record is in the active segment: the clean part may keep an older one
        if value is None and tombstones_gone:
            assert key not in by_key, f"tombstoned {key} is still there"
        else:
            assert [r.value for r in by_key[key]] == [value], key
    # everything: the last record of each key in the whole log is its latest value
    last = {}
    for r in records:
        last[r.key] = r.value
    assert {k: v for k, v in last.items()} == {k: v for k, v in latest.items() if k in last}
    assert {k for k, v in latest.items() if v is not None} <= set(last)


def test_cleaning_keeps_exactly_the_last_value_of_each_key_outside_the_active_segment(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    latest = _fill(log_, clock, batches=300, compression=GZIP)
    before = log_.size_in_bytes
    assert len(log_.segments) > 5
    report = clean_once(log_, clock)
    assert report is not None and report.end_offset == _active_base(log_)
    assert report.bytes_after < report.bytes_before and log_.size_in_bytes < before
    assert report.keys == len({k for k in KEYS if k in latest})
    # the report is the trace's LogCleaned event, field for field
    event = LogCleaned(**report.event_fields())
    assert (event.topic, event.partition, event.end_offset, event.keys) == ("compacted", 0, report.end_offset,
                                                                           report.keys)
    _check_compacted(log_, latest, tombstones_gone=False)
    checkpoint = OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read()
    assert checkpoint == {("compacted", 0): report.end_offset}
    # the cleaned log reads back the same through the log itself, after a reopen too
    log_.close()
    reopened = open_log(tmp_path, clock)
    assert reopened.log_end_offset == log_.log_end_offset
    _check_compacted(reopened, latest, tombstones_gone=False)


def test_later_cleanings_start_at_the_checkpoint_and_drop_tombstones_older_than_the_horizon(tmp_path, clock):
    log_ = open_log(tmp_path, clock, **{"delete.retention.ms": 1000})
    _fill(log_, clock, batches=150, tombstone_keys=frozenset(KEYS[:5]))
    rng = random.Random(3)
    latest_tail = {}

    def more(n: int) -> None:
        for i in range(n):
            key = rng.choice(KEYS[5:])
            value = f"late-{i}-{rng.random()}".encode()
            produce(log_, clock, [(key, value)])
            latest_tail[key] = value

    more(80)  # the tombstones leave the active segment
    first = clean_once(log_, clock)
    assert first is not None
    # no clean section before the first cleaning: horizon 0, every tombstone kept
    assert len([r for r in read_segments(log_.directory) if r.value is None]) == 5
    # the segments cleaned so far are old now; newer data is cleaned after them
    old = (clock() - 10_000) / 1000
    for segment in log_.segments[:-1]:
        os.utime(segment.log_path, (old, old))
    more(80)
    second = clean_once(log_, clock)
    assert second is not None and second.first_dirty_offset == first.end_offset
    # the last clean segment was the old one: the horizon is old too, the tombstones stay one more round
    assert len([r for r in read_segments(log_.directory) if r.value is None]) == 5
    more(80)
    third = clean_once(log_, clock)
    assert third is not None and third.first_dirty_offset == second.end_offset
    records = read_segments(log_.directory)
    assert not [r for r in records if r.key in KEYS[:5]], "tombstones older than the horizon are gone"
    for key, value in latest_tail.items():
        assert [r.value for r in records if r.key == key][-1] == value


def test_nothing_is_cleaned_below_the_dirty_ratio(tmp_path, clock):
    log_ = open_log(tmp_path, clock, **{"min.cleanable.dirty.ratio": 0.9})
    _fill(log_, clock, batches=100)
    assert clean_once(log_, clock) is not None  # never cleaned: all of it is dirty, the ratio is 1
    _fill(log_, clock, batches=30, seed=8)  # a segment or two more: far below 90 % of the log
    assert len(log_.segments) > 2
    assert clean_once(log_, clock) is None


def test_snappy_lz4_and_zstd_batches_are_rewritten_with_their_codec(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    latest = {}
    for n in range(120):
        pairs = [(KEYS[(n + i) % 4], f"v{n}-{i}-".encode() * 40) for i in range(3)]
        produce(log_, clock, pairs, codec_builder=(2, 3, 4)[n % 3])
        latest.update(pairs)
    codec_at = {h.base_offset: h.compression for h in log_.batch_headers()}
    assert set(codec_at.values()) == {2, 3, 4}
    assert clean_once(log_, clock) is not None
    _check_compacted(log_, latest, tombstones_gone=False)
    kept = [h for h in log_.batch_headers() if h.base_offset < log_.active_segment.base_offset]
    assert kept and all(h.compression == codec_at[h.base_offset] for h in kept)
    assert any(h.records_count < h.last_offset_delta + 1 for h in kept), "some batches were rewritten"


def test_the_last_batch_of_a_producer_stays_as_an_empty_batch(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    for n in range(40):
        produce(log_, clock, [(b"a", f"{n}".encode())] * 4, producer_id=77, base_sequence=4 * n)
    produce(log_, clock, [(b"a", b"x" * 3000)])  # no producer id: rolls the segments on
    produce(log_, clock, [(b"a", b"y" * 3000)])
    assert clean_once(log_, clock) is not None
    last = [h for h in log_.batch_headers() if h.producer_id == 77][-1]
    assert last.base_sequence == 4 * 39 and last.last_offset_delta == 3


def _cleaned_but_not_swapped(log_, clock):
    manager = CleanerManager(lambda: {log_.topic_partition: log_}, clock)
    opened, candidate = manager.grab_filthiest()
    plan = manager.plan(opened, candidate)
    return plan, clean(plan, OffsetMap(1 << 20), Throttler(float("inf")), now_ms=clock())


def test_a_crash_before_the_swap_leaves_cleaned_files_that_the_next_load_deletes(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    latest = _fill(log_, clock, batches=200)
    plan, result = _cleaned_but_not_swapped(log_, clock)
    plan.close()
    assert list(tmp_path.glob("compacted-0/*.cleaned"))
    records_before = read_segments(log_.directory)
    for group in result.groups:
        group.cleaned.close()
    log_.close()  # the crash: no clean shutdown marker is involved at this level, recovery runs from 0
    reopened = open_log(tmp_path, clock)
    assert not list(tmp_path.glob("compacted-0/*.cleaned"))
    assert read_segments(reopened.directory) == records_before
    assert clean_once(reopened, clock) is not None
    _check_compacted(reopened, latest, tombstones_gone=False)


@pytest.mark.parametrize("renamed_old_segments", [False, True])
def test_a_crash_during_the_swap_is_completed_at_the_next_load(tmp_path, clock, renamed_old_segments):
    log_ = open_log(tmp_path, clock)
    latest = _fill(log_, clock, batches=200)
    plan, result = _cleaned_but_not_swapped(log_, clock)
    plan.close()
    for n, group in enumerate(result.groups):
        if n == 0:
            # the first group got as far as .swap (and maybe its sources renamed .deleted); the others stay .cleaned
            group.cleaned.change_file_suffixes(".cleaned", ".swap")
            if renamed_old_segments:
                for source in group.sources:
                    source.segment.rename_to_deleted()
        group.cleaned.close()
    log_.close()
    reopened = open_log(tmp_path, clock)
    names = [p.name for p in reopened.directory.iterdir()]
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))], names
    _check_compacted_prefix(reopened, latest)
    assert clean_once(reopened, clock) is not None
    _check_compacted(reopened, latest, tombstones_gone=False)


def _check_compacted_prefix(log_, latest):
    records = read_segments(log_.directory)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    last = {}
    for r in records:
        last[r.key] = r.value
    assert last == latest


@pytest.mark.parametrize("policy,deleted", [("compact", False), ("compact,delete", True), ("delete", True)])
def test_retention_by_time_leaves_a_compact_only_log_alone(tmp_path, clock, policy, deleted):
    log_ = open_log(tmp_path, clock, **{"cleanup.policy": policy, "retention.ms": 1000})
    _fill(log_, clock, batches=100)
    segments = len(log_.segments)
    clock.advance(60_000)
    removed = log_.delete_old_segments(high_watermark=log_.log_end_offset)
    assert (removed > 0) == deleted
    assert (len(log_.segments) < segments) == deleted


@pytest.mark.parametrize("in_process", [False, True], ids=["worker-process", "in-process"])
def test_the_cleaner_threads_clean_a_dirty_log_and_stop_cleanly(tmp_path, clock, in_process):
    log_ = open_log(tmp_path, clock)
    latest = _fill(log_, clock, batches=300)
    reports = []
    pids = []

    async def run() -> None:
        # a map of 80 entries (24 bytes each): the 20 keys fill a quarter of it
        cleaner = LogCleaner(CleanerConfig.model_validate({"log.cleaner.backoff.ms": 50,
                                                           "log.cleaner.dedupe.buffer.size": 80 * 24}),
                             lambda: {log_.topic_partition: log_}, clock, on_cleaned=reports.append,
                             in_process=in_process)
        cleaner.startup()
        started.extend(cleaner.worker_pids())  # as Kafka starts its cleaner threads: with the broker
        deadline = time.monotonic() + 20
        while not reports and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        pids.extend(cleaner.worker_pids())
        gauges.append(cleaner.metrics())
        await cleaner.shutdown()

    started: list[int] = []
    gauges = []
    asyncio.run(run())
    assert reports and reports[0].end_offset == log_.active_segment.base_offset
    # the swap's fsyncs and the checkpoint ran on a thread, after the swap: the file names the cleaned offset
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {
        log_.topic_partition: reports[-1].end_offset}
    # Kafka's LogCleaner and LogCleanerManager gauges after that cleaning
    [m] = gauges
    assert m.max_buffer_utilization_percent == 25
    assert 0 < m.cleaner_recopy_percent < 100, "compaction wrote less than it read"
    assert m.max_clean_time_secs >= 0 and m.dead_thread_count == 0 and m.max_compaction_delay_secs == 0
    assert 0 <= m.max_dirty_percent <= 100 and m.time_since_last_run_ms >= 0
    assert m.uncleanable == {str(tmp_path): (0, 0)}
    if in_process:
        assert reports[0].cleaner_pid == os.getpid() and not pids and not started
    else:
        assert pids == [reports[0].cleaner_pid] == started and pids[0] != os.getpid()
        assert not psutil.pid_exists(pids[0]), "the broker's shutdown ends its cleaner worker process"
    _check_compacted(log_, latest, tombstones_gone=False)
    assert not list(log_.directory.glob("*.cleaned")) and not list(log_.directory.glob("*.swap"))


@pytest.mark.parametrize("setting", [{"log.cleaner.enable": "false"}, {"log.cleaner.threads": "0"}],
                         ids=["enable-false", "no-threads"])
def test_a_disabled_cleaner_starts_no_worker_and_leaves_compacted_logs_as_they_are(tmp_path, clock, setting):
    log_ = open_log(tmp_path, clock)
    _fill(log_, clock, batches=300)
    before = [(segment.base_offset, segment.size) for segment in log_.segments]
    reports: list = []
    workers: list[int] = []

    async def run() -> None:
        cleaner = LogCleaner(CleanerConfig.model_validate({"log.cleaner.backoff.ms": 50, **setting}),
                             lambda: {log_.topic_partition: log_}, clock, on_cleaned=reports.append)
        cleaner.startup()   # an enabled cleaner starts its worker processes here, with the broker (test above)
        workers.extend(cleaner.worker_pids())
        cleaner.wake()
        await asyncio.sleep(0.5)   # ten backoffs: a window for a cleaning that must not come
        await cleaner.shutdown()

    asyncio.run(run())
    assert workers == [] and reports == []
    assert [(segment.base_offset, segment.size) for segment in log_.segments] == before
    assert not (tmp_path / CLEANER_OFFSET_CHECKPOINT).exists()


def test_a_shutdown_does_not_wait_for_a_worker_that_gets_no_cpu(tmp_path, clock):
    """A worker in its low-weight CPU group may get little CPU on a busy machine (here: none, stopped with SIGSTOP in
    the middle of a cleaning). The broker's shutdown kills it rather than wait for its next batch, removes its
    ``.cleaned`` files, and does not mark the log uncleanable."""
    log_ = open_log(tmp_path, clock)
    _fill(log_, clock, batches=300)
    seen: dict[str, object] = {}

    async def run() -> None:
        cleaner = LogCleaner(CleanerConfig.model_validate({"log.cleaner.backoff.ms": 50,
                                                           "log.cleaner.io.max.bytes.per.second": 40_000}),
                             lambda: {log_.topic_partition: log_}, clock)
        cleaner.startup()
        deadline = asyncio.get_running_loop().time() + 30
        while not list(log_.directory.glob("*.log.cleaned")):
            assert asyncio.get_running_loop().time() < deadline, "the throttled cleaning never wrote a file"
            await asyncio.sleep(0.005)
        [pid] = cleaner.worker_pids()
        os.kill(pid, signal.SIGSTOP)
        seen["pid"] = pid
        await asyncio.wait_for(cleaner.shutdown(), 20)  # without the kill it waits for the stopped worker for ever
        seen["uncleanable"] = set(cleaner.manager.uncleanable)
        seen["reports"] = cleaner.cleanings

    asyncio.run(run())
    wait_until(lambda: not psutil.pid_exists(seen["pid"]), 10, "the stopped worker to be gone")
    assert not list(log_.directory.glob("*.cleaned")), "the broker removes the killed worker's files"
    assert seen["uncleanable"] == set() and seen["reports"] == 0
    assert clean_once(log_, clock) is not None


def test_checkpoints_written_off_the_loop_never_go_back(tmp_path, clock):
    """Two cleanings' checkpoints written by threads in the other order: the later snapshot stays."""
    first = open_log(tmp_path, clock)
    second = Log.open(tmp_path / "compacted-1", first.config, clock=clock)
    logs = {first.topic_partition: first, second.topic_partition: second}
    manager = CleanerManager(lambda: logs, clock)
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    manager.checkpointed_offsets(tmp_path)[first.topic_partition] = 10
    earlier = manager.make_durable(first)
    manager.checkpointed_offsets(tmp_path)[second.topic_partition] = 20
    later = manager.make_durable(second)
    later()
    earlier()
    assert OffsetCheckpointFile(path).read() == {first.topic_partition: 10, second.topic_partition: 20}
    # a log whose directory went away meanwhile (deleted) is no error: the checkpoint is still written
    manager.checkpointed_offsets(tmp_path)[first.topic_partition] = 30
    gone = manager.make_durable(first)
    first.close()
    first.directory.rename(tmp_path / "compacted-0.abc-delete")
    gone()
    assert OffsetCheckpointFile(path).read()[first.topic_partition] == 30


def test_a_failed_cleaning_counts_its_partition_and_bytes_as_uncleanable(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    _fill(log_, clock, batches=300)
    manager, opened, plan = _planned(log_, clock)
    assert manager.dirtiest_ratio > 0.5 and manager.uncleanable_by_dir() == {}
    manager.failed(opened, plan)
    [(log_dir, (count, size))] = manager.uncleanable_by_dir().items()
    assert log_dir == tmp_path and count == 1
    assert size == sum(s.size for s in log_.segments[:-1]), "nothing cleaned yet: every inactive segment"
    assert manager.grab_filthiest() is None, "skipped until the broker restarts (KIP-346)"


def _planned(log_, clock):
    manager = CleanerManager(lambda: {log_.topic_partition: log_}, clock)
    opened, candidate = manager.grab_filthiest()
    return manager, opened, manager.plan(opened, candidate)


def test_a_cleaning_runs_in_a_worker_process_that_writes_the_cleaned_files(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    latest = _fill(log_, clock, batches=300)
    manager, opened, plan = _planned(log_, clock)
    worker = CleanerProcess("test-cleaner", 1 << 20, 0.9, float("inf"))
    try:
        result = worker.clean(plan, clock())
        pid = worker.pid
        assert pid is not None and pid != os.getpid()
        assert result is not None and result.stats.pid == pid, "the worker process did the work"
        process = psutil.Process(pid)
        assert process.ppid() == os.getpid()
        assert "broker.log.cleaner.worker" in process.cmdline()
        assert process.nice() > psutil.Process().nice(), "the worker lowers its priority"
        assert os.sched_getscheduler(pid) == os.SCHED_IDLE, "it runs only on CPU time nothing else wants"
        assert all(g.cleaned.log_path.name.endswith(".log.cleaned") for g in result.groups)
        assert sorted(p.name for p in log_.directory.glob("*.log.cleaned")) == sorted(
            g.cleaned.log_path.name for g in result.groups), "the worker wrote them, the broker has not swapped yet"
        report = manager.done_cleaning(opened, plan, result)
        assert report is not None and report.cleaner_pid == pid
        _check_compacted(log_, latest, tombstones_gone=False)
        # the same long-lived process takes the next cleaning
        produce(log_, clock, [(KEYS[0], b"x" * 3000)])
        produce(log_, clock, [(KEYS[0], b"y" * 3000)])
        manager, opened, plan = _planned(log_, clock)
        result = worker.clean(plan, clock())
        assert result is not None and result.stats.pid == pid
        assert manager.done_cleaning(opened, plan, result) is not None
    finally:
        worker.close()
    assert not psutil.pid_exists(pid), "closed by its PID"
    assert not list(log_.directory.glob("*.cleaned"))


def _clean_slowly_in_a_worker(log_, clock, on_cleaned_files):
    """A throttled worker's cleaning on a thread; ``on_cleaned_files(worker)`` once it writes its .cleaned files.
    Returns what the cleaning raised."""
    manager, opened, plan = _planned(log_, clock)
    worker = CleanerProcess("test-cleaner", 1 << 20, 0.9, 40_000)
    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(worker.clean, plan, clock())
            wait_until(lambda: list(log_.directory.glob("*.log.cleaned")) or future.done(), 30,
                       "the worker writing .cleaned files", interval_s=0.005)
            assert not future.done(), "the throttled cleaning should still be running"
            on_cleaned_files(worker)
            with pytest.raises(Exception) as raised:
                future.result(30)
        manager.abandoned(opened, plan)
        return raised.value, worker.pid
    finally:
        worker.close()


def test_a_cleaning_stopped_in_the_worker_process_leaves_no_cleaned_file(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    _fill(log_, clock, batches=300)
    pids = []

    def stop(worker) -> None:
        pids.append(worker.pid)
        worker.stop()

    raised, pid_after = _clean_slowly_in_a_worker(log_, clock, stop)
    assert isinstance(raised, CleaningAborted)
    assert pid_after == pids[0], "the worker goes on after a stopped cleaning"
    assert not list(log_.directory.glob("*.cleaned"))
    assert clean_once(log_, clock) is not None


def test_a_worker_process_killed_during_a_cleaning_leaves_no_cleaned_file(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    latest = _fill(log_, clock, batches=300)
    raised, _ = _clean_slowly_in_a_worker(log_, clock, lambda worker: os.kill(worker.pid, signal.SIGKILL))
    assert isinstance(raised, CleanerWorkerDied)
    assert not list(log_.directory.glob("*.cleaned")), "the broker removes a dead worker's files"
    assert clean_once(log_, clock) is not None
    _check_compacted(log_, latest, tombstones_gone=False)


def test_a_cleaning_told_to_stop_leaves_no_cleaned_file(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    _fill(log_, clock, batches=300)
    manager = CleanerManager(lambda: {log_.topic_partition: log_}, clock)
    opened, candidate = manager.grab_filthiest()
    plan = manager.plan(opened, candidate)
    calls = []

    def stop_after_a_while() -> bool:
        calls.append(1)
        return len(calls) > 400  # well into the rewrite

    with pytest.raises(CleaningAborted):
        clean(plan, OffsetMap(1 << 20), Throttler(float("inf")), now_ms=clock(), should_stop=stop_after_a_while)
    manager.abandoned(opened, plan)
    assert not list(log_.directory.glob("*.cleaned"))
    assert clean_once(log_, clock) is not None


def test_a_log_truncated_during_its_cleaning_is_not_swapped(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    latest = _fill(log_, clock, batches=200)
    records_before = read_segments(log_.directory)
    manager = CleanerManager(lambda: {log_.topic_partition: log_}, clock)
    opened, candidate = manager.grab_filthiest()
    plan = manager.plan(opened, candidate)
    result = clean(plan, OffsetMap(1 << 20), Throttler(float("inf")), now_ms=clock())
    # a follower truncating below the mapped section: the map may name offsets that are gone now
    target = log_.segments[2].base_offset + 1
    log_.truncate_to(target)
    assert manager.done_cleaning(opened, plan, result) is None
    assert not list(log_.directory.glob("*.cleaned"))
    assert read_segments(log_.directory) == [r for r in records_before if r.offset < log_.log_end_offset]
    assert latest


def test_a_segment_truncated_and_refilled_to_its_old_size_during_a_cleaning_is_not_swapped(tmp_path, clock):
    """A follower truncates into a segment the cleaning read, takes a record of the same size from its new leader and
    rolls: same segment, same size, other content. The cleaned copy holds the old record and must not come back."""
    log_ = open_log(tmp_path, clock)
    for n in range(400):
        produce(log_, clock, [(f"key-{n % 20:02d}".encode(), f"old-{n:06d}".encode())])
    manager = CleanerManager(lambda: {log_.topic_partition: log_}, clock)
    opened, candidate = manager.grab_filthiest()
    plan = manager.plan(opened, candidate)
    result = clean(plan, OffsetMap(1 << 20), Throttler(float("inf")), now_ms=clock())
    # the last segment the cleaning read: truncating into it removes only the active one, which it did not read
    segment = log_.segments[-2]
    size = segment.size
    last_batch = log_.active_segment.base_offset - 1  # one record per batch
    assert result.end_offset == log_.active_segment.base_offset
    log_.truncate_to(last_batch)
    produce(log_, clock, [(f"key-{last_batch % 20:02d}".encode(), f"new-{last_batch:06d}".encode())])
    log_.roll()
    assert log_.segments[-2] is segment and segment.size == size
    assert manager.done_cleaning(opened, plan, result) is None
    assert not list(log_.directory.glob("*.cleaned"))
    stored = {r.offset: r.value for r in read_segments(log_.directory)}
    assert stored[last_batch] == f"new-{last_batch:06d}".encode()
    assert len(stored) == last_batch + 1


def test_a_cleaning_failing_because_its_log_was_deleted_counts_as_abandoned(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    _fill(log_, clock, batches=200)
    logs = {log_.topic_partition: log_}
    manager = CleanerManager(lambda: dict(logs), clock)
    opened, candidate = manager.grab_filthiest()
    plan = manager.plan(opened, candidate)
    assert not manager.changed_under(opened, plan)
    logs.clear()
    log_.delete()  # StopReplica(delete) while the thread works: its .cleaned files have nowhere to go
    with pytest.raises(OSError):
        clean(plan, OffsetMap(1 << 20), Throttler(float("inf")), now_ms=clock())
    assert manager.changed_under(opened, plan)
    manager.abandoned(opened, plan)
    assert not manager.uncleanable and not manager.in_progress


def test_a_compacted_log_refuses_a_record_without_a_key_as_kafka_does(tmp_path, clock):
    log_ = open_log(tmp_path, clock)
    with pytest.raises(InvalidRecordBatchError) as info:
        produce(log_, clock, [(b"a", b"1"), (None, b"2")], compression=GZIP)
    assert info.value.error_code == ErrorCode.invalid_record
    assert "Compacted topic cannot accept message without key" in str(info.value)
    assert log_.log_end_offset == 0
    plain = open_log(tmp_path / "plain", clock, **{"cleanup.policy": "delete"})
    produce(plain, clock, [(None, b"2")])
    assert plain.log_end_offset == 1


def test_aborted_data_goes_at_once_and_the_markers_once_past_the_horizon(tmp_path, clock):
    """Kafka's transactional rules: the first pass removes the aborted transaction's data and keeps both markers;
    the markers go only in a pass past the delete horizon, once their transactions' data is gone."""
    log_ = open_log(tmp_path, clock, **{"delete.retention.ms": 1000})

    def txn(producer_id: int, keys: list[bytes], value: bytes, sequence: int) -> None:
        records = [Record(k, value, clock()) for k in keys]
        log_.append_as_leader(build_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                                          transactional=True), 0)

    def marker(producer_id: int, *, abort: bool) -> None:
        log_.append_as_leader(build_end_txn_marker(producer_id=producer_id, producer_epoch=0, abort=abort,
                                                   coordinator_epoch=1, timestamp=clock()), 0, from_coordinator=True)

    txn(7, KEYS[0:3], b"aborted", 0)
    txn(8, KEYS[3:6], b"committed-1", 0)
    txn(7, KEYS[0:3], b"aborted-too", 3)
    marker(7, abort=True)
    marker(8, abort=False)
    txn(8, KEYS[3:6], b"committed-2", 3)  # pid 8's next transaction replaces its first one's values
    marker(8, abort=False)
    abort_offset = 9
    rng = random.Random(5)

    def more(n: int) -> None:
        for i in range(n):
            produce(log_, clock, [(rng.choice(KEYS[6:]), f"plain-{i}".encode() * 8)])

    more(80)
    assert log_.collect_aborted_transactions(0, log_.log_end_offset) == [AbortedTxn(7, 0, abort_offset, 3)]
    assert clean_once(log_, clock) is not None
    batches = read_batches(log_.directory)
    assert not [b for b in batches if b.producer_id == 7 and not b.control and b.keys], "aborted data gone"
    # pid 7's last data batch stays as an empty batch (its sequence), as Kafka's RETAIN_EMPTY keeps it
    assert [b for b in batches if b.producer_id == 7 and not b.control and not b.keys]
    markers = [b for b in batches if b.control]
    assert [(b.producer_id, b.base_offset) for b in markers] == [(7, abort_offset), (8, 10), (8, 14)]
    records = read_segments(log_.directory)
    assert not [r for r in records if r.key in KEYS[0:3]], "a consumer never sees the aborted values"
    assert {r.key: r.value for r in records if r.key in KEYS[3:6]} == dict.fromkeys(KEYS[3:6], b"committed-2")
    # the abort marker stays (its data went in this pass), indexed again in the cleaned segment
    assert log_.collect_aborted_transactions(0, log_.log_end_offset) == [AbortedTxn(7, 0, abort_offset, 3)]

    # the empty batch holds pid 7's last sequence, so it stays, and with it the marker: pid 7's next transaction
    txn(7, KEYS[6:7], b"seven-again", 6)
    marker(7, abort=False)
    # two more passes: the segments cleaned so far get old, the horizon passes them in the third
    old = (clock() - 10_000) / 1000
    for segment in log_.segments[:-1]:
        os.utime(segment.log_path, (old, old))
    more(80)
    assert clean_once(log_, clock) is not None
    batches = read_batches(log_.directory)
    assert not [b for b in batches if b.producer_id == 7 and b.base_offset < abort_offset], "no longer the last"
    assert [b.base_offset for b in batches if b.control][:3] == [abort_offset, 10, 14], \
        "within the horizon the markers stay"
    # the abort marker met its (empty) batch in this pass: still indexed
    assert log_.collect_aborted_transactions(0, log_.log_end_offset) == [AbortedTxn(7, 0, abort_offset, 3)]
    more(80)
    assert clean_once(log_, clock) is not None
    markers = [b for b in read_batches(log_.directory) if b.control]
    assert abort_offset not in [b.base_offset for b in markers], "no data left, past the horizon: gone"
    assert 10 not in [b.base_offset for b in markers], "its transaction's records were all replaced: gone"
    assert 14 in [b.base_offset for b in markers], "its transaction's data is still there: it stays"
    assert log_.collect_aborted_transactions(0, log_.log_end_offset) == []
    assert {r.key: r.value for r in read_segments(log_.directory) if r.key in KEYS[3:6]} == dict.fromkeys(
        KEYS[3:6], b"committed-2")
    assert log_.ongoing_transactions == {} and log_.last_stable_offset(log_.log_end_offset) == log_.log_end_offset


def test_an_open_transaction_and_what_follows_it_are_not_cleaned(tmp_path, clock):
    """Its fate is not known: if it aborts, the value before it is the key's latest (Kafka's first unstable
    offset bounds the cleanable section, at the base of the segment holding it)."""
    log_ = open_log(tmp_path, clock)
    _fill(log_, clock, batches=150)
    produce(log_, clock, [(KEYS[0], b"before-the-transaction")])
    first = log_.log_end_offset
    log_.append_as_leader(build_batch([Record(KEYS[0], b"pending", clock())], producer_id=9, producer_epoch=0,
                                      base_sequence=0, transactional=True), 0)
    _fill(log_, clock, batches=150, seed=8)
    holding = max(s.base_offset for s in log_.segments if s.base_offset <= first)
    assert holding < log_.active_segment.base_offset
    report = clean_once(log_, clock)
    assert report is not None and report.end_offset <= holding
    values = [r.value for r in read_segments(log_.directory) if r.key == KEYS[0]]
    assert b"before-the-transaction" in values and b"pending" in values
    assert [b for b in read_batches(log_.directory) if b.producer_id == 9 and b.keys == (KEYS[0],)]
    assert min(s.base_offset for s in log_.segments if s.base_offset >= holding) == holding, "untouched from there"
