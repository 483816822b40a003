"""Cleaner throughput: MiB/s of dirty log mapped and rewritten by one cleaning, on real files in a temporary
directory. ``python -m broker.log.cleaner.bench [--records N] [--keys K] [--codec none|gzip] [--worker]``.

``--worker`` runs the cleaning in a cleaner worker process, as a broker does (SCHED_IDLE, in the cleaner's CPU group
at a tenth of a session's weight: on a busy machine its wall time grows), and reports the CPU time of both processes."""

from __future__ import annotations

import argparse
import functools
import math
import tempfile
import time
from pathlib import Path

from broker.log.cleaner.cleaner import clean
from broker.log.cleaner.manager import CleanerManager
from broker.log.cleaner.offset_map import OffsetMap
from broker.log.cleaner.throttler import Throttler
from broker.log.cleaner.cpu_group import CleanerCpuGroup
from broker.log.cleaner.worker import CleanerProcess
from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.records import GZIP, NONE, Record, build_batch


def measure(directory: Path, *, records: int, keys: int, codec: int, batch_records: int = 50,
            value_bytes: int = 100, worker: bool = False) -> dict[str, float]:
    config = LogConfig.model_validate({"cleanup.policy": "compact", "segment.bytes": 8 << 20})
    log_ = Log.open(directory / "bench-0", config, clock=lambda: int(time.time() * 1000))
    value = b"v" * value_bytes
    now = int(time.time() * 1000)
    for start in range(0, records, batch_records):
        batch = [Record(f"key-{(start + i) % keys}".encode(), value + str(start + i).encode(), now)
                 for i in range(batch_records)]
        log_.append_as_leader(build_batch(batch, compression=codec), leader_epoch=0)
    log_.roll()
    manager = CleanerManager(lambda: {log_.topic_partition: log_}, lambda: int(time.time() * 1000))
    opened, candidate = manager.grab_filthiest()
    plan = manager.plan(opened, candidate)
    process = None
    worker_cpu_started = 0.0
    if worker:
        import psutil

        cpu_group = CleanerCpuGroup()
        process = CleanerProcess("bench-cleaner", 128 << 20, 0.9, math.inf, cpu_group)
        process.start()
        _wait_until_idle(psutil.Process(process.pid))
        worker_cpu_started = sum(psutil.Process(process.pid).cpu_times()[:2])
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        if process is not None:
            result = process.clean(plan, int(time.time() * 1000))
        else:
            result = clean(plan, OffsetMap(128 << 20), Throttler(math.inf), now_ms=int(time.time() * 1000))
        report = manager.done_cleaning(opened, plan, result)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        broker_cpu = cpu
        if process is not None:
            import psutil

            cpu = sum(psutil.Process(process.pid).cpu_times()[:2]) - worker_cpu_started
    finally:
        if process is not None:
            process.close()
            cpu_group.remove(wait_s=2.0)
    assert report is not None
    log_.close()
    dirty_mib = report.dirty_bytes / (1 << 20)
    return {"dirty_mib": dirty_mib, "seconds": elapsed, "mib_per_s": dirty_mib / elapsed, "cpu_seconds": cpu,
            "mib_per_cpu_s": dirty_mib / cpu, "broker_cpu_seconds": broker_cpu,
            "records": records, "records_kept": report.records_kept, "bytes_after": report.bytes_after}


def _wait_until_idle(process, timeout_s: float = 30.0) -> None:
    """The worker's start (its imports) done: its CPU time stops growing."""
    deadline = time.monotonic() + timeout_s
    last = -1.0
    while time.monotonic() < deadline:
        cpu = sum(process.cpu_times()[:2])
        if cpu == last:
            return
        last = cpu
        time.sleep(0.2)


OLD_THREAD_SWITCH_INTERVAL_S = 0.0005  # what the cleaner thread set while it cleaned, before the worker process


def loop_lag(directory: Path, *, mode: str, seconds: float, records: int, keys: int, tick_s: float = 0.001
             ) -> dict[str, float]:
    """How late a 1 ms asyncio ticker wakes up (the broker's event loop stands for it) while the same dirty log is
    cleaned again and again: ``mode`` "none" (no cleaning), "thread" (on a thread of this process, as the cleaner did
    before, with its 0.5 ms switch interval) or "worker" (in a cleaner worker process, as it does now).
    Each result is discarded, so every cleaning does the whole work."""
    import asyncio
    import sys
    from concurrent.futures import ThreadPoolExecutor

    config = LogConfig.model_validate({"cleanup.policy": "compact", "segment.bytes": 8 << 20})
    log_ = Log.open(directory / f"lag-{mode}-0", config, clock=lambda: int(time.time() * 1000))
    now = int(time.time() * 1000)
    for start in range(0, records, 50):
        log_.append_as_leader(build_batch([Record(f"key-{(start + i) % keys}".encode(), b"v" * 100, now)
                                           for i in range(50)]), leader_epoch=0)
    log_.roll()
    manager = CleanerManager(lambda: {log_.topic_partition: log_}, lambda: int(time.time() * 1000))
    process = CleanerProcess("bench-cleaner", 128 << 20, 0.9, math.inf) if mode == "worker" else None
    offset_map = OffsetMap(128 << 20)
    cleanings = 0
    lateness: list[float] = []

    async def run() -> None:
        nonlocal cleanings
        loop = asyncio.get_running_loop()
        stop = loop.time() + seconds
        switch_interval = sys.getswitchinterval()

        async def ticker() -> None:
            while loop.time() < stop:
                due = time.perf_counter() + tick_s
                await asyncio.sleep(tick_s)
                lateness.append((time.perf_counter() - due) * 1000)

        async def cleaner() -> None:
            nonlocal cleanings
            with ThreadPoolExecutor(1) as pool:
                while loop.time() < stop:
                    opened, candidate = manager.grab_filthiest()
                    plan = manager.plan(opened, candidate)
                    now_ms = int(time.time() * 1000)
                    if process is not None:
                        result = await loop.run_in_executor(pool, process.clean, plan, now_ms)
                    else:
                        sys.setswitchinterval(OLD_THREAD_SWITCH_INTERVAL_S)
                        try:
                            result = await loop.run_in_executor(pool, functools.partial(
                                clean, plan, offset_map, Throttler(math.inf), now_ms=now_ms))
                        finally:
                            sys.setswitchinterval(switch_interval)
                    assert result is not None
                    result.discard()
                    manager.abandoned(opened, plan)
                    cleanings += 1

        if process is not None:
            process.start()
            await loop.run_in_executor(None, _wait_until_idle, psutil_process(process.pid))
            stop = loop.time() + seconds
        await asyncio.gather(ticker(), *([cleaner()] if mode != "none" else []))

    try:
        asyncio.run(run())
    finally:
        if process is not None:
            process.close()
        log_.close()
    ordered = sorted(lateness)
    return {"ticks": len(ordered), "p50_ms": ordered[len(ordered) // 2], "p99_ms": ordered[int(len(ordered) * 0.99)],
            "max_ms": ordered[-1], "cleanings": cleanings}


def psutil_process(pid):
    import psutil

    return psutil.Process(pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--codec", choices=["none", "gzip"], default="none")
    parser.add_argument("--worker", action="store_true", help="clean in a cleaner worker process, as a broker does")
    parser.add_argument("--loop-lag", type=float, metavar="SECONDS",
                        help="instead: how late a 1 ms asyncio ticker wakes up for SECONDS each, with no cleaning, "
                             "cleanings on a thread (as before), cleanings in a worker process (as now)")
    args = parser.parse_args()
    if args.loop_lag:
        with tempfile.TemporaryDirectory(prefix="kafkasim-cleaner-bench-") as tmp:
            for mode in ("none", "thread", "worker"):
                lag = loop_lag(Path(tmp), mode=mode, seconds=args.loop_lag, records=args.records, keys=args.keys)
                print(f"cleaning {mode:6}: {lag['cleanings']:3} cleanings, ticker lateness p50 {lag['p50_ms']:.2f} ms, "
                      f"p99 {lag['p99_ms']:.2f} ms, max {lag['max_ms']:.1f} ms ({lag['ticks']} ticks)", flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="kafkasim-cleaner-bench-") as tmp:
        figures = measure(Path(tmp), records=args.records, keys=args.keys,
                          codec=GZIP if args.codec == "gzip" else NONE, worker=args.worker)
    print(f"cleaned {figures['dirty_mib']:.1f} MiB of dirty log ({args.records} records over {args.keys} keys, "
          f"codec {args.codec}) in {figures['seconds']:.2f} s: {figures['mib_per_s']:.1f} MiB/s "
          f"({figures['mib_per_cpu_s']:.1f} MiB per CPU second, the figure a busy machine disturbs least); "
          f"{figures['records_kept']} records kept, {figures['bytes_after']} bytes after"
          + (f"; in a worker process: {figures['broker_cpu_seconds']:.2f} CPU s in this one" if args.worker else ""))


if __name__ == "__main__":
    main()
