"""Deciding when a frequent, per-replica trace event is written (pure; "now" is passed in).

A follower fetches every few milliseconds under load; one event per fetch would cost more than the fetch.
``Coalescer`` lets through at most one event per key per interval and counts what it folded, but a caller
marks the updates that must never be hidden (the HW moved, a gap closed) and those always go through.
``Tally`` sums what happened between two writes for events that are totals (bytes served, completions).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field


class Coalescer:
    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self._last: dict[Hashable, int] = {}
        self._folded: dict[Hashable, int] = {}

    def admit(self, key: Hashable, now_ms: int, *, force: bool = False) -> int | None:
        """None if this update is folded into the next event; else how many were folded before it."""
        last = self._last.get(key)
        if not force and last is not None and now_ms - last < self.interval_ms:
            self._folded[key] = self._folded.get(key, 0) + 1
            return None
        self._last[key] = now_ms
        return self._folded.pop(key, 0)

    def forget(self, key: Hashable) -> None:
        self._last.pop(key, None)
        self._folded.pop(key, None)


@dataclass
class Tally:
    """Running totals for one key since the last write."""

    started_ms: int
    count: int = 0
    items: int = 0
    bytes: int = 0
    wait_ms_total: float = 0.0
    wait_ms_max: float = 0.0
    last_offsets: dict[Hashable, int] = field(default_factory=dict)

    def add(self, *, items: int = 0, size: int = 0, wait_ms: float = 0.0,
            offsets: dict[Hashable, int] | None = None) -> None:
        self.count += 1
        self.items += items
        self.bytes += size
        self.wait_ms_total += wait_ms
        self.wait_ms_max = max(self.wait_ms_max, wait_ms)
        if offsets:
            self.last_offsets.update(offsets)


class Tallies:
    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self._open: dict[Hashable, Tally] = {}

    def add(self, key: Hashable, now_ms: int, **amounts) -> Tally | None:
        """Adds to ``key``'s tally; returns the finished tally once its interval is over (and starts anew)."""
        tally = self._open.get(key)
        if tally is None:
            tally = self._open[key] = Tally(started_ms=now_ms)
        tally.add(**amounts)
        if now_ms - tally.started_ms >= self.interval_ms:
            del self._open[key]
            return tally
        return None

    def due(self, now_ms: int) -> dict[Hashable, Tally]:
        """The tallies whose interval is over although nothing was added since (a quiet spell)."""
        finished = {k: t for k, t in self._open.items() if now_ms - t.started_ms >= self.interval_ms}
        for key in finished:
            del self._open[key]
        return finished

    def drain(self) -> dict[Hashable, Tally]:
        """Every unfinished tally (at shutdown)."""
        finished, self._open = self._open, {}
        return finished
