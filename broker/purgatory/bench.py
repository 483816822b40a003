"""Timing wheel versus asyncio timers: add then cancel N timeouts (``python -m broker.purgatory.bench``).

Two shapes: "batch" adds all N (so all are pending at the peak, like a loaded purgatory) then cancels
them; "interleaved" cancels each right after adding it (a request completed at once). Delays cycle over
1..30000 ms, across four wheel levels. Time is the best of ``--repeat`` runs without tracemalloc; peak
memory comes from one extra run under tracemalloc.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import tracemalloc
from collections.abc import Callable

from broker.purgatory.timing_wheel import Timer, TimerTask


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


def asyncio_batch(delays_s: list[float]) -> None:
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


def asyncio_interleaved(delays_s: list[float]) -> None:
    loop = asyncio.new_event_loop()
    try:
        call_later = loop.call_later
        for delay in delays_s:
            call_later(delay, _noop).cancel()
    finally:
        loop.close()


def _measure(run: Callable[[list], None], delays: list, repeat: int) -> tuple[float, int]:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run(delays)
        best = min(best, time.perf_counter() - started)
    tracemalloc.start()
    try:
        run(delays)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return best, peak


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="timeouts per run (default 1000000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs, best kept (default 3)")
    args = parser.parse_args(argv)

    delays_ms = [index % 30_000 + 1 for index in range(args.count)]
    delays_s = [delay / 1000 for delay in delays_ms]
    print(f"{args.count} add+cancel, delays 1..30000 ms, best of {args.repeat}")
    print(f"{'shape':<12} {'timer':<22} {'time s':>8} {'ns/op':>7} {'peak MiB':>9}")
    for shape, wheel_run, asyncio_run in (
        ("batch", wheel_batch, asyncio_batch),
        ("interleaved", wheel_interleaved, asyncio_interleaved),
    ):
        results = {}
        for label, run, delays in (
            ("timing wheel", wheel_run, delays_ms),
            ("loop.call_later", asyncio_run, delays_s),
        ):
            seconds, peak = _measure(run, delays, args.repeat)
            results[label] = seconds
            print(f"{shape:<12} {label:<22} {seconds:>8.3f} {seconds / args.count * 1e9:>7.0f} {peak / 2**20:>9.1f}")
        print(f"{shape:<12} wheel speed-up: {results['loop.call_later'] / results['timing wheel']:.2f}x")


if __name__ == "__main__":
    main()
