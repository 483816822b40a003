"""`kafkasim scenario list|run` and `kafkasim demo`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cluster.processes import ClusterError
from cluster.scenarios.registry import DEMO, SCENARIOS, scenario
from cluster.scenarios.runner import Options, run_scenario

RUN_DESCRIPTION = """\
Starts a cluster of its own (or uses the running cluster of --data-dir with --existing, refusing if the scenario's
topics exist there) and runs the scenario's steps. Every step prints what is about to happen and what Kafka's rules
predict, performs it, and shows what really happened (ZooKeeper, the brokers' logs and traces). Exit status 0:
every prediction held; 1: at least one did not (the verdict table shows the measured values); 2: the scenario
could not run."""


def _speed(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 (higher is faster, inf: no pauses), got {text}")
    return value


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--speed", type=_speed, default=1.0,
                        help="pauses between steps are 2 s / SPEED (default 1; inf: none)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    parser.add_argument("--out", type=Path, default=None,
                        help="the run folder (default: DATA_DIR/scenarios/NAME-<UTC time>); `kafkasim analyze` "
                             "reads it")


def add_parser(sub: argparse._SubParsersAction) -> None:
    command = sub.add_parser("scenario", help="classroom scenarios: a story in steps, each with Kafka's prediction")
    scenario_sub = command.add_subparsers(dest="scenario_command", required=True, parser_class=type(command))
    scenario_sub.add_parser("list", help="the scenarios and what each shows")
    run = scenario_sub.add_parser("run", help="run one scenario", description=RUN_DESCRIPTION,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("name", help="a name from `kafkasim scenario list`")
    pace = run.add_mutually_exclusive_group()
    pace.add_argument("--step", dest="pace", action="store_const", const="step",
                      help="wait for Enter before each step (the teacher's pace)")
    pace.add_argument("--auto", dest="pace", action="store_const", const="auto", help="run through (the default)")
    run.add_argument("--existing", action="store_true",
                     help="use the cluster running in --data-dir instead of starting one")
    _run_options(run)

    demo = sub.add_parser("demo", help="a one-minute story: kill the leader, watch the failover, lose nothing",
                          description=f"{DEMO.summary} Runs on a fresh 3-broker cluster of its own.")
    _run_options(demo)


def run_command(args: argparse.Namespace, data_dir: Path) -> int:
    if args.command == "demo":
        return run_scenario(DEMO, Options("auto", args.speed, args.keep, args.out), data_dir)
    if args.scenario_command == "list":
        table = Table("name", "what it shows")
        for found in SCENARIOS.values():
            table.add_row(found.name, found.title)
        Console().print(table)
        return 0
    chosen = scenario(args.name)
    if args.existing and args.keep:
        raise ClusterError("--keep leaves a cluster the scenario started running; with --existing it starts none")
    return run_scenario(chosen, Options(args.pace or "auto", args.speed, args.keep, args.out,
                                        data_dir if args.existing else None), data_dir)
