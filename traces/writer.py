"""Appends trace events as JSON lines without ever blocking the caller.

Callers (the asyncio loop, request handlers) only build the event and put it in a bounded buffer; a
background thread serializes and writes batches. The thread is woken by the first event after a drain
and then lingers ``linger_s`` before the next one, so under load it wakes at most 1/linger_s times a second
(waking it per event cost the loop a GIL hand-off per event) while a lone event is on disk within
milliseconds. When the buffer is full the event is dropped and counted, and the count is written as soon as
there is room, so a reader always knows that something is missing.

Files rotate by size the way log4j's RollingFileAppender does: ``trace.jsonl`` is the newest,
``trace.jsonl.1`` the one before, up to ``trace.jsonl.<backups>``; older ones are deleted.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traces.events import TraceEvent, TraceEventsDropped

DEFAULT_MAX_FILE_BYTES = 100 * 1024 * 1024
DEFAULT_BACKUPS = 10


def rotated_files(path: Path) -> list[Path]:
    """A trace file and its rotated predecessors, oldest first (the order their events were written in)."""
    backups = sorted((p for p in path.parent.glob(path.name + ".*") if p.suffix[1:].isdigit()),
                     key=lambda p: int(p.suffix[1:]), reverse=True)
    return [*backups, path] if path.exists() else backups


class TraceWriter:
    def __init__(self, path: Path, broker_id: int, capacity: int = 65536, *, enabled: bool = True,
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, backups: int = DEFAULT_BACKUPS,
                 linger_s: float = 0.01, clock: Callable[[], float] = time.time) -> None:
        """``clock``: the wall clock in seconds the events' ``ts_ms`` come from (a replay or a test gives its own)."""
        if max_file_bytes <= 0 or backups < 0 or capacity <= 0:
            raise ValueError("trace files need max_file_bytes > 0, backups >= 0 and capacity > 0")
        self.path = path
        self.broker_id = broker_id
        self.capacity = capacity
        self.enabled = enabled
        self.max_file_bytes = max_file_bytes
        self.backups = backups
        self.linger_s = linger_s
        self.clock = clock
        self.dropped = 0
        self.written = 0
        self.controller_epoch: int | None = None   # filled in by whoever knows it
        self._buffer: deque[TraceEvent] = deque()
        self._wake = threading.Event()
        self._closed = False
        self._file = None
        self._thread: threading.Thread | None = None
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")
            self._size = self._file.tell()
            self._thread = threading.Thread(target=self._run, name=f"trace-writer-{broker_id}", daemon=True)
            self._thread.start()

    def emit(self, event_type: type[TraceEvent], **fields: Any) -> TraceEvent | None:
        if not self.enabled:
            return None
        if self._closed or len(self._buffer) >= self.capacity:
            self.dropped += 1
            return None
        fields.setdefault("broker_id", self.broker_id)
        fields.setdefault("controller_epoch", self.controller_epoch)
        event = event_type(ts_ms=self.clock() * 1000, mono_ns=time.monotonic_ns(), **fields)
        self._buffer.append(event)
        if not self._wake.is_set():  # a plain read; set() takes a lock, so only the first event after a drain
            self._wake.set()
        return event

    def _run(self) -> None:
        reported_drops = 0
        while True:
            self._wake.wait(1.0)
            time.sleep(self.linger_s)  # let a burst gather into one batch
            self._wake.clear()
            closing = self._closed
            lines = []
            while self._buffer:
                lines.append(self._buffer.popleft().model_dump_json())
            if self.dropped != reported_drops:
                lines.append(TraceEventsDropped(
                    ts_ms=time.time() * 1000, mono_ns=time.monotonic_ns(), broker_id=self.broker_id,
                    dropped_total=self.dropped).model_dump_json())
                reported_drops = self.dropped
            if lines:
                self._write(lines)
            if closing and not self._buffer:
                return

    # Not logging.handlers.RotatingFileHandler, though its names (trace.jsonl.1 ...) are the same: it flushes
    # every record where this flushes once per batch, and checks the size with two stats and a seek per
    # record where this counts in memory; it counts characters, not bytes, so non-ASCII lines overrun the
    # limit; a line bigger than the limit rotates an empty file and pushes out a real backup; and
    # backupCount=0 means "never rotate" (an unbounded file) where backups=0 here means "keep no backups".
    # The buffer, the linger and the drop count stay here either way (QueueHandler does none of them).
    def _write(self, lines: list[str]) -> None:
        for line in lines:  # rotation happens between whole lines, never inside one
            size = len(line.encode()) + 1
            if self._size and self._size + size > self.max_file_bytes:
                self._rotate()
            self._file.write(line + "\n")
            self._size += size
        self._file.flush()
        self.written += len(lines)

    def _rotate(self) -> None:
        self._file.close()
        path = self.path
        if self.backups == 0:
            path.unlink(missing_ok=True)
        else:
            path.with_name(f"{path.name}.{self.backups}").unlink(missing_ok=True)
            for n in range(self.backups - 1, 0, -1):
                older = path.with_name(f"{path.name}.{n}")
                if older.exists():
                    older.rename(path.with_name(f"{path.name}.{n + 1}"))
            path.rename(path.with_name(f"{path.name}.1"))
        self._file = open(path, "a", encoding="utf-8")
        self._size = 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        self._wake.set()
        self._thread.join(timeout=5)
        self._file.close()
