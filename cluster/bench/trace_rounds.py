"""One produce round of ``kafkasim bench trace`` on a running cluster, and the clusters it runs on."""

from __future__ import annotations

from contextlib import AbstractContextManager

from confluent_kafka import Producer

from cluster.bench.client_kit import ClientBench, Deadline
from cluster.bench.cluster_run import temporary_cluster
from cluster.processes import ClusterLayout, ClusterSpec

# small produce requests (16 messages at most): the path where a trace event per request weighs most
PRODUCER = {"acks": "all", "linger.ms": 1, "batch.size": 16384, "compression.type": "none"}


def cluster_with(tracing: bool) -> AbstractContextManager[tuple[ClusterSpec, ClusterLayout]]:
    return temporary_cluster(3, "classroom", overrides={"kafkasim.trace.enable": "true" if tracing else "false"},
                             prefix=f"kafkasim-trace-{'on' if tracing else 'off'}-")


def one_round(bench: ClientBench, topic: str, messages: int) -> tuple[float, float]:
    """(messages per second, broker CPU seconds per 10,000 messages)"""
    deadline = Deadline(f"produce to {topic}", bench.settings.phase_timeout_s)
    bench.create_topic(topic, deadline, replication_factor=3)
    producer = Producer(bench.config(PRODUCER, "producer"))
    producer.list_topics(topic, timeout=30)
    watch = bench.produce(producer, topic, messages, deadline, "produced")
    return messages / watch.elapsed_s, sum(watch.cpu_s["brokers"].values()) / messages * 10_000
