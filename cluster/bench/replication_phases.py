"""The cluster phases of ``kafkasim bench replication`` in order: (a) acks=all latency (here), (b) acks=all
against acks=1 throughput (``acks.py``), (c) follower catch-up (``catchup.py``)."""

from __future__ import annotations

from cluster.bench.acks import throughput_phase
from cluster.bench.catchup import catchup_phase
from cluster.bench.client_kit import LATENCY_PRODUCER, Deadline
from cluster.bench.latency import measure_latency
from cluster.bench.measure import percentile
from cluster.bench.replication import TOPIC_CONFIG
from cluster.bench.replication_run import ReplicationRun
from cluster.bench.report import Figure, Phase

LATENCY_TARGET_P50_MS = 5.0


def latency_phase(run: ReplicationRun) -> Phase:
    settings = run.settings
    deadline = Deadline("acks=all latency", settings.phase_timeout_s)
    run.create_topic("bench-latency-all", deadline)
    producer_config = {**LATENCY_PRODUCER, "acks": "all"}
    count = settings.latency_messages
    sample = measure_latency(run.bench, "bench-latency-all", producer_config, "latency-all", count,
                             settings.latency_rate, deadline)
    latencies = sample.latencies_ms
    label = f"(a) produce latency at {settings.latency_rate} msg/s, RF3, acks=all, linger.ms=0"
    figures = [Figure("acks_all_latency_p50", f"{label}, p50", percentile(latencies, 50), "ms",
                      LATENCY_TARGET_P50_MS, at_least=False),
               Figure("acks_all_latency_p99", f"{label}, p99", percentile(latencies, 99), "ms", None, False)]
    librdkafka = sample.librdkafka_percentiles()
    return Phase(
        "latency", f"{count:,} msgs sent at {sample.achieved_rate:,.0f} msg/s; max {max(latencies):.1f} ms; "
                   f"librdkafka's own p50/p99 {librdkafka.get('p50', float('nan')):.2f}/"
                   f"{librdkafka.get('p99', float('nan')):.2f} ms",
        sample.watch.elapsed_s, figures,
        {"messages": count, "achieved_rate": round(sample.achieved_rate, 1), "max_ms": round(max(latencies), 3),
         "librdkafka_latency_ms": librdkafka, "producer": producer_config, "topic_config": TOPIC_CONFIG},
        sample.watch.cpu_s)


PHASES = (("latency", latency_phase), ("produce", throughput_phase), ("catch-up", catchup_phase))
