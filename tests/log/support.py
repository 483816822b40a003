"""Helpers shared by the log tests."""

from __future__ import annotations


class ManualClock:
    """Milliseconds that move only when a test says so (the log's injected clock)."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms
