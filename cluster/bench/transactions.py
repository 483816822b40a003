"""``kafkasim bench transactions``: what transactions cost a confluent-kafka (librdkafka) producer on a fresh
3-broker cluster (classroom profile), topics of 3 partitions with replication factor 3:

(a) idempotent: ``transactions x records`` 1 KiB values from an idempotent producer (enable.idempotence, so
    acks=all), timed until the last acknowledgement — the same producer without transactions;
(b) transactional: the same records in transactions of ``--records`` each (begin_transaction, produce,
    flush, commit_transaction), timed from the first begin to the last commit; and every commit_transaction()
    on its own: after the flush it is the EndTxn round trip, answered once PrepareCommit is replicated in
    __transaction_state (as Kafka does). The markers and CompleteCommit follow; until they are written the next
    transaction's AddPartitionsToTxn is answered CONCURRENT_TRANSACTIONS and librdkafka retries it, which the
    throughput of (b) includes.

Each phase has a deadline; one that cannot finish stops the run with what it got that far.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass

from cluster.bench.measure import percentile, throughput_mib_s
from cluster.bench.options import add_phase_timeout, positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report
from cluster.processes import ClusterError


@dataclass(frozen=True)
class TransactionsBenchSettings:
    transactions: int = 200          # transactions in (b); (a) produces as many records in all
    records: int = 100               # records per transaction
    phase_timeout_s: float = 180.0
    message_bytes: int = 1024
    partitions: int = 3
    replication_factor: int = 3
    brokers: int = 3

    @property
    def total_records(self) -> int:
        return self.transactions * self.records

    def check(self) -> None:
        for name in ("transactions", "records", "phase_timeout_s"):
            if getattr(self, name) <= 0:
                raise ClusterError(f"--{name.replace('_', '-').removesuffix('-s')} must be positive")


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transactions", type=positive_int, default=200,
                        help="transactions committed in the transactional phase (default 200)")
    parser.add_argument("--records", type=positive_int, default=100,
                        help="1 KiB records per transaction (default 100)")
    add_phase_timeout(parser, 180)


def settings_from(args: argparse.Namespace) -> TransactionsBenchSettings:
    return TransactionsBenchSettings(transactions=args.transactions, records=args.records,
                                     phase_timeout_s=float(args.phase_timeout))


def idempotent_phase(settings: TransactionsBenchSettings, elapsed_s: float, details: dict,
                     cpu_s: dict) -> Phase:
    count = settings.total_records
    rate = throughput_mib_s(count * settings.message_bytes, elapsed_s)
    return Phase("idempotent", f"{count:,} x {settings.message_bytes} B, idempotent, acks=all, in {elapsed_s:.2f} s "
                               f"({count / elapsed_s:,.0f} msg/s)", elapsed_s,
                 [Figure("idempotent_mib_s", f"(a) idempotent producer, 1 KiB values, {settings.partitions} "
                                             f"partitions, RF{settings.replication_factor}", rate, "MiB/s")],
                 details, cpu_s)


def transactional_phase(settings: TransactionsBenchSettings, elapsed_s: float, commits_s: list[float],
                        idempotent_mib_s: float | None, details: dict, cpu_s: dict) -> Phase:
    """The figures of (b): throughput, its ratio to (a)'s, transactions per second and commit latency."""
    count = len(commits_s) * settings.records
    rate = throughput_mib_s(count * settings.message_bytes, elapsed_s)
    commits_ms = [c * 1000 for c in commits_s]
    figures = [Figure("transactional_mib_s", f"(b) transactional producer, {settings.records} records per "
                                             "transaction", rate, "MiB/s")]
    if idempotent_mib_s:
        figures.append(Figure("transactional_over_idempotent", "  ... relative to (a)", rate / idempotent_mib_s, "x"))
    figures += [Figure("transactions_per_s", "  transactions committed per second", len(commits_s) / elapsed_s, "/s"),
                Figure("commit_p50_ms", "  commit_transaction() after flush, p50", percentile(commits_ms, 50), "ms"),
                Figure("commit_p99_ms", "  commit_transaction() after flush, p99", percentile(commits_ms, 99), "ms")]
    return Phase("transactional", f"{len(commits_s):,} transactions x {settings.records} x {settings.message_bytes} B "
                                  f"in {elapsed_s:.2f} s ({count / elapsed_s:,.0f} msg/s), commits "
                                  f"{sum(commits_s):.2f} s of it", elapsed_s, figures,
                 {**details, "commit_ms_max": round(max(commits_ms), 3)}, cpu_s)


def run(args: argparse.Namespace, progress: Progress) -> Report:
    from cluster.bench.client_kit import CLIENT_VERSION, LIBRDKAFKA_VERSION, PROFILE, ClientBench, ClientLog
    from cluster.bench.cluster_run import temporary_cluster
    from cluster.bench.process_facts import CpuMeter
    from cluster.bench.transactions_phases import run_both

    settings = settings_from(args)
    settings.check()
    progress.say(f"starting a {settings.brokers}-broker cluster ({PROFILE} profile) in a temporary directory ...")
    with temporary_cluster(settings.brokers, PROFILE) as (spec, layout):
        title = (f"kafkasim transactions benchmark: {settings.brokers} brokers ({PROFILE} profile), "
                 f"confluent-kafka {CLIENT_VERSION} / librdkafka {LIBRDKAFKA_VERSION}, "
                 f"{os.cpu_count()} CPUs shared by clients and brokers")
        bench = ClientBench(spec, settings, CpuMeter(spec, layout), ClientLog(), progress)
        phases, error = run_both(bench, layout, spec)
    return Report("transactions", title, {**asdict(settings), "profile": PROFILE, "cpus": os.cpu_count(),
                                          "confluent_kafka": CLIENT_VERSION, "librdkafka": LIBRDKAFKA_VERSION},
                  phases, [MIB_NOTE], error)


MIB_NOTE = "MiB/s: 2^20 bytes of record values per second, as Kafka's perf tools count MB/s."
BENCH = Bench("transactions", "transactional produce throughput against the same idempotent producer, and "
              "commit_transaction() latency p50/p99 (confluent-kafka, fresh 3-broker cluster)", options, run)
