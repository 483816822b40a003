"""``kafkasim bench analysis``: every PySpark job and the figures on a synthetic run of N events in local mode
(``analysis/bench.py`` measures)."""

from __future__ import annotations

import argparse
import os

from cluster.bench.options import positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=positive_int, default=1_000_000,
                        help="trace events in the synthetic run (default 1000000)")
    parser.add_argument("--master", default=None, help="Spark master (default: $KAFKASIM_SPARK_MASTER or local[2])")


def run(args: argparse.Namespace, progress: Progress) -> Report:
    from analysis.bench import TARGET_S, measure

    progress.say(f"generating {args.events:,} synthetic events, then running every job on PySpark ...")
    times = measure(args.events, args.master)
    figures = [
        Figure("analysis_s", "analysis: every job and the figures, SparkSession up", times.analysis_s, "s", TARGET_S,
               at_least=False),
        Figure("spark_start_s", "SparkSession start", times.spark_start_s, "s"),
        Figure("generate_s", f"generating {times.events:,} events ({times.trace_mib:,.0f} MiB of trace files)",
               times.generate_s, "s"),
    ]
    summary = (f"{times.events:,} events, {times.trace_mib:,.1f} MiB of trace files; {times.leader_changes} leader "
               "changes found")
    master = args.master or os.environ.get("KAFKASIM_SPARK_MASTER", "local[2]")
    return Report("analysis", f"kafkasim analysis benchmark: {times.events:,} synthetic events, master {master}",
                  {"events": args.events, "master": args.master},
                  [Phase("analysis", summary, times.generate_s + times.spark_start_s + times.analysis_s, figures,
                         {"events": times.events, "trace_mib": round(times.trace_mib, 1),
                          "leader_changes": times.leader_changes})])


BENCH = Bench("analysis", "the PySpark analysis (every job and the figures) on a synthetic run of one million "
              "events, local mode", options, run)
