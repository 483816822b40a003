"""Drive a Timer from an asyncio loop: one ``call_at`` handle, set to the next bucket expiry."""

from __future__ import annotations

import asyncio
import logging

from broker.purgatory.timing_wheel import Timer, TimerTask

logger = logging.getLogger(__name__)

# Wake a hair after the millisecond boundary, so that float rounding of loop.time() * 1000 never reads
# as the millisecond before the one the bucket expires at.
_WAKE_MARGIN_S = 1e-6


class AsyncioTimer:
    """Advances ``timer`` to ``loop.time()`` in ms when its earliest bucket is due; runs the expired tasks.

    ``add`` and the timer's own adds (e.g. by a purgatory) both reschedule the wake-up when they create an
    earlier bucket. Expiry is as precise as the tick: a task may fire up to one tick (1 ms) early, as in
    Kafka, because the clock is read in whole milliseconds.
    """

    def __init__(self, timer: Timer, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.timer = timer
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = None
        self._wake_at_ms: int | None = None
        timer.on_earlier_expiration = self._on_earlier_expiration
        # Bring the timer to loop time (its start time is usually 0), then sleep until its first bucket.
        self._on_wake()

    def now_ms(self) -> int:
        return int(self._loop.time() * 1000)

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` from now; a task already due runs at once."""
        if not self.timer.add(task, self.now_ms()):
            self._run(task)

    def close(self) -> None:
        """Stop waking up; pending tasks stay in the timer."""
        self.timer.on_earlier_expiration = None
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._wake_at_ms = None

    def _on_earlier_expiration(self, expiration_ms: int) -> None:
        if self._wake_at_ms is None or expiration_ms < self._wake_at_ms:
            self._schedule(expiration_ms)

    def _schedule(self, wake_at_ms: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._wake_at_ms = wake_at_ms
        self._handle = self._loop.call_at(wake_at_ms / 1000 + _WAKE_MARGIN_S, self._on_wake)

    def _reschedule(self) -> None:
        next_ms = self.timer.next_expiration_ms()
        if next_ms is None:
            if self._handle is not None:
                self._handle.cancel()
            self._handle = self._wake_at_ms = None
        elif next_ms != self._wake_at_ms:
            self._schedule(next_ms)

    def _on_wake(self) -> None:
        self._handle = self._wake_at_ms = None
        for task in self.timer.advance_clock(self.now_ms()):
            self._run(task)
        self._reschedule()

    @staticmethod
    def _run(task: TimerTask) -> None:
        # One failing task must not stop the others from expiring.
        try:
            task.run()
        except Exception:
            logger.exception("timer task %r failed", task)
