"""Checkpoint files written off the event loop, batched (Kafka 3.7's KAFKA-15046 for the leader-epoch checkpoint).

A broker becoming leader of hundreds of partitions in one LeaderAndIsr wrote and fsynced one
``leader-epoch-checkpoint`` per partition on its event loop: seconds at 1000 partitions, during which it
answered nothing (a controlled shutdown waited for it, followers' fetches stalled and ISRs shrank).

Here a change only marks the file dirty; the flusher collects every file that the loop has marked meanwhile and
writes them in a thread per log directory, as one batch (``write_all_atomically``: every ``.tmp`` written, one
sync of the file system, the renames, one more sync; a thousand fsyncs competed with ZooKeeper's own for the
disk), so a crash leaves each file either old or new, never torn. Rounds run one after another, and a file's
write carries the generation of the content it writes and holds the file's lock from its ``.tmp`` to its rename:
an older content never replaces a newer one (see ``LeaderEpochFileCache``). Whoever needs the file durable now (a
flush that moves the recovery point, a clean shutdown) writes the pending content itself, synchronously.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from broker.log.checkpoint import write_all_atomically

log = logging.getLogger(__name__)

WORKERS = 2  # batches run a log directory each


@dataclass(frozen=True)
class PendingWrite:
    """A content to write, snapshotted on the loop. ``begin`` (in the writing thread) takes the file's lock and
    says whether the content is still the one to write; ``end(ok)`` records it written and releases the lock."""

    path: Path
    text: str
    begin: Callable[[], bool]
    end: Callable[[bool], None]


@dataclass(frozen=True)
class Deferred:
    """One dirty file: ``take`` (on the loop) snapshots what to write, or None when nothing is pending any more;
    ``on_error`` (on the loop) is told of an OSError its batch raised."""

    take: Callable[[], PendingWrite | None]
    on_error: Callable[[OSError], None]


def write_batch(writes: list[PendingWrite]) -> int:
    """In a thread: the writes still current, as one batch; returns how many were written."""
    began = [w for w in writes if w.begin()]
    ok = False
    try:
        write_all_atomically([(w.path, w.text) for w in began])
        ok = True
    finally:
        for w in began:
            w.end(ok)
    return len(began)


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
            by_log_dir: dict[Path, list[tuple[PendingWrite, Deferred]]] = defaultdict(list)
            for deferred in dirty.values():
                write = deferred.take()
                if write is not None:
                    by_log_dir[write.path.parent.parent].append((write, deferred))
            if not by_log_dir:
                continue
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="checkpoint-flusher")
            batches = list(by_log_dir.values())
            results = await asyncio.gather(
                *(loop.run_in_executor(self._pool, write_batch, [w for w, _ in batch]) for batch in batches),
                return_exceptions=True)
            self.rounds += 1
            for result, batch in zip(results, batches, strict=True):
                if isinstance(result, OSError):
                    for _, deferred in batch:
                        deferred.on_error(result)
                elif isinstance(result, BaseException):
                    log.error("checkpoint write failed", exc_info=result)
                else:
                    self.written += result

    def close(self) -> None:
        """No more deferring (later changes are written by their caller); waits for the writes under way."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
