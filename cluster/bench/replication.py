"""``kafkasim bench replication``: what replication costs an unmodified client, on a fresh 3-broker cluster,
measured with confluent-kafka (librdkafka) on the same machine as the brokers:

(a) produce latency with acks=all: 1 KiB messages at a fixed rate (200/s by default), linger.ms=0, to a
    topic with replication factor 3 and min.insync.replicas=2, p50 and p99 of send -> delivery callback;
(b) produce throughput with acks=all against acks=1: the same messages, batching and topic layout (RF3,
    min.insync.replicas=2), in pairs of runs, as the machine's memory is and pre-faulted (``acks.py``);
(c) follower catch-up: one follower (not the controller) is killed, ``--catchup-mib`` MiB are produced with
    acks=1 while it is down, then it is started again. Caught up means every partition's log on its disk
    holds as many bytes as the leader's (followers append the leader's batches as they are, so equal sizes
    are equal log end offsets; the leaders' logs no longer change). The rate (of message values, like the
    other figures) counts from its first fetched byte on disk to the last, so start-up and log recovery are
    left out (they are reported apart, with the CPU time the follower used), and the
    phase also waits for ZooKeeper to show it back in every ISR;
(d) the timing wheel against ``loop.call_later`` (``purgatory.py``), after the cluster is gone.

Each phase has a deadline; one that cannot finish stops the run with what it got that far.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass

from cluster.bench.measure import MIB
from cluster.bench.options import add_latency_options, add_phase_timeout, positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Report
from cluster.processes import ClusterError

TOPIC_CONFIG = {"min.insync.replicas": "2"}


@dataclass(frozen=True)
class ReplicationBenchSettings:
    messages: int = 200_000          # (b) messages produced in each run
    throughput_rounds: int = 3       # (b) pairs of runs (acks=1, acks=all) in each memory condition
    catchup_mib: int = 1024          # (c) MiB produced while the follower is down
    latency_messages: int = 2_000    # (a) messages sent at latency_rate
    latency_rate: int = 200          # (a) messages per second
    timer_ops: int = 1_000_000       # (d) add-then-cancel operations per timer run
    phase_timeout_s: float = 180.0
    message_bytes: int = 1024
    partitions: int = 3
    brokers: int = 3
    replication_factor: int = 3

    def check(self, free_bytes: int) -> None:
        for name in ("messages", "catchup_mib", "latency_messages", "latency_rate", "timer_ops", "phase_timeout_s"):
            if getattr(self, name) <= 0:
                raise ClusterError(f"--{name.replace('_', '-').removesuffix('-s')} must be positive")
        paced_s = self.latency_messages / self.latency_rate
        if paced_s + 10 > self.phase_timeout_s:
            raise ClusterError(f"the latency phase needs {paced_s:.0f} s at {self.latency_rate} msg/s plus set-up, "
                               f"more than --phase-timeout {self.phase_timeout_s:g} s: lower --latency-messages "
                               "or raise --phase-timeout")
        # Every byte is written once per replica.
        written = self.catchup_mib * MIB + (4 * self.throughput_rounds * self.messages
                                              + self.latency_messages) * self.message_bytes
        needed = int(1.2 * self.replication_factor * written)
        if free_bytes < needed:
            raise ClusterError(f"the run writes about {needed / MIB:,.0f} MiB but {tempfile.gettempdir()} has "
                               f"{free_bytes / MIB:,.0f} MiB free: lower --catchup-mib / --messages, or point "
                               "TMPDIR at a roomier disk")


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=positive_int, default=3,
                        help="acks=1 / acks=all pairs of throughput runs in each memory condition (default 3)")
    parser.add_argument("--messages", type=positive_int, default=200_000,
                        help="1 KiB messages in each throughput run (default 200000)")
    add_latency_options(parser, 2_000, 200)
    add_phase_timeout(parser, 180)
    parser.add_argument("--catchup-mib", type=positive_int, default=1024,
                        help="MiB produced while a follower is down, then fetched by it (default 1024)")
    parser.add_argument("--timer-ops", type=positive_int, default=1_000_000,
                        help="add-then-cancel operations timed on the timing wheel and on loop.call_later "
                             "(default 1000000)")


def settings_from(args: argparse.Namespace) -> ReplicationBenchSettings:
    return ReplicationBenchSettings(messages=args.messages, throughput_rounds=args.rounds,
                                    catchup_mib=args.catchup_mib, latency_messages=args.latency_messages,
                                    latency_rate=args.latency_rate, timer_ops=args.timer_ops,
                                    phase_timeout_s=float(args.phase_timeout))


def run(args: argparse.Namespace, progress: Progress) -> Report:
    from cluster.bench.client import MIB_NOTE
    from cluster.bench.client_kit import (
        CLIENT_VERSION,
        LIBRDKAFKA_VERSION,
        PROFILE,
        ClientBench,
        ClientLog,
        run_phases,
    )
    from cluster.bench.cluster_run import temporary_cluster
    from cluster.bench.process_facts import CpuMeter
    from cluster.bench.purgatory import timer_phase
    from cluster.bench.replication_phases import PHASES
    from cluster.bench.replication_run import ReplicationRun

    settings = settings_from(args)
    settings.check(shutil.disk_usage(tempfile.gettempdir()).free)
    progress.say(f"starting a {settings.brokers}-broker cluster ({PROFILE} profile) in a temporary directory ...")
    with temporary_cluster(settings.brokers, PROFILE) as (spec, layout):
        title = (f"kafkasim replication benchmark: {settings.brokers} brokers ({PROFILE} profile) in "
                 f"{layout.data_dir}, replication factor {settings.replication_factor}, "
                 f"confluent-kafka {CLIENT_VERSION} / librdkafka {LIBRDKAFKA_VERSION}, "
                 f"{os.cpu_count()} CPUs shared by clients and brokers")
        bench = ClientBench(spec, settings, CpuMeter(spec, layout), ClientLog(), progress)
        phases, error = run_phases(PHASES, ReplicationRun(bench, layout), layout, spec, progress)
    if error is None:
        progress.say("phase timer (cluster stopped) ...")
        phases.append(timer_phase(settings.timer_ops, "(d) "))
    return Report("replication", title, {**asdict(settings), "profile": PROFILE, "cpus": os.cpu_count(),
                                         "confluent_kafka": CLIENT_VERSION, "librdkafka": LIBRDKAFKA_VERSION,
                                         "topic_config": TOPIC_CONFIG}, phases, [MIB_NOTE], error)


BENCH = Bench("replication", "acks=all produce latency, acks=all against acks=1 throughput, a follower's catch-up, "
              "the timing wheel (fresh 3-broker cluster, RF3)", options, run)
