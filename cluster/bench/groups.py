"""``kafkasim bench groups``: how long a consumer group stops consuming when something dies, on a fresh
3-broker cluster (classroom profile), with confluent-kafka consumers running as separate processes:

(a) member failover: kill -9 one of three members of a group on a 6-partition topic; time until one of the
    others consumes a record of the dead member's partitions again. Bounded below by the session timeout
    (the coordinator must first expire the member), then a rebalance;
(b) coordinator failover: kill -9 the broker coordinating the group; time until a commit reaches the new
    coordinator (a committed offset read back from it is higher than before the kill). Bounded below by
    ZooKeeper noticing the dead broker, then a leader election for the __consumer_offsets partition, the
    new leader replaying that partition, and the clients finding it.

Each round uses a fresh cluster (``groups_rounds.py``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from cluster.bench.options import positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report
from cluster.processes import ClusterError

SESSION_TIMEOUT_MS = 6000  # group.min.session.timeout.ms: the fastest expiry a member may ask for
ZOOKEEPER_SESSION_MS = 2000  # the classroom profile's zookeeper.session.timeout.ms
MEMBERS = 3


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=positive_int, default=3, help="clusters to start (default 3)")


def phases_of(member: list[float], coordinator: list[float]) -> list[Phase]:
    phases = []
    if member:
        phases.append(Phase(
            "member", f"kill -9 of 1 of {MEMBERS} confluent-kafka members, session.timeout.ms="
                      f"{SESSION_TIMEOUT_MS}: {', '.join(f'{v:.2f}' for v in member)} s",
            sum(member), [
                Figure("member_failover_median_s", "kill -9 member -> its partitions consumed again (median)",
                       statistics.median(member), "s"),
                # negative is possible: the session runs from the member's last heartbeat, which came up to
                # heartbeat.interval.ms (500) before the kill
                Figure("member_failover_over_session_s", "  ... minus the session timeout (from last heartbeat)",
                       statistics.median(member) - SESSION_TIMEOUT_MS / 1000, "s")],
            {"runs_s": [round(v, 3) for v in member]}))
    if coordinator:
        phases.append(Phase(
            "coord", f"kill -9 of the group coordinator, zookeeper.session.timeout.ms={ZOOKEEPER_SESSION_MS}: "
                     f"{', '.join(f'{v:.2f}' for v in coordinator)} s",
            sum(coordinator), [
                Figure("coordinator_failover_median_s", "kill -9 coordinator -> group commits again (median)",
                       statistics.median(coordinator), "s")],
            {"runs_s": [round(v, 3) for v in coordinator]}))
    return phases


def run(args: argparse.Namespace, progress: Progress) -> Report:
    from cluster.bench.cluster_run import temporary_cluster
    from cluster.bench.groups_rounds import one_round

    member: list[float] = []
    coordinator: list[float] = []
    error = None
    for number in range(1, args.rounds + 1):
        progress.say(f"round {number} of {args.rounds}: starting a 3-broker cluster and {MEMBERS} members ...")
        with temporary_cluster(3, "classroom") as (spec, layout), tempfile.TemporaryDirectory() as work:
            try:
                m, c = one_round(spec, layout, Path(work))
            except ClusterError as exc:
                error = f"round {number}: {exc}"
                break
            member.append(m)
            coordinator.append(c)
            progress.say(f"round {number}: member failover {m:.2f} s, coordinator failover {c:.2f} s")
    return Report("groups", f"kafkasim consumer group benchmark ({len(member)} rounds, 3 brokers, classroom "
                            "profile)", {"rounds": args.rounds, "members": MEMBERS,
                                         "session_timeout_ms": SESSION_TIMEOUT_MS, "profile": "classroom"},
                  phases_of(member, coordinator), error=error)


BENCH = Bench("groups", "consumer-group failover: kill -9 of a member, then of the group coordinator, until "
              "consuming and committing resume (fresh 3-broker clusters)", options, run)
