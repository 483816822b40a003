"""Throttler: holds a reader to a rate in bytes per second (Kafka's kafka.utils.Throttler, used by the cleaner for
log.cleaner.io.max.bytes.per.second). The clock and the sleep are injected."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

CHECK_INTERVAL_S = 0.1  # Kafka checks every 100 ms


class Throttler:
    """Thread-safe: the cleaner threads share one (a thread sleeping here holds the others too, as in Kafka)."""

    def __init__(self, bytes_per_second: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, check_interval_s: float = CHECK_INTERVAL_S) -> None:
        self.bytes_per_second = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._check_interval_s = check_interval_s
        self._period_start = clock()
        self._observed = 0.0
        self.slept_s = 0.0
        self._lock = threading.Lock()

    @property
    def unlimited(self) -> bool:
        return math.isinf(self.bytes_per_second) or self.bytes_per_second >= 1.7e308

    def maybe_throttle(self, observed_bytes: int) -> None:
        """Count bytes; once per interval, sleep as long as it takes for the period's rate to fall to the limit."""
        if self.unlimited:
            return
        with self._lock:
            self._throttle(observed_bytes)

    def _throttle(self, observed_bytes: int) -> None:
        self._observed += observed_bytes
        elapsed = self._clock() - self._period_start
        if elapsed < self._check_interval_s:
            return
        if self._observed / elapsed > self.bytes_per_second:
            pause = self._observed / self.bytes_per_second - elapsed
            if pause > 0:
                self._sleep(pause)
                self.slept_s += pause
        self._period_start = self._clock()
        self._observed = 0.0
