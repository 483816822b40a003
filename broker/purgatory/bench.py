"""Timing wheel versus asyncio timers: add then cancel N timeouts (``kafkasim bench purgatory`` reports it).

Two shapes: "batch" adds all N (so all are pending at the peak, like a loaded purgatory) then cancels
them; "interleaved" cancels each right after adding it (a request completed at once). Delays cycle over
1..30000 ms, across four wheel levels. The loop never runs, so cancelled ``call_later`` handles stay in
its heap, as they do in a busy loop until it sweeps them.

Both sides create one operation object per timeout, as a purgatory does whichever timer it uses (the
request's state: a DelayedOperation). On the wheel that object is the timer task itself; with
``call_later`` it holds the TimerHandle it has to cancel (and asyncio adds a Context per handle).
``handles_only`` leaves the operation objects out of the asyncio side, as if it were free there.

Each timed run starts after a full garbage collection, and the wheel's and asyncio's runs alternate, so a
machine shared with other work slows both alike. Time is the best of ``repeat`` runs, as CPU time of
this process (what the speed-up is computed from: it does not count the time other processes held the
core) and as wall time. Peak memory comes from one extra run under tracemalloc. Both timers pay the
garbage collector for the objects they keep; it is part of what a broker pays, so it stays on.
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass

from broker.purgatory.timing_wheel import Timer, TimerTask

TARGET_SPEED_UP = 2.0


def _noop() -> None:
    pass


def wheel_batch(delays_ms: list[int]) -> None:
    timer = Timer()
    add = timer.add
    tasks = []
    append = tasks.append
    for delay in delays_ms:
        task = TimerTask(delay, _noop)
        add(task)
        append(task)
    for task in tasks:
        task.cancel()
    assert timer.size == 0


def wheel_interleaved(delays_ms: list[int]) -> None:
    timer = Timer()
    add = timer.add
    for delay in delays_ms:
        task = TimerTask(delay, _noop)
        add(task)
        task.cancel()
    assert timer.size == 0


class LoopOperation:
    """A delayed operation timed by ``call_later``: the same state as a TimerTask, plus its handle."""

    __slots__ = ("action", "delay_s", "handle")

    def __init__(self, delay_s: float, action: Callable[[], object]) -> None:
        self.delay_s = delay_s
        self.action = action
        self.handle: asyncio.TimerHandle | None = None


def asyncio_batch(delays_s: list[float]) -> None:
    loop = asyncio.new_event_loop()
    try:
        call_later = loop.call_later
        operations = []
        append = operations.append
        for delay in delays_s:
            operation = LoopOperation(delay, _noop)
            operation.handle = call_later(delay, _noop)
            append(operation)
        for operation in operations:
            operation.handle.cancel()
    finally:
        loop.close()


def asyncio_interleaved(delays_s: list[float]) -> None:
    loop = asyncio.new_event_loop()
    try:
        call_later = loop.call_later
        for delay in delays_s:
            operation = LoopOperation(delay, _noop)
            operation.handle = call_later(delay, _noop)
            operation.handle.cancel()
    finally:
        loop.close()


def asyncio_batch_handles_only(delays_s: list[float]) -> None:
    loop = asyncio.new_event_loop()
    try:
        call_later = loop.call_later
        handles = []
        append = handles.append
        for delay in delays_s:
            append(call_later(delay, _noop))
        for handle in handles:
            handle.cancel()
    finally:
        loop.close()


def asyncio_interleaved_handles_only(delays_s: list[float]) -> None:
    loop = asyncio.new_event_loop()
    try:
        call_later = loop.call_later
        for delay in delays_s:
            call_later(delay, _noop).cancel()
    finally:
        loop.close()


@dataclass(frozen=True)
class Measurement:
    cpu_s: float        # best CPU time of this process over the timed runs
    wall_s: float       # best wall time
    peak_mib: float     # tracemalloc peak of one more run


@dataclass(frozen=True)
class ShapeResult:
    shape: str
    wheel: Measurement
    call_later: Measurement

    @property
    def speed_up(self) -> float:
        return self.call_later.cpu_s / self.wheel.cpu_s

    @property
    def wall_speed_up(self) -> float:
        return self.call_later.wall_s / self.wheel.wall_s

    def as_dict(self) -> dict:
        return {"shape": self.shape, "timing_wheel": asdict(self.wheel), "call_later": asdict(self.call_later),
                "speed_up": round(self.speed_up, 2), "wall_speed_up": round(self.wall_speed_up, 2)}


SHAPES: tuple[tuple[str, Callable[[list], None], Callable[[list], None]], ...] = (
    ("batch", wheel_batch, asyncio_batch),
    ("interleaved", wheel_interleaved, asyncio_interleaved),
)
HANDLES_ONLY_SHAPES: tuple[tuple[str, Callable[[list], None], Callable[[list], None]], ...] = (
    ("batch", wheel_batch, asyncio_batch_handles_only),
    ("interleaved", wheel_interleaved, asyncio_interleaved_handles_only),
)


def _timed(run: Callable[[list], None], delays: list) -> tuple[float, float]:
    gc.collect()  # no garbage of the previous run is collected on this one's clock
    cpu, wall = time.process_time(), time.perf_counter()
    run(delays)
    return time.process_time() - cpu, time.perf_counter() - wall


def _peak_mib(run: Callable[[list], None], delays: list) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        run(delays)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


def measure(count: int = 1_000_000, repeat: int = 3, handles_only: bool = False) -> list[ShapeResult]:
    if count < 1 or repeat < 1:
        raise ValueError("count and repeat must be at least 1")
    delays_ms = [index % 30_000 + 1 for index in range(count)]
    delays_s = [delay / 1000 for delay in delays_ms]
    results = []
    for shape, wheel_run, asyncio_run in HANDLES_ONLY_SHAPES if handles_only else SHAPES:
        runs: dict[str, list[tuple[float, float]]] = {"wheel": [], "asyncio": []}
        for attempt in range(repeat):
            # Alternate which goes first, so neither always runs on a warmer (or busier) machine.
            order = [("wheel", wheel_run, delays_ms), ("asyncio", asyncio_run, delays_s)]
            for name, run, delays in order if attempt % 2 == 0 else reversed(order):
                runs[name].append(_timed(run, delays))
        wheel = Measurement(min(c for c, _ in runs["wheel"]), min(w for _, w in runs["wheel"]),
                            _peak_mib(wheel_run, delays_ms))
        call_later = Measurement(min(c for c, _ in runs["asyncio"]), min(w for _, w in runs["asyncio"]),
                                 _peak_mib(asyncio_run, delays_s))
        results.append(ShapeResult(shape, wheel, call_later))
    return results
