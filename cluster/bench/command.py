"""``kafkasim bench``: ``list``, or ``NAME [--json] [--strict]`` with the bench's own options."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from cluster.bench.progress import Progress
from cluster.bench.registry import benches
from cluster.bench.report import render, to_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="measure figures; `kafkasim bench list` names every bench",
                           description="Each bench runs on what it needs of its own (a fresh cluster in a "
                                       "temporary data dir, a temporary log, ...) and prints one report.")
    # The bench's subparsers are plain: a bench works in its own temporary folders, never in --data-dir.
    names = bench.add_subparsers(dest="bench", required=True, metavar="NAME",
                                 parser_class=argparse.ArgumentParser)
    names.add_parser("list", help="every bench, with what it measures")
    for entry in benches().values():
        parser = names.add_parser(entry.name, help=entry.summary, description=entry.summary)
        entry.options(parser)
        parser.add_argument("--json", action="store_true", help="print the report as JSON (progress stays on stderr)")
        parser.add_argument("--strict", action="store_true", help="exit with status 1 when a figure misses its target")


def run(args: argparse.Namespace, _data_dir: Path) -> int:
    registry = benches()
    if args.bench == "list":
        width = max(len(name) for name in registry)
        for entry in registry.values():
            print(f"{entry.name:<{width}}  {entry.summary}")
        return 0
    entry = registry[args.bench]
    progress = Progress()
    with progress.running(f"bench {entry.name} ..."):
        report = entry.run(args, progress)
    if args.json:
        print(to_json(report))
    else:
        # Not a terminal: wide enough that no figure's row is wrapped, so the output can be read by tools too.
        stdout = Console(highlight=False) if sys.stdout.isatty() else Console(width=240, highlight=False)
        render(report, stdout)
    if report.error is not None:
        print(f"error: {report.error}", file=sys.stderr)
    return report.exit_code(args.strict)
