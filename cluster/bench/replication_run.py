"""A running ``kafkasim bench replication``: its cluster and settings, and the waits its phases share."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from cluster.bench.client_kit import ClientBench, Deadline
from cluster.bench.cluster_run import cluster_state
from cluster.bench.replication import TOPIC_CONFIG, ReplicationBenchSettings
from cluster.processes import ClusterLayout

POLL_S = 0.01


def partition_log_bytes(logs_dir: Path, topic: str, partitions: int) -> dict[int, int]:
    """Bytes in each partition's segment files (``.log`` only: index files are preallocated)."""
    sizes = {}
    for partition in range(partitions):
        total = 0
        for segment in (logs_dir / f"{topic}-{partition}").glob("*.log"):
            try:
                total += segment.stat().st_size
            except FileNotFoundError:
                continue  # deleted between listing and stat (a truncation or a roll): not there any more
        sizes[partition] = total
    return sizes


class ReplicationRun:
    def __init__(self, bench: ClientBench, layout: ClusterLayout) -> None:
        self.bench, self.layout = bench, layout
        self.settings: ReplicationBenchSettings = bench.settings  # type: ignore[assignment]

    def create_topic(self, name: str, deadline: Deadline) -> None:
        self.bench.create_topic(name, deadline, self.settings.replication_factor, TOPIC_CONFIG)

    def state(self, topic: str):
        return cluster_state(self.bench.spec.zookeeper, [topic])

    def wait_for(self, condition: Callable[[], bool], deadline: Deadline, progress: Callable[[], str]) -> None:
        while not condition():
            deadline.check(progress)
            time.sleep(POLL_S)

    def wait_replicas_in_step(self, topic: str, deadline: Deadline) -> None:
        """Until every replica of ``topic`` holds the same bytes: followers append the leader's batches as they
        are, so equal sizes mean nothing is left to replicate."""
        logs = [self.layout.broker_dir(b.broker_id) / "logs" for b in self.bench.spec.brokers]

        def sizes() -> list[dict[int, int]]:
            return [partition_log_bytes(d, topic, self.settings.partitions) for d in logs]

        self.wait_for(lambda: all(s == sizes()[0] for s in sizes()), deadline,
                      lambda: f"the replicas of {topic} still differ: {sizes()}")
