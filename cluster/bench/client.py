"""``kafkasim bench client``: what an unmodified Kafka client gets from a fresh 3-broker cluster, measured
with confluent-kafka (librdkafka) on the same machine as the brokers:

(a) produce throughput: 1 KiB messages to 3 partitions, acks=1, batched as a throughput-minded user would;
(b) consume throughput: a topic of ``--size-mib`` MiB (1 GiB by default) read from the beginning;
(c) produce latency: send -> delivery callback at a fixed rate, linger.ms=0, p50 and p99.

Every topic has replication factor 1 (written while followers did not fetch yet), so acks=1 is acks=all. The
consumer takes its partitions with assign() at explicit offsets and never commits: confluent-kafka insists
on a group.id, and librdkafka then keeps looking for the group coordinator in the background, which this
kafkasim answers by closing the connection (counted in the consume phase) — but fetching never waits on it.

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

PRODUCE_TARGET_MIB_S = 60.0
CONSUME_TARGET_MIB_S = 150.0


@dataclass(frozen=True)
class ClientBenchSettings:
    messages: int = 300_000          # (a) messages produced
    size_mib: int = 1024             # (b) size of the topic read from the beginning
    latency_messages: int = 5_000    # (c) messages sent at latency_rate
    latency_rate: int = 500          # (c) messages per second
    phase_timeout_s: float = 120.0
    message_bytes: int = 1024
    partitions: int = 3
    brokers: int = 3

    def check(self, free_bytes: int) -> None:
        for name in ("messages", "size_mib", "latency_messages", "latency_rate", "phase_timeout_s"):
            if getattr(self, name) <= 0:
                raise ClusterError(f"--{name.replace('_', '-').removesuffix('-s')} must be positive")
        paced_s = self.latency_messages / self.latency_rate
        if paced_s + 10 > self.phase_timeout_s:
            raise ClusterError(f"the latency phase needs {paced_s:.0f} s at {self.latency_rate} msg/s plus set-up, "
                               f"more than --phase-timeout {self.phase_timeout_s:g} s: lower --latency-messages "
                               "or raise --phase-timeout")
        needed = int(1.2 * (self.size_mib * MIB + (self.messages + self.latency_messages) * self.message_bytes))
        if free_bytes < needed:
            raise ClusterError(f"the run writes about {needed / MIB:,.0f} MiB but {tempfile.gettempdir()} has "
                               f"{free_bytes / MIB:,.0f} MiB free: lower --size-mib / --messages, or point "
                               "TMPDIR at a roomier disk")


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=positive_int, default=300_000,
                        help="1 KiB messages for the produce throughput (default 300000)")
    parser.add_argument("--size-mib", type=positive_int, default=1024,
                        help="size of the topic read from the beginning (default 1024)")
    add_latency_options(parser, 5_000, 500)
    add_phase_timeout(parser, 120)


def settings_from(args: argparse.Namespace) -> ClientBenchSettings:
    return ClientBenchSettings(messages=args.messages, size_mib=args.size_mib, latency_messages=args.latency_messages,
                               latency_rate=args.latency_rate, phase_timeout_s=float(args.phase_timeout))


def run(args: argparse.Namespace, progress: Progress) -> Report:
    from cluster.bench.client_kit import (
        CLIENT_VERSION,
        LIBRDKAFKA_VERSION,
        PROFILE,
        ClientBench,
        ClientLog,
        run_phases,
    )
    from cluster.bench.client_phases import PHASES
    from cluster.bench.cluster_run import temporary_cluster
    from cluster.bench.process_facts import CpuMeter

    settings = settings_from(args)
    settings.check(shutil.disk_usage(tempfile.gettempdir()).free)
    progress.say(f"starting a {settings.brokers}-broker cluster ({PROFILE} profile) in a temporary directory ...")
    with temporary_cluster(settings.brokers, PROFILE) as (spec, layout):
        title = (f"kafkasim client benchmark: {settings.brokers} brokers ({PROFILE} profile) in {layout.data_dir}, "
                 f"confluent-kafka {CLIENT_VERSION} / librdkafka {LIBRDKAFKA_VERSION}, "
                 f"{os.cpu_count()} CPUs shared by clients and brokers")
        bench = ClientBench(spec, settings, CpuMeter(spec, layout), ClientLog(), progress)
        phases, error = run_phases(PHASES, bench, layout, spec, progress)
    return Report("client", title, {**asdict(settings), "profile": PROFILE, "cpus": os.cpu_count(),
                                    "confluent_kafka": CLIENT_VERSION, "librdkafka": LIBRDKAFKA_VERSION},
                  phases, [MIB_NOTE], error)


MIB_NOTE = "MiB/s: 2^20 bytes of message values per second, as Kafka's perf tools count MB/s."
BENCH = Bench("client", "produce and consume throughput and produce latency of confluent-kafka against a fresh "
              "3-broker cluster", options, run)
