"""Checkpoint files written off the event loop, batched (Kafka 3.7's KAFKA-15046 for the leader-epoch checkpoint).

A broker becoming leader of hundreds of partitions in one LeaderAndIsr wrote and fsynced one
``leader-epoch-checkpoint`` per partition on its event loop: seconds at 1000 partitions, during which it
answered nothing (a controlled shutdown waited for it, followers' fetches stalled and ISRs shrank).

Here a change only marks the file dirty; the flusher collects every dirty file that the loop has marked
meanwhile and writes them in a pool of threads, each still atomically (``.tmp``, fsync, rename, fsync of the
directory), so a crash leaves each file either old or new, never torn. Rounds run one after another, and a
file's write carries the generation of the content it writes: an older content never replaces a newer one
(see ``LeaderEpochFileCache``). Whoever needs the file durable now (a flush that moves the recovery point,
a clean shutdown) writes the pending content itself, synchronously.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

log = logging.getLogger(__name__)

WORKERS = 4  # concurrent fsyncs share the file system's journal commits


@dataclass(frozen=True)
class Deferred:
    """One dirty file: ``take`` (on the loop) snapshots what to write as a thread-safe callable, or None when
    nothing is pending any more; ``on_error`` (on the loop) is told of an OSError the write raised."""

    take: Callable[[], Callable[[], None] | None]
    on_error: Callable[[OSError], None]


class CheckpointFlusher:
    def __init__(self, workers: int = WORKERS) -> None:
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._dirty: dict[Hashable, Deferred] = {}
        self._task: asyncio.Task | None = None
        self._closed = False
        self.rounds = 0    # batches written (for tests and logs)
        self.written = 0   # files written

    def schedule(self, key: Hashable, deferred: Deferred) -> bool:
        """Marks ``key``'s file dirty. False when it cannot be deferred (no running event loop, or closed): the
        caller writes it now."""
        if self._closed:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._dirty[key] = deferred
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="checkpoint-flusher")
        return True

    @property
    def pending(self) -> int:
        return len(self._dirty)

    async def drain(self) -> None:
        """Until every file marked dirty so far is written (or found superseded)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        # one turn of the loop first: the rest of the request being applied marks its files too
        await asyncio.sleep(0)
        while self._dirty and not self._closed:
            dirty, self._dirty = self._dirty, {}
            writes = []
            for deferred in dirty.values():
                write = deferred.take()
                if write is not None:
                    writes.append((write, deferred))
            if not writes:
                continue
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="checkpoint-flusher")
            results = await asyncio.gather(*(loop.run_in_executor(self._pool, write) for write, _ in writes),
                                           return_exceptions=True)
            self.rounds += 1
            self.written += len(writes)
            for result, (_, deferred) in zip(results, writes, strict=True):
                if isinstance(result, OSError):
                    deferred.on_error(result)
                elif isinstance(result, BaseException):
                    log.error("checkpoint write failed", exc_info=result)

    def close(self) -> None:
        """No more deferring (later changes are written by their caller); waits for the writes under way."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
