"""Waiting on a condition with a deadline, never a bare sleep: the one loop behind the scenarios' waits and the
tests' ``wait_until``; each caller says what a timeout is to it (a scenario error, a failed assertion)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def poll_until(condition: Callable[[], T], timeout_s: float, timed_out: Callable[[Any], Exception],
               interval_s: float = 0.05) -> T:
    """Calls ``condition`` until it returns something true and returns that. An exception from it counts as
    not yet (a cluster in flux: a broker restarting, ZooKeeper busy); at the deadline ``timed_out(last)`` is raised,
    ``last`` being the last value or exception seen."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = condition()
            if last:
                return last
        except Exception as exc:
            last = exc
        if time.monotonic() > deadline:
            raise timed_out(last)
        time.sleep(interval_s)
