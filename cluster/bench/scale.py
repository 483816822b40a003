"""``kafkasim bench scale``: what thousands of partitions cost, each size on a fresh 3-broker cluster (classroom
profile, RF 3, one topic):

- create: CreateTopics through confluent-kafka's AdminClient, until ZooKeeper has every partition led with a
  full ISR;
- idle: CPU per broker over a window once the cluster has settled, and resident memory per broker;
- kill -9 of the non-controller broker leading the most partitions (about a third), until ZooKeeper names a
  new leader for each of them; then it is restarted and the run waits for full ISRs again;
- controlled shutdown (SIGTERM, as ``kafkasim down`` sends) of the non-controller broker leading the most,
  until its process exits, and whether each survivor's Metadata then agrees with ZooKeeper's leaders;
- controller failover: kill -9 of the controller until the new one has loaded every partition
  (its ``controller_loaded`` trace event, Kafka's end of onControllerFailover).

The measuring is in ``scale_run.py``.
"""

from __future__ import annotations

import argparse
import math
import os
import time

from cluster.bench.options import non_negative_float, positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report

PROFILE = "classroom"
SESSION_TIMEOUT_S = 2.0   # the classroom profile's zookeeper.session.timeout.ms
# Issue 18's targets, set for 1000 partitions; a larger size is asked only to work, so it is shown without them.
TARGETS_UP_TO = 1000
CREATE_TARGET_S = 3.0
IDLE_CPU_TARGET_PCT = 2.0
KILL_OVER_SESSION_TARGET_S = 0.5
SHUTDOWN_TARGET_S = 1.0
CONTROLLER_OVER_SESSION_TARGET_S = 2.0


def partition_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None
    if not counts or min(counts) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give at least one partition count, each at least 1")
    return counts


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--partitions", type=partition_counts, default=[100, 1000, 3000], metavar="N,N,...",
                        help="partition counts, each on a fresh cluster (default 100,1000,3000)")
    parser.add_argument("--idle-s", type=non_negative_float, default=10.0,
                        help="window over which idle CPU is measured (default 10)")
    parser.add_argument("--settle-s", type=non_negative_float, default=3.0,
                        help="time left after creating before the idle window, for the brokers' start-up work "
                             "(default 3)")
    parser.add_argument("--idle-only", action="store_true",
                        help="stop after the idle window: create, settle, measure idle CPU and memory only")
    parser.add_argument("--phase-timeout", type=positive_int, default=300, metavar="SECONDS",
                        help="a wait that takes longer stops the run with exit status 1 (default 300)")


def _max(values: dict) -> float:
    return max(values.values()) if values else math.nan


def figures_of(result) -> list[Figure]:
    """One size's figures; names carry the size (``create_s_1000``) so JSON keys stay stable across sizes."""
    n = result.partitions
    targeted = n <= TARGETS_UP_TO

    def target(value: float) -> float | None:
        return value if targeted else None

    kill, shutdown, controller = result.kill, result.shutdown, result.controller
    figures = [
        Figure(f"create_s_{n}", f"{n} partitions: CreateTopics -> all led, ISR full (ZooKeeper)", result.create_s,
               "s", target(CREATE_TARGET_S), at_least=False),
        Figure(f"create_answered_s_{n}", f"{n} partitions: CreateTopics -> AdminClient answered",
               result.create_answered_s, "s"),
        Figure(f"idle_cpu_pct_{n}", f"{n} partitions: idle CPU, busiest broker", _max(result.idle_cpu_pct),
               "% core", target(IDLE_CPU_TARGET_PCT), at_least=False),
        Figure(f"rss_mib_{n}", f"{n} partitions: resident memory, largest broker", _max(result.rss_mib), "MiB"),
    ]
    if kill:
        figures += [
            Figure(f"kill9_moved_s_{n}", f"{n} partitions: kill -9 broker leading {kill['led']} -> all moved",
                   kill["moved_s"], "s"),
            Figure(f"kill9_over_session_s_{n}", f"{n} partitions:   ... beyond the session timeout",
                   kill["moved_s"] - SESSION_TIMEOUT_S, "s", target(KILL_OVER_SESSION_TARGET_S), at_least=False),
            Figure(f"restart_isr_full_s_{n}", f"{n} partitions: restart it -> every ISR full again",
                   result.restart_isr_full_s, "s"),
        ]
    if shutdown:
        disagreeing = _max(shutdown["metadata_disagreeing"])
        figures += [
            Figure(f"controlled_shutdown_s_{n}", f"{n} partitions: SIGTERM broker leading {shutdown['led']} -> "
                   "process exited", shutdown["exit_s"], "s", target(SHUTDOWN_TARGET_S), at_least=False),
            Figure(f"shutdown_metadata_wrong_{n}", f"{n} partitions:   ... partitions a survivor's Metadata "
                   "gets wrong then", disagreeing, "partitions", target(0.0), at_least=False),
        ]
    if controller:
        figures += [
            Figure(f"controller_failover_s_{n}", f"{n} partitions: kill -9 controller -> new one loaded",
                   controller["loaded_s"], "s"),
            Figure(f"controller_over_session_s_{n}", f"{n} partitions:   ... beyond the session timeout",
                   controller["loaded_s"] - SESSION_TIMEOUT_S, "s", target(CONTROLLER_OVER_SESSION_TARGET_S),
                   at_least=False),
            Figure(f"controller_load_s_{n}", f"{n} partitions:   ... of which elected -> loaded",
                   controller["load_ms"] / 1000, "s"),
        ]
    return figures


def phase_of(result, elapsed_s: float) -> Phase:
    n = result.partitions
    cpu = ", ".join(f"broker {b} {v:.1f}%" for b, v in sorted(result.idle_cpu_pct.items()))
    rss = ", ".join(f"{v:.0f}" for _, v in sorted(result.rss_mib.items()))
    summary = f"{n} partitions, RF 3: idle CPU {cpu}; RSS {rss} MiB"
    if result.shutdown:
        summary += (f"; controlled shutdown of broker {result.shutdown['broker']}: survivors' Metadata wrong for "
                    f"{result.shutdown['metadata_disagreeing']} partitions")
    details = {"partitions": n, "idle_cpu_pct": result.idle_cpu_pct, "rss_mib": result.rss_mib,
               "kill9": result.kill, "controlled_shutdown": result.shutdown, "controller_failover": result.controller}
    return Phase(f"{n}", summary, elapsed_s, figures_of(result), details, result.idle_cpu_s)


def run(args: argparse.Namespace, progress: Progress) -> Report:
    from cluster.bench.cluster_run import temporary_cluster
    from cluster.bench.scale_run import SizeResult, measure_size
    from cluster.processes import ClusterError

    phases: list[Phase] = []
    error = None
    for n in args.partitions:
        progress.say(f"{n} partitions: starting a 3-broker cluster ...")
        began = time.monotonic()
        try:
            with temporary_cluster(3, PROFILE, prefix="kafkasim-bench-scale-") as (spec, layout):
                result, stopped = measure_size(spec, layout, n, progress.say, settle_s=args.settle_s,
                                               idle_s=args.idle_s, timeout_s=args.phase_timeout,
                                               idle_only=args.idle_only)
        except ClusterError as exc:  # the cluster did not start
            result, stopped = SizeResult(n), str(exc)
        phases.append(phase_of(result, time.monotonic() - began))
        if stopped is not None:
            error = f"{n} partitions: {stopped}"
            break
    title = (f"kafkasim scale benchmark: {', '.join(map(str, args.partitions))} partitions (RF 3, 3 brokers, "
             f"{PROFILE} profile, zookeeper.session.timeout.ms={SESSION_TIMEOUT_S * 1000:.0f}), {os.cpu_count()} CPUs")
    notes = [f"Targets are issue 18's, for up to {TARGETS_UP_TO} partitions; larger sizes are only asked to work.",
             "Idle CPU is % of one core over the idle window; other processes on the machine share its cores "
             "(their CPU is in the phase's line), so a loaded machine makes every figure pessimistic."]
    settings = {"partitions": args.partitions, "idle_s": args.idle_s, "settle_s": args.settle_s,
                "phase_timeout": args.phase_timeout, "idle_only": args.idle_only,
                "brokers": 3, "replication_factor": 3, "profile": PROFILE}
    return Report("scale", title, settings, phases, notes, error)


BENCH = Bench("scale", "thousands of partitions: create, idle CPU and memory, kill -9 of a broker, controlled "
              "shutdown, controller failover (a fresh 3-broker cluster per size)", options, run)
