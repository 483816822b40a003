"""``kafkasim bench log``: append throughput, random-offset reads on many segments and crash recovery of
``broker/log/`` (``broker/log/bench.py`` measures), in a temporary directory removed afterwards."""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from cluster.bench.measure import MIB
from cluster.bench.options import positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report

QUICK_SCALE = 16
DEFAULTS = {"append_mib": 128, "append_rounds": 7, "segments": 1000, "lookups": 20_000, "recovery_mib": 512}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temporary directory")
    parser.add_argument("--quick", action="store_true",
                        help=f"sizes and counts not given divided by {QUICK_SCALE}, for a smoke run")
    parser.add_argument("--append-mib", type=positive_int, default=None,
                        help=f"MiB appended in each round, per batch size (default {DEFAULTS['append_mib']})")
    parser.add_argument("--append-rounds", type=positive_int, default=None,
                        help=f"fresh logs appended to per batch size (default {DEFAULTS['append_rounds']})")
    parser.add_argument("--segments", type=positive_int, default=None,
                        help=f"segments of the log read at random offsets (default {DEFAULTS['segments']})")
    parser.add_argument("--lookups", type=positive_int, default=None,
                        help=f"random-offset reads timed (default {DEFAULTS['lookups']})")
    parser.add_argument("--recovery-mib", type=positive_int, default=None,
                        help=f"MiB of log recovered after an unclean stop (default {DEFAULTS['recovery_mib']})")


def sizes(args: argparse.Namespace) -> dict[str, int]:
    """Each size as given, else its default (divided down with --quick; rounds are never fewer than 1)."""
    scale = QUICK_SCALE if args.quick else 1
    chosen = {}
    for name, default in DEFAULTS.items():
        given = getattr(args, name)
        rounds_stay = name == "append_rounds"  # a median of one round says nothing of the spread
        chosen[name] = given if given is not None else default if rounds_stay else max(1, default // scale)
    return chosen


def run(args: argparse.Namespace, progress: Progress) -> Report:
    from broker.log.bench import bench_append, bench_lookup, bench_recovery

    chosen = sizes(args)
    rng = random.Random(42)
    root = Path(tempfile.mkdtemp(prefix="kafkasim-log-bench-", dir=args.dir))
    phases = []
    try:
        started = time.perf_counter()
        figures, spread = [], {}
        for batch_size in (16 * 1024, MIB):
            progress.say(f"appending {chosen['append_mib']} MiB in {batch_size // 1024} KiB batches, "
                         f"{chosen['append_rounds']} rounds ...")
            median, low, high = bench_append(root, batch_size, chosen["append_mib"] * MIB, chosen["append_rounds"],
                                             rng)
            figures.append(Figure(f"append_{batch_size // 1024}kib_mb_s",
                                  f"append as leader, {batch_size // 1024} KiB batches, CRC-32C checked (median)",
                                  median, "MB/s"))
            spread[f"append_{batch_size // 1024}kib_mb_s"] = {"min": round(low, 1), "max": round(high, 1)}
        phases.append(Phase("append", f"{chosen['append_rounds']} rounds of {chosen['append_mib']} MiB per batch "
                                      "size: framing, CRC-32C check, offset assignment, page cache, no fsync",
                            time.perf_counter() - started, figures, spread))

        started = time.perf_counter()
        progress.say(f"reading {chosen['lookups']:,} random offsets of {chosen['segments']:,} segments ...")
        mean, p50, p99 = bench_lookup(root, chosen["segments"], chosen["lookups"], rng)
        label = f"random-offset read on {chosen['segments']:,} segments"
        phases.append(Phase("lookup", f"{chosen['lookups']:,} reads of 1 byte at random offsets of a reopened log",
                            time.perf_counter() - started,
                            [Figure("lookup_mean_us", f"{label}, mean", mean, "µs", at_least=False),
                             Figure("lookup_p50_us", f"{label}, p50", p50, "µs", at_least=False),
                             Figure("lookup_p99_us", f"{label}, p99", p99, "µs", at_least=False)]))

        started = time.perf_counter()
        progress.say(f"recovering {chosen['recovery_mib']} MiB after an unclean stop ...")
        per_gib, gib = bench_recovery(root, chosen["recovery_mib"] * MIB, rng)
        phases.append(Phase("recovery", f"{gib:.2f} GiB of 16 KiB batches re-validated and indexes rebuilt",
                            time.perf_counter() - started,
                            [Figure("recovery_s_per_gib", "recovery after kill -9 (re-validate, rebuild indexes)",
                                    per_gib, "s/GiB", at_least=False)], {"recovered_gib": round(gib, 3)}))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return Report("log", f"kafkasim log benchmark in {root} ({os.cpu_count()} CPUs; page cache warm, no fsync "
                         "on append)", {**chosen, "quick": args.quick}, phases,
                  ["MB/s: 10^6 bytes of batches per second"])


BENCH = Bench("log", "the on-disk log: append throughput, random-offset reads on many segments, crash recovery "
              "per GiB", options, run)
