"""`kafkasim chaos run | matrix | campaign`: parsers, and the verdicts printed with rich. Exit status: 0 valid,
1 anomalies, 2 an error of kafkasim's own (bad options, a cluster that would not start, a fault that failed), 3 only
anomalies Apache Kafka 2.8 has too under the same faults (kafka-known: a zombie group coordinator's duplicates,
docs/zombie-coordinator.md)."""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cluster.chaos.checker import CLIENT_SIDE, UNCERTAIN, CheckResult
from cluster.chaos.matrix import REPLICATION_MATRIX, matrix_rows, matrix_table
from cluster.chaos.runner import (
    EXIT_ERROR,
    EXIT_INVALID,
    EXIT_KAFKA_KNOWN,
    EXIT_VALID,
    ChaosSettings,
    run_chaos,
)
from cluster.chaos.schedule import KIND_HELP, NemesisSpecError, parse_nemesis
from cluster.chaos.txn_workload import TxnWorkloadSettings
from cluster.chaos.workload import DEFAULT_COMPACTED_TOPICS, WorkloadSettings
from cluster.processes import ClusterError

DEFAULT_NEMESIS_LOOPBACK = "kill,pause,controller,bounce,zk-down"
CAMPAIGN_ERRORS_IN_A_ROW = 3
DEFAULT_NEMESIS_NETNS = "kill,pause,partition,zk-isolate,controller,bounce,zk-down"


def add_parser(sub: argparse._SubParsersAction) -> None:
    chaos = sub.add_parser("chaos", help="seeded fault runs with a recorded workload and a Jepsen-style verdict")
    # the subcommands take the global options too (--data-dir), as every kafkasim command does
    chaos_sub = chaos.add_subparsers(dest="chaos_command", required=True, parser_class=type(chaos))

    run = chaos_sub.add_parser("run", help="one run: cluster, workload, the seed's faults, heal, settle, check",
                               description="Exit status 0: valid; 1: anomalies found; 2: the run itself failed.")
    _run_options(run)
    run.add_argument("--out", type=Path, default=None, help="the run's folder (default: DATA_DIR/chaos/seed-S-<time>)")
    run.add_argument("--bootstrap", metavar="HOST:PORT", default=None,
                     help="run the workload and the checker against a cluster kafkasim did not start (any Kafka); "
                          "no faults of kafkasim's then: --nemesis none")

    matrix = chaos_sub.add_parser("matrix", help="Kafka's replication test matrix, one row per cell")
    matrix.add_argument("--duration", type=float, default=30.0, help="seconds per cell (default 30)")
    matrix.add_argument("--cell", action="append", metavar="MODE/BROKER",
                        help="only these cells, e.g. hard_bounce/leader (repeatable)")
    matrix.add_argument("--out", type=Path, default=None)

    campaign = chaos_sub.add_parser("campaign", help="many seeded runs, one row each and a total")
    _run_options(campaign)
    campaign.add_argument("--runs", type=int, default=10)
    campaign.add_argument("--out", type=Path, default=None)


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: random, printed)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of workload and faults (default 60)")
    parser.add_argument("--nemesis", default=None,
                        help="comma-separated faults: " + ", ".join(KIND_HELP) + "; 'all' or 'none' "
                             f"(default: {DEFAULT_NEMESIS_LOOPBACK}, with --netns also partition and zk-isolate)")
    parser.add_argument("--workload", choices=["queue", "txn"], default="queue",
                        help="queue: producers of unique values, assign readers and group members (default); txn: "
                             "consume-transform-produce in transactions, checked for exactly-once")
    parser.add_argument("--acks", choices=["all", "1"], default="all", help="the queue workload's producers")
    parser.add_argument("--idempotent", action=argparse.BooleanOptionalAction, default=True,
                        help="the queue workload's producers (the txn workload's input producer always is)")
    parser.add_argument("--rate", type=float, default=200.0, help="sends per second (default 200)")
    parser.add_argument("--compacted-topics", type=int, default=None, metavar="N",
                        help="queue workload: the last N of its topics are compacted (cleanup.policy=compact, a "
                             "segment rolled every 2 s, delete.retention.ms 5 s), written with keyed values and "
                             "tombstones over 30 keys and checked by compaction's promise (default 1: chaos-b; "
                             "0: none)")
    parser.add_argument("--transformers", type=int, default=2,
                        help="txn workload: consume-transform-produce loops, each a group member with its own "
                             "transactional.id (default 2)")
    parser.add_argument("--transaction-size", type=int, default=20, metavar="N",
                        help="txn workload: input records per transaction at most (default 20)")
    parser.add_argument("--random-aborts", action=argparse.BooleanOptionalAction, default=True,
                        help="txn workload: abort one transaction in ten on purpose (default on)")
    parser.add_argument("--override", action="append", metavar="KEY=VALUE",
                        help="broker property, e.g. unclean.leader.election.enable=true (repeatable)")
    parser.add_argument("--netns", action="store_true",
                        help="brokers in network namespaces (root), for partition, zk-isolate and slow")
    parser.add_argument("--subnet", default=None, metavar="CIDR",
                        help="with --netns: the namespaces' IPv4 subnet, so that a run beside another --netns "
                             "cluster does not clash with it (implies --netns)")
    parser.add_argument("--log-dir-size-mib", type=int, default=None, metavar="N",
                        help="each broker's log directory on an N MiB tmpfs (root), for disk-full")


def _settings(args: argparse.Namespace, seed: int) -> ChaosSettings:
    try:
        netns = args.netns or args.subnet is not None
        default = ("none" if getattr(args, "bootstrap", None) else
                   DEFAULT_NEMESIS_NETNS if netns else DEFAULT_NEMESIS_LOOPBACK)
        if args.log_dir_size_mib and not args.nemesis:
            default += ",disk-full"
        nemesis = parse_nemesis(args.nemesis or default)
    except NemesisSpecError as exc:
        raise ClusterError(str(exc)) from None
    overrides = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    for item in args.override or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClusterError(f"--override takes key=value, got {item!r}")
        overrides[key.strip()] = value.strip()
    return ChaosSettings(seed=seed, duration_s=args.duration, nemesis=nemesis, overrides=overrides,
                         netns=args.netns or args.subnet is not None, subnet=args.subnet,
                         log_dir_size_mib=args.log_dir_size_mib, workload=_workload(args))


def _workload(args: argparse.Namespace) -> WorkloadSettings | TxnWorkloadSettings:
    if args.workload == "queue":
        compacted = DEFAULT_COMPACTED_TOPICS if args.compacted_topics is None else args.compacted_topics
        settings = WorkloadSettings(acks=args.acks, idempotent=args.idempotent, rate=args.rate, compacted=compacted)
        if not 0 <= compacted <= len(settings.topics):
            raise ClusterError(f"--compacted-topics takes 0 to {len(settings.topics)}, the queue workload's topics "
                               f"({', '.join(settings.topics)}); got {compacted}")
        return settings
    if args.acks != "all" or not args.idempotent:
        raise ClusterError("--workload txn fills its input with an idempotent acks=all producer: "
                           "--acks and --no-idempotent are the queue workload's")
    if args.compacted_topics is not None:
        raise ClusterError("--compacted-topics is the queue workload's: the txn workload's topics are not compacted")
    if args.transformers < 1 or args.transaction_size < 1:
        raise ClusterError("--transformers and --transaction-size must be at least 1")
    return TxnWorkloadSettings(rate=args.rate, transformers=args.transformers,
                               transaction_size=args.transaction_size, abort_share=0.1 if args.random_aborts else 0.0)


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def run_command(args: argparse.Namespace, data_dir: Path) -> int:
    # the faults make the tools' own ZooKeeper clients reconnect on purpose: that is no news to print
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    # a pipe or a file gets the whole table, not one squeezed into 80 columns
    console = Console(highlight=False) if sys.stdout.isatty() else Console(width=240, highlight=False)
    # a SIGTERM (a CI timeout, `kill`) ends a run the way Ctrl-C does: the run's finally takes its cluster, network
    # namespaces and mounts down instead of leaving them behind
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if args.chaos_command == "run":
            return _run(args, data_dir, console)
        if args.chaos_command == "matrix":
            return _matrix(args, data_dir, console)
        return _campaign(args, data_dir, console)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _run(args: argparse.Namespace, data_dir: Path, console: Console) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    out = (args.out or data_dir / "chaos" / f"seed-{seed}-{_stamp()}").resolve()
    say = lambda line: console.print(line, markup=False, highlight=False)  # noqa: E731
    if args.bootstrap:
        from cluster.chaos.external import run_against

        run = run_against(_settings(args, seed), args.bootstrap, out, say=say)
    else:
        run = run_chaos(_settings(args, seed), out, say=say)
    console.print(result_table(run.result, f"seed {seed}"))
    console.print(f"{run.ops_per_s:.0f} acknowledged sends/s; "
                  + ("" if args.bootstrap else "settled " + (
                      f"{run.heal_to_settled_s:.1f} s after the last fault" if run.heal_to_settled_s is not None
                      else "NOT within the settle time"))
                  + f"; results in {out}", markup=False, highlight=False)
    return run.exit_code


VERDICT_STYLE = {"valid": "green", "invalid": "bold red", "unknown": "yellow", "kafka-known": "magenta"}


def result_table(result: CheckResult, title: str) -> Table:
    style = VERDICT_STYLE[result.verdict]
    table = Table(title=Text(f"{title}: {result.verdict}", style=style))
    table.add_column("anomaly")
    table.add_column("count", justify="right")
    table.add_column("first example")
    for report in result.anomalies:
        example = report.examples[0] if report.examples else None
        where = "" if example is None else (
            f"{example.topic}-{example.partition} offsets {list(example.offsets)} values {list(example.values)[:3]} "
            f"ops {list(example.ops)[:4]} {example.detail}")
        # the client's re-sends and the values nobody read do not make a run invalid
        style = "yellow" if report.name in CLIENT_SIDE | UNCERTAIN else "red"
        table.add_row(Text(report.name, style=style), str(report.count), Text(where))
    if not result.anomalies:
        table.add_row(Text("none", style="green"), "0", Text(""))
    a, s = result.availability, result.summary
    table.caption = (f"{s.acknowledged} of {s.sends} sends acknowledged, {s.failed} failed, {s.indeterminate} unknown; "
                     f"{s.records_polled} records polled; longest time without an acknowledgement "
                     f"{a.longest_without_ok_send_ms / 1000:.1f} s" + (f" ({', '.join(a.faults_during_gap)})"
                                                                       if a.faults_during_gap else ""))
    if (t := result.transactions) is not None:
        table.caption += (f"\n{t.transactions} transactions: {t.committed} committed, {t.aborted} aborted, {t.unknown} "
                          f"unknown ({t.unknown_visible} of them visible); {t.inputs_exactly_once} of "
                          f"{t.inputs_acknowledged} acknowledged inputs exactly once in the committed output; "
                          f"{t.aborted_values_in_log} aborted values in the log, hidden from read_committed")
    return table


def _matrix(args: argparse.Namespace, data_dir: Path, console: Console) -> int:
    from cluster.chaos.matrix_run import run_matrix

    cells = REPLICATION_MATRIX
    if args.cell:
        known = {cell.cell_id: cell for cell in REPLICATION_MATRIX}
        unknown = [c for c in args.cell if c not in known]
        if unknown:
            raise ClusterError(f"unknown cells {unknown}; known: {', '.join(known)}")
        cells = tuple(known[c] for c in args.cell)
    out = (args.out or data_dir / "chaos" / f"matrix-{_stamp()}").resolve()
    with console.status("running the replication matrix"):
        results = run_matrix(out, args.duration, cells, say=lambda line: console.print(line, markup=False))
    rows = [row for row in matrix_rows(results) if row.verdict != "not run" or not args.cell]
    console.print(matrix_table(rows))
    console.print(f"runs in {out}", markup=False, highlight=False)
    return EXIT_VALID if all(row.passed for row in rows if row.passed is not None) else EXIT_INVALID


def _campaign(args: argparse.Namespace, data_dir: Path, console: Console) -> int:
    if args.runs < 1:
        raise ClusterError("--runs must be at least 1")
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    out = (args.out or data_dir / "chaos" / f"campaign-{_stamp()}").resolve()
    table = Table(title=f"chaos campaign: {args.runs} runs of {args.duration:.0f} s from seed {first}")
    for column in ("seed", "verdict", "faults", "acked", "ops/s", "lost", "duplicates", "client re-sends", "other",
                   "settled"):
        table.add_column(column, justify="left" if column == "verdict" else "right")
    passed = known = errors_in_a_row = 0
    for seed in range(first, first + args.runs):
        try:
            run = run_chaos(_settings(args, seed), out / f"seed-{seed}", say=lambda _: None)
        except ClusterError as exc:
            # one run that could not be carried out is a failed row, not the end of the campaign; several in a row
            # are a setting or a machine that no run will get past
            table.add_row(str(seed), Text("error", style="bold red"), *["-"] * 8)
            console.print(f"{seed} error: {exc}", markup=False, highlight=False)
            errors_in_a_row += 1
            if errors_in_a_row == CAMPAIGN_ERRORS_IN_A_ROW:
                console.print(f"stopped after {errors_in_a_row} runs in a row that could not be carried out",
                              markup=False, highlight=False)
                break
            continue
        errors_in_a_row = 0
        passed += run.result.valid
        known += run.result.verdict == "kafka-known"
        counts = run.result.counts
        # the txn workload's exactly-once losses and duplicates count in the same columns
        lost = counts["lost-write"] + counts.get("txn-lost", 0)
        duplicates = counts["duplicate"] + counts.get("txn-duplicate", 0)
        other = sum(n for name, n in counts.items()
                    if name not in ("lost-write", "duplicate", "client-resend", "txn-lost", "txn-duplicate"))
        row = (str(seed), Text(run.result.verdict, style=VERDICT_STYLE[run.result.verdict]),
               str(len(run.steps) - 1), str(run.result.summary.acknowledged), f"{run.ops_per_s:.0f}",
               str(lost), str(duplicates), str(counts["client-resend"]), str(other),
               "-" if run.heal_to_settled_s is None else f"{run.heal_to_settled_s:.1f} s")
        table.add_row(*row)
        console.print(Text(" ".join(str(c) for c in row)), highlight=False)  # progress: one line per run
    table.caption = f"{passed} of {args.runs} runs valid" + (
        f", {known} with only Kafka 2.8's own anomalies (kafka-known)" if known else "")
    console.print(table)
    console.print(f"runs in {out}", markup=False, highlight=False)
    if passed == args.runs:
        return EXIT_VALID
    return EXIT_KAFKA_KNOWN if passed + known == args.runs else EXIT_INVALID
