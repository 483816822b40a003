"""``kafkasim bench metrics``: what a Prometheus scrape of a broker costs.

A temporary 3-broker cluster (classroom profile) with one topic of ``--partitions`` partitions on 3 replicas
gets some produce traffic (so every per-topic meter and request histogram has samples), then each broker's
``/metrics`` is fetched ``--scrapes`` times, one after another, each on a new connection as Prometheus's
first scrape would. The figures are the median and 99th-percentile scrape time per broker against the
20 ms target, and the response size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import urllib.request

from cluster.bench.options import positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report

TARGET_MS = 20.0
TOPIC = "metrics-bench"
WARM_UP_MESSAGES = 5_000


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scrapes", type=positive_int, default=200,
                        help="scrapes of each broker (default 200)")
    parser.add_argument("--partitions", type=positive_int, default=100,
                        help="partitions of the topic, on 3 replicas (default 100)")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _scrape(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as response:
        size = len(response.read())
    return (time.perf_counter() - started) * 1000, size


def _produce(bootstrap: str, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(WARM_UP_MESSAGES):
        producer.produce(TOPIC, value=b"x" * 100, partition=i % partitions)
        producer.poll(0)
    producer.flush(60)


def run(args: argparse.Namespace, progress: Progress) -> Report:
    from cluster.bench.cluster_run import cluster_state, create_topic_in_zookeeper, poll_until, temporary_cluster
    from cluster.processes import ClusterError, metrics_url

    phases = []
    import psutil

    loads = []
    with temporary_cluster(say=lambda _: None, prefix="kafkasim-bench-metrics-") as (spec, layout):
        progress.say(f"3 brokers up; creating {TOPIC} with {args.partitions} partitions on 3 replicas ...")
        create_topic_in_zookeeper(spec.zookeeper, TOPIC, args.partitions, 3)
        poll_until(lambda: all(p.leader >= 0 and len(p.isr) == 3 for p in cluster_state(spec.zookeeper, [TOPIC])
                               .partitions) and len(cluster_state(spec.zookeeper, [TOPIC]).partitions)
                   == args.partitions, 120, "every partition to have a leader and a full ISR", interval_s=0.2)
        progress.say(f"producing {WARM_UP_MESSAGES:,} messages so every meter and histogram has samples ...")
        _produce(spec.bootstrap_servers, args.partitions)
        for broker in spec.brokers:
            url = metrics_url(broker)
            if url is None:
                raise ClusterError("kafkasim up gave the brokers no metrics port")
            _scrape(url)  # the first scrape imports and warms up; Prometheus keeps scraping the same process
            process = psutil.Process(layout.broker_pid(broker.broker_id).read())
            cpu_before = sum(process.cpu_times()[:2])
            started = time.perf_counter()
            times, sizes = [], []
            for _ in range(args.scrapes):
                elapsed_ms, size = _scrape(url)
                times.append(elapsed_ms)
                sizes.append(size)
            # the broker's CPU per scrape: what a scrape costs it, whatever else the machine is doing
            cpu_ms = (sum(process.cpu_times()[:2]) - cpu_before) * 1000 / args.scrapes
            loads.append(os.getloadavg()[0])
            p50, p99 = statistics.median(times), _percentile(times, 0.99)
            progress.say(f"broker {broker.broker_id}: p50 {p50:.1f} ms, p99 {p99:.1f} ms, {cpu_ms:.1f} ms CPU, "
                         f"{sizes[-1] / 1024:.0f} KiB")
            b = broker.broker_id
            figures = [
                Figure(f"broker_{b}_scrape_p50_ms", f"broker {b}: scrape time, median", p50, "ms", TARGET_MS,
                       at_least=False),
                Figure(f"broker_{b}_scrape_p99_ms", f"broker {b}: scrape time, 99th percentile", p99, "ms",
                       TARGET_MS, at_least=False),
                Figure(f"broker_{b}_cpu_ms_per_scrape", f"broker {b}: its CPU time per scrape", cpu_ms, "ms"),
                Figure(f"broker_{b}_response_kib", f"broker {b}: response size", sizes[-1] / 1024, "KiB"),
            ]
            phases.append(Phase(f"broker-{b}", f"{args.scrapes} scrapes of {url}: max {max(times):.1f} ms",
                                time.perf_counter() - started, figures,
                                {"url": url, "times_ms": [round(t, 3) for t in times], "bytes": sizes[-1]}))
    return Report("metrics", f"kafkasim metrics benchmark: /metrics of 3 brokers hosting {args.partitions} "
                  "partitions on 3 replicas (classroom profile)",
                  {"scrapes": args.scrapes, "partitions": args.partitions, "warm_up_messages": WARM_UP_MESSAGES},
                  phases,
                  ["a scrape is timed from the request to the last byte, on a new connection each time; the "
                   "broker copies its state on its event loop and formats it on the HTTP server's thread",
                   "the cluster is idle while scraped: under load a scrape also waits for the loop's turn",
                   f"load average (1 min) after each broker's scrapes: {', '.join(f'{x:.1f}' for x in loads)} on "
                   f"{os.cpu_count()} CPUs; a p99 far above the CPU time per scrape is time spent waiting for a CPU"])


BENCH = Bench("metrics", "what a Prometheus scrape costs: /metrics of a 3-broker cluster hosting 100 partitions, "
              "p50/p99 per broker and response size", options, run)
