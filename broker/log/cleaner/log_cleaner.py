"""LogCleaner: the cleaner threads (Kafka's LogCleaner with its CleanerThreads), for an asyncio broker.

Each of ``log.cleaner.threads`` workers is an asyncio task: on the loop it asks the manager for the dirtiest
compacted log and a plan, hands the plan to its own thread (the reading, decompressing, filtering and writing,
throttled by log.cleaner.io.max.bytes.per.second shared by every worker, as Kafka's one throttler), and back on the
loop swaps the result in. With nothing to clean it waits log.cleaner.backoff.ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pydantic import BaseModel, ConfigDict, Field

from broker.log.cleaner.cleaner import CleaningAborted, clean
from broker.log.cleaner.manager import CleanerManager, CleaningReport, TopicPartition
from broker.log.cleaner.offset_map import OffsetMap
from broker.log.cleaner.throttler import Throttler
from broker.log.log import Log

log = logging.getLogger(__name__)

DOUBLE_MAX = 1.7976931348623157e308
# While a cleaner thread runs Python code, the event loop waits for the GIL up to the interpreter's switch interval
# (5 ms) each time it wants it back; a shorter one while cleanings run brought a produce p99 (acks=all) from 170-190 ms
# to about 100 ms in most runs, against 23-30 ms without the cleaner (docs/compaction.md: far from the 1.5x target).
CLEANING_SWITCH_INTERVAL_S = 0.0005
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


def cleaner_property_names() -> frozenset[str]:
    return frozenset(field.alias or name for name, field in CleanerConfig.model_fields.items())


class LogCleaner:
    def __init__(self, config: CleanerConfig, logs: Callable[[], dict[TopicPartition, Log]],
                 clock: Callable[[], int], on_cleaned: Callable[[CleaningReport], None] = lambda report: None) -> None:
        self.config = config
        self.manager = CleanerManager(logs, clock)
        self._clock = clock
        self._on_cleaned = on_cleaned
        self._throttler = Throttler(config.io_max_bytes_per_second)  # one for every thread, as Kafka's
        self._stopping = threading.Event()
        self._wake = asyncio.Event()
        self._executor: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task] = []
        self.cleanings = 0
        self._running = 0
        self._switch_interval = sys.getswitchinterval()

    def startup(self) -> None:
        if not self.config.enable or self.config.threads == 0:
            log.info("log cleaner disabled (log.cleaner.enable=%s, log.cleaner.threads=%d): compacted topics are "
                     "not compacted", self.config.enable, self.config.threads)
            return
        self._executor = ThreadPoolExecutor(self.config.threads, thread_name_prefix="kafka-log-cleaner-thread")
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._work(i), name=f"kafka-log-cleaner-thread-{i}")
                       for i in range(self.config.threads)]

    def wake(self) -> None:
        """Look for dirty logs now instead of at the end of the backoff (tests, tools)."""
        self._wake.set()

    async def _work(self, index: int) -> None:
        offset_map = OffsetMap(self.config.map_memory_per_thread, self.config.io_buffer_load_factor)
        while not self._stopping.is_set():
            cleaned = False
            try:
                cleaned = await self._clean_filthiest(offset_map)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner %d failed; going on", index)
            if not cleaned:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.config.backoff_ms / 1000)

    async def _clean_filthiest(self, offset_map: OffsetMap) -> bool:
        grabbed = self.manager.grab_filthiest()
        if grabbed is None:
            return False
        opened, candidate = grabbed
        plan = self.manager.plan(opened, candidate)
        assert self._executor is not None
        if self._running == 0:
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(CLEANING_SWITCH_INTERVAL_S)
        self._running += 1
        try:
            result = await asyncio.get_running_loop().run_in_executor(
                self._executor, lambda: clean(plan, offset_map, self._throttler, now_ms=self._clock(),
                                              should_stop=self._stopping.is_set))
        except CleaningAborted:
            self.manager.abandoned(opened, plan)
            return False
        except Exception:
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
        finally:
            self._running -= 1
            if self._running == 0:
                sys.setswitchinterval(self._switch_interval)
        report = self.manager.done_cleaning(opened, plan, result)
        if report is None:
            return False
        self.cleanings += 1
        log.info("%s-%d: cleaned offsets [%d, %d): %d segments (%d bytes) into %d (%d bytes), %d of %d records kept, "
                 "%d keys, %.0f ms", report.topic, report.partition, report.first_dirty_offset, report.end_offset,
                 report.segments_before, report.bytes_before, report.segments_after, report.bytes_after,
                 report.records_kept, report.records_read, report.keys, report.duration_ms)
        self._on_cleaned(report)
        return True

    async def shutdown(self) -> None:
        """Stop the workers; a cleaning in progress stops at its next batch and leaves no ``.cleaned`` file."""
        self._stopping.set()
        self._wake.set()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._executor is not None:
            self._executor.shutdown(wait=True)

