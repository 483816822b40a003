"""``kafkasim bench page-cache``: does this machine's page cache pay for memory the host took back?

On a virtual machine whose hypervisor takes freed memory back (free page reporting), each page the kernel
hands out again costs a fault on the host. The probe touches and frees anonymous memory, writes a file
into the page cache at once, waits, and writes it again: the second write is slower by what those faults
cost. ``kafkasim bench replication`` pre-faults memory before its throughput runs for this reason."""

from __future__ import annotations

import argparse
import mmap
import os
import tempfile
import time
from pathlib import Path

from cluster.bench.measure import MIB
from cluster.bench.options import non_negative_float, positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report


def prefault_size_mib(volume_bytes: int, replicas: int, available_bytes: int) -> int:
    """Every replica's page cache plus as much again for buffers, within half of the available memory."""
    wanted = 2 * replicas * volume_bytes // MIB + 256
    return max(0, min(wanted, available_bytes // 2 // MIB))


def prefault_memory(mib: int) -> float:
    """Write every page of ``mib`` MiB of fresh anonymous memory, then free it; the seconds it took."""
    started = time.perf_counter()
    chunk = b"\x01" * MIB
    # Private, not Python's default shared mapping: shared anonymous pages are shmem, freed apart from the
    # page cache's supply.
    with mmap.mmap(-1, mib * MIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as area:
        for _ in range(mib):
            area.write(chunk)
    return time.perf_counter() - started


def page_cache_write_mib_s(directory: Path, mib: int) -> float:
    """MiB/s of ``mib`` MiB written (no fsync) into a new file, which the kernel must give fresh pages."""
    chunk = b"\x02" * MIB
    path = directory / "page-cache-probe"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        for n in range(mib):
            os.pwrite(fd, chunk, n * MIB)
        return mib / (time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mib", type=positive_int, default=1024, help="MiB written each time (default 1024)")
    parser.add_argument("--idle-s", type=non_negative_float, default=20.0,
                        help="seconds to wait before the second write, for the host to take freed pages back "
                             "(default 20)")


def run(args: argparse.Namespace, progress: Progress) -> Report:
    with tempfile.TemporaryDirectory(prefix="kafkasim-page-cache-") as tmp:
        touched_mib = 2 * args.mib  # twice over: other processes take freed pages too
        progress.say(f"touching and freeing {touched_mib:,} MiB of anonymous memory ...")
        touched_s = prefault_memory(touched_mib)
        backed = page_cache_write_mib_s(Path(tmp), args.mib)
        progress.say(f"waiting {args.idle_s:g} s for the host to take freed pages back ...")
        time.sleep(args.idle_s)
        started = time.perf_counter()
        fresh = page_cache_write_mib_s(Path(tmp), args.mib)
        elapsed = time.perf_counter() - started
    figures = [
        Figure("anonymous_first_touch_mib_s", f"first touch of {touched_mib:,} MiB of anonymous memory",
               touched_mib / touched_s, "MiB/s"),
        Figure("page_cache_write_after_free_mib_s", f"page-cache writes of {args.mib:,} MiB right after freeing it",
               backed, "MiB/s"),
        Figure("page_cache_write_after_idle_mib_s", f"page-cache writes of {args.mib:,} MiB {args.idle_s:g} s later",
               fresh, "MiB/s"),
        Figure("idle_slowdown", "slowdown of the later writes", backed / fresh, "x"),
    ]
    summary = (f"{touched_mib:,} MiB touched in {touched_s:.2f} s, {args.mib:,} MiB written at {backed:,.0f} MiB/s, "
               f"then after {args.idle_s:g} s at {fresh:,.0f} MiB/s (no fsync: page cache only)")
    return Report("page-cache", f"kafkasim page-cache probe: {args.mib:,} MiB per write, {os.cpu_count()} CPUs",
                  {"mib": args.mib, "idle_s": args.idle_s},
                  [Phase("probe", summary, touched_s + elapsed, figures)])


BENCH = Bench("page-cache", "whether the page cache pays host faults for memory the host took back (the "
              "replication bench pre-faults for this)", options, run)
