"""LogCleaner: the cleaner threads (Kafka's LogCleaner with its CleanerThreads), for an asyncio broker.

Each of ``log.cleaner.threads`` workers is an asyncio task: on the loop it asks the manager for the dirtiest
compacted log and a plan, hands the plan to its cleaner worker process (:mod:`broker.log.cleaner.worker`: the
reading, decompressing, filtering and writing, throttled by log.cleaner.io.max.bytes.per.second, at a lower
priority, and above all away from the broker's GIL), waits for it on a thread of its own (which only waits on a
socket), back on the loop swaps the result in (renames only), and has a thread make the swap durable (the fsyncs and
the checkpoint). With nothing to clean it waits log.cleaner.backoff.ms. The worker processes start with the cleaner.

``in_process=True`` runs the cleanings on the threads instead, in this process (tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from broker.log.cleaner.cleaner import CleanerStats, CleaningAborted, CleaningPlan, CleaningResult, clean
from broker.log.cleaner.manager import CleanerManager, CleaningReport, TopicPartition
from broker.log.cleaner.offset_map import OffsetMap
from broker.log.cleaner.throttler import Throttler
from broker.log.cleaner.cpu_group import CleanerCpuGroup
from broker.log.cleaner.worker import CleanerProcess
from broker.log.log import Log

log = logging.getLogger(__name__)

DOUBLE_MAX = 1.7976931348623157e308
STOP_WAIT_S = 1.0  # how long a broker's shutdown waits for a cleaning to stop, and then for a worker to exit
INT_MAX = 2**31 - 1


class CleanerConfig(BaseModel):
    """The broker's log.cleaner.* settings (Kafka's CleanerConfig), by their Kafka names."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    enable: bool = Field(True, alias="log.cleaner.enable")
    threads: int = Field(1, alias="log.cleaner.threads", ge=0)
    dedupe_buffer_size: int = Field(128 * 1024 * 1024, alias="log.cleaner.dedupe.buffer.size", ge=24)
    io_buffer_load_factor: float = Field(0.9, alias="log.cleaner.io.buffer.load.factor", gt=0, le=1)
    io_max_bytes_per_second: float = Field(DOUBLE_MAX, alias="log.cleaner.io.max.bytes.per.second", gt=0)
    backoff_ms: int = Field(15000, alias="log.cleaner.backoff.ms", ge=0)

    @property
    def map_memory_per_thread(self) -> int:
        """Kafka splits the dedupe buffer between the threads, at most 2 GiB each."""
        return min(self.dedupe_buffer_size // max(1, self.threads), INT_MAX)


@dataclass(frozen=True)
class CleanerMetrics:
    """Kafka's LogCleaner and LogCleanerManager gauges, as one scrape sees them (plain data)."""

    max_buffer_utilization_percent: int  # the fullest offset map of the threads' last cleanings
    cleaner_recopy_percent: int          # bytes written / bytes read over the threads' last cleanings
    max_clean_time_secs: int             # the longest of the threads' last cleanings
    max_compaction_delay_secs: int       # how far past max.compaction.lag.ms a log chosen last was
    dead_thread_count: int
    max_dirty_percent: int               # the highest dirty ratio at the last choice
    time_since_last_run_ms: int          # since the last choice
    uncleanable: dict[str, tuple[int, int]]  # log dir -> (partitions marked uncleanable, their cleanable bytes)


def cleaner_property_names() -> frozenset[str]:
    return frozenset(field.alias or name for name, field in CleanerConfig.model_fields.items())


class LogCleaner:
    def __init__(self, config: CleanerConfig, logs: Callable[[], dict[TopicPartition, Log]],
                 clock: Callable[[], int], on_cleaned: Callable[[CleaningReport], None] = lambda report: None, *,
                 in_process: bool = False, log_dirs: Callable[[], list[Path]] | None = None,
                 high_watermarks: Callable[[], Mapping[TopicPartition, int]] | None = None) -> None:
        self.config = config
        self._logs = logs
        self._log_dirs = log_dirs
        self.manager = CleanerManager(logs, clock, high_watermarks)
        self._clock = clock
        self._on_cleaned = on_cleaned
        self._in_process = in_process
        self._throttler = Throttler(config.io_max_bytes_per_second)  # in process: one for every thread, as Kafka's
        # each worker process throttles itself to its share of the rate, so they all together keep to it
        self.cpu_group = CleanerCpuGroup() if not in_process else None
        self.processes = [CleanerProcess(f"kafka-log-cleaner-thread-{i}", config.map_memory_per_thread,
                                         config.io_buffer_load_factor,
                                         config.io_max_bytes_per_second / max(1, config.threads), self.cpu_group)
                          for i in range(config.threads)] if not in_process else []
        self._stopping = threading.Event()
        self._wake = asyncio.Event()
        self._executor: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task] = []
        self.cleanings = 0
        # each thread's last cleaning and the compaction delay at its last choice (Kafka's lastStats and
        # lastPreCleanStats), for the gauges
        self._last_stats: list[CleanerStats | None] = [None] * config.threads
        self._last_compaction_delay_ms = [0] * config.threads

    def startup(self) -> None:
        if not self.config.enable or self.config.threads == 0:
            log.info("log cleaner disabled (log.cleaner.enable=%s, log.cleaner.threads=%d): compacted topics are "
                     "not compacted", self.config.enable, self.config.threads)
            return
        self._executor = ThreadPoolExecutor(self.config.threads, thread_name_prefix="kafka-log-cleaner-thread")
        loop = asyncio.get_running_loop()
        for index, process in enumerate(self.processes):
            # now, as Kafka starts its cleaner threads with the broker: a worker's start (an interpreter and its
            # imports) then never lands in the middle of the traffic a first cleaning comes with
            try:
                process.start()  # on the loop's thread: the worker dies with it
            except OSError:
                log.exception("log cleaner %d cannot start its worker process; tried again at its first cleaning",
                              index)
        self._tasks = [loop.create_task(self._work(i), name=f"kafka-log-cleaner-thread-{i}")
                       for i in range(self.config.threads)]

    def wake(self) -> None:
        """Look for dirty logs now instead of at the end of the backoff (tests, tools)."""
        self._wake.set()

    def worker_pids(self) -> list[int]:
        """The PIDs of the worker processes running now (they start at their first cleaning)."""
        return [pid for process in self.processes if (pid := process.pid) is not None]

    async def _work(self, index: int) -> None:
        if self._in_process:
            offset_map = OffsetMap(self.config.map_memory_per_thread, self.config.io_buffer_load_factor)
            run: Callable[[CleaningPlan, int], CleaningResult | None] = lambda plan, now_ms: clean(  # noqa: E731
                plan, offset_map, self._throttler, now_ms=now_ms, should_stop=self._stopping.is_set)
        else:
            process = self.processes[index]
            run = process.clean
        while not self._stopping.is_set():
            cleaned = False
            try:
                cleaned = await self._clean_filthiest(run, index)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner %d failed; going on", index)
            if not cleaned:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.config.backoff_ms / 1000)

    async def _clean_filthiest(self, run: Callable[[CleaningPlan, int], CleaningResult | None], index: int) -> bool:
        started = time.perf_counter()
        grabbed = self.manager.grab_filthiest()
        if grabbed is None:
            return False
        opened, candidate = grabbed
        self._last_compaction_delay_ms[index] = self.manager.max_compaction_delay_ms
        plan = self.manager.plan(opened, candidate)
        plan_s = time.perf_counter() - started
        assert self._executor is not None
        if not self._in_process:
            try:
                self.processes[index].start()  # here, on the loop's thread: the worker dies with it
            except OSError:  # no fault of the log's: not marked uncleanable, tried again after the backoff
                log.exception("log cleaner %d cannot start its worker process", index)
                self.manager.abandoned(opened, plan)
                return False
        try:
            now_ms = self._clock()
            result = await asyncio.get_running_loop().run_in_executor(self._executor, lambda: run(plan, now_ms))
        except CleaningAborted:
            self.manager.abandoned(opened, plan)
            return False
        except Exception:
            if self._stopping.is_set():  # the worker was killed by the shutdown: no fault of the log's
                self.manager.abandoned(opened, plan)
                return False
            if self.manager.changed_under(opened, plan):
                # deleted, truncated or moved by retention meanwhile: Kafka aborts such a cleaning, it is no failure
                log.info("%s-%d: the log changed during its cleaning; abandoned", opened.topic, opened.partition)
                self.manager.abandoned(opened, plan)
                return False
            # KIP-346: a log whose cleaning fails is marked uncleanable, the others go on being cleaned
            log.exception("%s-%d: cleaning failed; the log is marked uncleanable until the broker restarts",
                          opened.topic, opened.partition)
            self.manager.failed(opened, plan)
            return False
        started = time.perf_counter()
        report = self.manager.done_cleaning(opened, plan, result, sync=False)
        swap_s = time.perf_counter() - started
        if report is None:
            return False
        # the fsyncs that make the swap durable, then the checkpoint, on a thread: on the loop they took 10-100 ms
        # each time (docs/compaction.md), which every produce and fetch of the broker waited for
        started = time.perf_counter()
        try:
            await asyncio.to_thread(self.manager.make_durable(opened))
        except OSError as exc:
            with opened.log_dir_failure_channel.guard(
                    opened.log_dir, f"Error while syncing the cleaned segments of {opened.topic}-{opened.partition} "
                    f"in dir {opened.log_dir}"):
                raise exc from None
        sync_s = time.perf_counter() - started
        self.cleanings += 1
        self._last_stats[index] = result.stats if result is not None else None
        log.info("%s-%d: cleaned offsets [%d, %d): %d segments (%d bytes) into %d (%d bytes), %d of %d records kept, "
                 "%d keys, %.0f ms in process %d; on the loop: choice and plan %.1f ms, swap %.1f ms; on a thread: "
                 "fsyncs and checkpoint %.1f ms",
                 report.topic, report.partition, report.first_dirty_offset, report.end_offset, report.segments_before,
                 report.bytes_before, report.segments_after, report.bytes_after, report.records_kept,
                 report.records_read, report.keys, report.duration_ms, report.cleaner_pid, plan_s * 1000,
                 swap_s * 1000, sync_s * 1000)
        self._on_cleaned(report)
        return True

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    def metrics(self) -> CleanerMetrics:
        """The gauges, by Kafka's rules (LogCleaner's maxOverCleanerThreads: 0 before any cleaning); on the loop."""
        stats = [s for s in self._last_stats if s is not None]
        read, written = sum(s.bytes_read for s in stats), sum(s.bytes_written for s in stats)
        dead = 0 if self._stopping.is_set() else sum(task.done() for task in self._tasks)
        log_dirs = self._log_dirs() if self._log_dirs is not None else {o.log_dir for o in self._logs().values()}
        uncleanable = {str(d): (0, 0) for d in sorted(log_dirs)}
        uncleanable.update({str(d): counts for d, counts in self.manager.uncleanable_by_dir().items()})
        return CleanerMetrics(
            max_buffer_utilization_percent=int(100 * max((s.map_utilization for s in stats), default=0.0)),
            cleaner_recopy_percent=int(100 * written / max(read, 1)),
            max_clean_time_secs=int(max((s.duration_s for s in stats), default=0.0)),
            max_compaction_delay_secs=int(max(self._last_compaction_delay_ms, default=0) / 1000),
            dead_thread_count=dead,
            max_dirty_percent=int(100 * self.manager.dirtiest_ratio),
            time_since_last_run_ms=max(0, self._clock() - self.manager.time_of_last_run_ms),
            uncleanable=uncleanable)

    async def shutdown(self) -> None:
        """Stop the workers; a cleaning in progress stops at its next batch and leaves no ``.cleaned`` file; the
        worker processes exit (killed by their PIDs if they do not)."""
        self._stopping.set()
        self._wake.set()
        for process in self.processes:
            process.stop()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=STOP_WAIT_S)
            if pending:
                # a worker in its low-weight CPU group may get little CPU on a busy machine: the shutdown does not wait
                # for its next batch; killed, it fails its cleaning, whose .cleaned files the broker removes
                log.warning("log cleaner: a worker did not stop its cleaning within %.1f s; killing it", STOP_WAIT_S)
                for process in self.processes:
                    process.kill()
                await asyncio.wait(pending)
        for process in self.processes:
            await asyncio.to_thread(process.close, STOP_WAIT_S)
        if self.cpu_group is not None:
            self.cpu_group.remove()
        if self._executor is not None:
            self._executor.shutdown(wait=True)

