"""What the group tests share: producing to chosen partitions, and reading a group's committed offsets and
coordinator with confluent-kafka's AdminClient (OffsetFetch and DescribeGroups against the brokers). The
consumers themselves run as separate OS processes (cluster/group_consumer.py) so they can be killed with -9."""

from __future__ import annotations

import threading

from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0, "produce did not finish"


def committed_offsets(admin: AdminClient, group: str) -> dict[int, int]:
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)
    result = futures[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def coordinator_of(admin: AdminClient, group: str) -> int:
    description = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return description.coordinator.id


class CommitWatcher:
    """Reads the group's committed offsets in a loop and records every time one moved backwards."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.group = group
        self.highest: dict[int, int] = {}
        self.backwards: list[tuple[int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                offsets = committed_offsets(self.admin, self.group)
            except Exception:
                continue  # coordinator moving or loading: try again
            for partition, offset in offsets.items():
                if offset < self.highest.get(partition, -1):
                    self.backwards.append((partition, self.highest[partition], offset))
                self.highest[partition] = max(offset, self.highest.get(partition, -1))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
