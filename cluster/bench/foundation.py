"""``kafkasim bench foundation``: start-up time, failover time against the session timeout, and idle broker
memory, each round on a fresh 3-broker cluster (classroom profile)."""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time

from cluster.bench.cluster_run import cluster_state, create_topic_in_zookeeper, poll_until, temporary_cluster
from cluster.bench.options import positive_int
from cluster.bench.process_facts import resident_mib
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report
from cluster.processes import ClusterLayout, ClusterSpec

PROFILE = "classroom"
SESSION_TIMEOUT_S = 2.0   # the classroom profile's zookeeper.session.timeout.ms
STARTUP_TARGET_S = 5.0
# the controller notices the dead leader when its ZooKeeper session expires, then elects within half a second
LEADER_FAILOVER_TARGET_S = SESSION_TIMEOUT_S + 0.5
IDLE_RSS_TARGET_MIB = 80.0


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=positive_int, default=3, help="clusters to start (default 3)")


def _leader_failover(spec: ClusterSpec, layout: ClusterLayout) -> float:
    """kill -9 of a partition leader that is not the controller -> new leader in ZooKeeper."""
    state = cluster_state(spec.zookeeper, ["bench"])
    victim = next(p for p in state.partitions if p.leader != state.controller_id)
    pid = layout.broker_pid(victim.leader).read()
    assert pid is not None
    started = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    poll_until(lambda: cluster_state(spec.zookeeper, ["bench"]).partition("bench", victim.partition).leader
               not in (-1, victim.leader), 60, "a new leader")
    return time.monotonic() - started


def _controller_failover(spec: ClusterSpec, layout: ClusterLayout) -> float:
    controller = cluster_state(spec.zookeeper, []).controller_id
    pid = layout.broker_pid(controller).read()
    assert pid is not None
    started = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    poll_until(lambda: cluster_state(spec.zookeeper, []).controller_id not in (-1, controller), 60,
               "a new controller")
    return time.monotonic() - started


def _spread(values: list[float], unit: str = "s") -> str:
    return f"median {statistics.median(values):.2f} {unit}, min {min(values):.2f}, max {max(values):.2f}"


def run(args: argparse.Namespace, progress: Progress) -> Report:
    startup, leader_moves, controller_moves, rss = [], [], [], []
    for number in range(1, args.rounds + 1):
        progress.say(f"round {number} of {args.rounds}: starting a 3-broker cluster ...")
        began = time.monotonic()
        with temporary_cluster(3, PROFILE) as (spec, layout):
            startup.append(time.monotonic() - began)
            create_topic_in_zookeeper(spec.zookeeper, "bench")
            connect = spec.zookeeper
            poll_until(lambda c=connect: all(p.leader >= 0 for p in cluster_state(c, ["bench"]).partitions), 30,
                       "a leader for every partition of bench")
            time.sleep(3)  # idle memory means idle: let start-up allocations settle
            for broker in spec.brokers:
                pid = layout.broker_pid(broker.broker_id).read()
                if pid is not None:
                    rss.append(resident_mib(pid))
            progress.say(f"round {number}: kill -9 of a leader, then of the controller ...")
            leader_moves.append(_leader_failover(spec, layout))
            controller_moves.append(_controller_failover(spec, layout))
    median = statistics.median
    phases = [
        Phase("start-up", f"up -> ready, {_spread(startup)}", sum(startup),
              [Figure("startup_s", "up -> ready 3-broker cluster incl. ZooKeeper (median)", median(startup), "s",
                      STARTUP_TARGET_S, at_least=False)], {"runs_s": [round(v, 3) for v in startup]}),
        Phase("failover", f"new leader {_spread(leader_moves)}; new controller {_spread(controller_moves)}",
              sum(leader_moves) + sum(controller_moves),
              [Figure("leader_failover_s", "kill -9 leader -> new leader in ZooKeeper (median)", median(leader_moves),
                      "s", LEADER_FAILOVER_TARGET_S, at_least=False),
               Figure("controller_failover_s", "kill -9 controller -> new controller elected (median)",
                      median(controller_moves), "s")],
              {"leader_runs_s": [round(v, 3) for v in leader_moves],
               "controller_runs_s": [round(v, 3) for v in controller_moves]}),
        Phase("memory", f"resident memory per idle broker: {_spread(rss, 'MiB')}", 0.0,
              [Figure("idle_broker_rss_mib", "resident memory per idle broker (median)", median(rss), "MiB",
                      IDLE_RSS_TARGET_MIB, at_least=False)], {"brokers_mib": [round(v, 1) for v in rss]}),
    ]
    title = (f"kafkasim foundation benchmark: {args.rounds} rounds of 3 brokers ({PROFILE} profile, "
             f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_S * 1000:.0f}), {os.cpu_count()} CPUs")
    return Report("foundation", title, {"rounds": args.rounds, "brokers": 3, "profile": PROFILE}, phases)


BENCH = Bench("foundation", "start-up time, leader and controller failover against the session timeout, idle "
              "broker memory (fresh 3-broker clusters)", options, run)
