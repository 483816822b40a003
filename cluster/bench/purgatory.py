"""``kafkasim bench purgatory``: the timing wheel against ``loop.call_later``, add then cancel N timeouts
(``broker/purgatory/bench.py`` measures; this turns its results into figures). Also the last phase of
``kafkasim bench replication``."""

from __future__ import annotations

import argparse
import time

from cluster.bench.options import positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report


def timer_phase(ops: int, label_prefix: str = "", repeat: int = 3, handles_only: bool = False) -> Phase:
    from broker.purgatory import bench as timer_bench

    started = time.perf_counter()
    results = timer_bench.measure(ops, repeat, handles_only)
    figures = [Figure(f"timing_wheel_speed_up_{r.shape}",
                      f"{label_prefix}timing wheel vs loop.call_later, {ops:,} add+cancel, {r.shape}",
                      r.speed_up, "x", timer_bench.TARGET_SPEED_UP) for r in results]
    objects = "call_later side: handles only" if handles_only else "an operation object per timeout on both sides"
    summary = "; ".join(f"{r.shape}: wheel {r.wheel.cpu_s:.2f} s / {r.wheel.peak_mib:.0f} MiB, call_later "
                        f"{r.call_later.cpu_s:.2f} s / {r.call_later.peak_mib:.0f} MiB" for r in results)
    return Phase("timer", f"CPU time, best of {repeat}, tracemalloc peak, {objects}: {summary}",
                 time.perf_counter() - started, figures,
                 {"ops": ops, "repeat": repeat, "handles_only": handles_only,
                  "shapes": [r.as_dict() for r in results]})


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timer-ops", "--count", type=positive_int, default=1_000_000, dest="timer_ops",
                        help="timeouts added then cancelled per run (default 1000000)")
    parser.add_argument("--repeat", type=positive_int, default=3,
                        help="timed runs of each timer, best kept (default 3)")
    parser.add_argument("--handles-only", action="store_true",
                        help="create no operation objects on the call_later side, only its handles")


def run(args: argparse.Namespace, progress: Progress) -> Report:
    progress.say(f"timing {args.timer_ops:,} add+cancel on each timer, best of {args.repeat} ...")
    phase = timer_phase(args.timer_ops, repeat=args.repeat, handles_only=args.handles_only)
    return Report("purgatory", f"kafkasim purgatory benchmark: {args.timer_ops:,} add+cancel, delays 1..30000 ms",
                  {"timer_ops": args.timer_ops, "repeat": args.repeat, "handles_only": args.handles_only}, [phase],
                  ["speed-up: call_later's CPU time over the wheel's, this process only (other processes on the "
                   "core do not count)"])


BENCH = Bench("purgatory", "the timing wheel against loop.call_later: add then cancel N timeouts, CPU time and "
              "peak memory", options, run)
