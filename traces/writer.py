"""Appends trace events as JSON lines without ever blocking the caller.

Callers (the asyncio loop, request handlers) only put events in a bounded buffer; a background thread
writes them out. When the buffer is full the event is dropped and counted, and the count is written as
soon as there is room, so a reader always knows that something is missing.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from traces.events import TraceEvent, TraceEventsDropped


class TraceWriter:
    def __init__(self, path: Path, broker_id: int, capacity: int = 65536) -> None:
        self.path = path
        self.broker_id = broker_id
        self.capacity = capacity
        self.dropped = 0
        self.controller_epoch: int | None = None   # filled in by whoever knows it
        self._buffer: deque[str] = deque()
        self._wake = threading.Event()
        self._closed = False
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")
        self._thread = threading.Thread(target=self._run, name=f"trace-writer-{broker_id}", daemon=True)
        self._thread.start()

    def emit(self, event_type: type[TraceEvent], **fields: Any) -> TraceEvent | None:
        fields.setdefault("broker_id", self.broker_id)
        fields.setdefault("controller_epoch", self.controller_epoch)
        event = event_type(ts_ms=time.time() * 1000, mono_ns=time.monotonic_ns(), **fields)
        if self._closed or len(self._buffer) >= self.capacity:
            self.dropped += 1
            return None
        self._buffer.append(event.model_dump_json())
        self._wake.set()
        return event

    def _run(self) -> None:
        reported_drops = 0
        while True:
            self._wake.wait(0.2)
            self._wake.clear()
            lines = []
            while self._buffer:
                lines.append(self._buffer.popleft())
            if self.dropped != reported_drops:
                lines.append(TraceEventsDropped(
                    ts_ms=time.time() * 1000, mono_ns=time.monotonic_ns(), broker_id=self.broker_id,
                    dropped_total=self.dropped).model_dump_json())
                reported_drops = self.dropped
            if lines:
                self._file.write("\n".join(lines) + "\n")
                self._file.flush()
            if self._closed and not self._buffer:
                return

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=5)
        self._file.close()
