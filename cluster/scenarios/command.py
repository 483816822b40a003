"""`kafkasim scenario list|run` and `kafkasim demo`."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cluster.processes import ClusterError, ClusterLayout
from cluster.scenarios.registry import DEMO, SCENARIOS, scenario
from cluster.scenarios.runner import Options, run_scenario

RUN_DESCRIPTION = """\
Starts a cluster of its own (or uses a running one with --bootstrap, refusing if the scenario's topics exist there)
and runs the scenario's steps. A scenario kills, stops and starts brokers, so the cluster it uses must be one
kafkasim started: --bootstrap HOST:PORT names it by a listener and finds it in --data-dir (--existing: the cluster
of --data-dir, whatever its addresses). Every step prints what is about to happen and what Kafka's rules
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
                        help="pauses between steps are the scenario's pause (2 s unless it says less) / SPEED "
                             "(default 1; inf: none)")
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
    cluster = run.add_mutually_exclusive_group()
    cluster.add_argument("--bootstrap", metavar="HOST:PORT[,...]", default=None,
                         help="use the running kafkasim cluster of --data-dir that listens on these addresses "
                              "instead of starting one (refused if an address is not one of its brokers', or the "
                              "scenario's topics exist there)")
    cluster.add_argument("--existing", action="store_true",
                         help="use the cluster running in --data-dir, whatever its addresses (--bootstrap "
                              "without the check)")
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
    existing = args.existing or args.bootstrap is not None
    if existing and args.keep:
        raise ClusterError("--keep leaves a cluster the scenario started running; with --bootstrap or --existing it "
                           "starts none")
    if args.bootstrap is not None:
        check_listeners(data_dir, args.bootstrap)
    return run_scenario(chosen, Options(args.pace or "auto", args.speed, args.keep, args.out,
                                        data_dir if existing else None), data_dir)


def _addresses(host: str) -> set[str]:
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None, socket.AF_INET)}
    except OSError:
        return {host}


def check_listeners(data_dir: Path, bootstrap: str) -> None:
    """Every address of ``bootstrap`` is a client listener of the kafkasim cluster running in ``data_dir``:
    a scenario kills and restarts brokers by their PID files, which only a cluster kafkasim started has."""
    layout = ClusterLayout(data_dir)
    if not layout.spec_path.exists():
        raise ClusterError(f"--bootstrap {bootstrap}: there is no kafkasim cluster in {data_dir}. A scenario kills "
                           "and restarts brokers, so it drives only a cluster kafkasim started: pass that cluster's "
                           "--data-dir, or leave out --bootstrap and the scenario starts a cluster of its own")
    spec = layout.load()
    listeners = {(address, b.client_port) for b in spec.brokers for address in _addresses(b.host)}
    for item in filter(None, (part.strip() for part in bootstrap.split(","))):
        host, colon, port = item.rpartition(":")
        if not colon or not port.isdigit():
            raise ClusterError(f"--bootstrap takes HOST:PORT[,HOST:PORT...], got {item!r}")
        if not any((address, int(port)) in listeners for address in _addresses(host)):
            raise ClusterError(f"--bootstrap {item} is not a listener of the kafkasim cluster in {data_dir} "
                               f"(its brokers listen on {spec.bootstrap_servers}). A scenario kills and restarts "
                               "brokers, so it drives only a cluster kafkasim started: pass that cluster's "
                               "--data-dir, or leave out --bootstrap and the scenario starts a cluster of its own")
    if not any(layout.broker_pid(b.broker_id).read() is not None for b in spec.brokers):
        raise ClusterError(f"the kafkasim cluster in {data_dir} is not running: 'kafkasim --data-dir {data_dir} up' "
                           "starts it again")
