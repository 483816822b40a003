"""Kafka's BrokerTopicStats and the ReplicaManager's ISR meters, as plain running totals.

Only the broker's event loop adds to them; the scrape reads a copy taken on the loop (see ``snapshot.py``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class BrokerTopicStats:
    """``kafka.server:type=BrokerTopicMetrics``: per topic, and for all topics together (no topic label).

    As in Kafka (ReplicaManager.appendToLocalLog and KafkaApis' fetch callback): bytes in are the size of the
    record batches a leader appended for producers, as received; messages in the records in them; bytes out
    the record bytes sent to consumers. Bytes sent to followers are counted apart, as replication bytes out."""

    bytes_in: Counter = field(default_factory=Counter)
    messages_in: Counter = field(default_factory=Counter)
    bytes_out: Counter = field(default_factory=Counter)
    total_produce_requests: Counter = field(default_factory=Counter)
    failed_produce_requests: Counter = field(default_factory=Counter)
    total_fetch_requests: Counter = field(default_factory=Counter)
    failed_fetch_requests: Counter = field(default_factory=Counter)
    replication_bytes_out: int = 0  # record bytes sent to followers (ReplicationBytesOutPerSec)

    def record_append(self, topic: str, size: int, messages: int) -> None:
        self.bytes_in[topic] += size
        self.messages_in[topic] += messages

    def record_produce(self, topic: str, failed: bool) -> None:
        self.total_produce_requests[topic] += 1
        if failed:
            self.failed_produce_requests[topic] += 1

    def record_fetch(self, topic: str, size: int, failed: bool) -> None:
        self.total_fetch_requests[topic] += 1
        self.bytes_out[topic] += size
        if failed:
            self.failed_fetch_requests[topic] += 1

    def copy(self) -> BrokerTopicStats:
        return BrokerTopicStats(Counter(self.bytes_in), Counter(self.messages_in), Counter(self.bytes_out),
                                Counter(self.total_produce_requests), Counter(self.failed_produce_requests),
                                Counter(self.total_fetch_requests), Counter(self.failed_fetch_requests),
                                self.replication_bytes_out)


@dataclass
class IsrStats:
    """``kafka.server:type=ReplicaManager,name=IsrShrinksPerSec|IsrExpandsPerSec|FailedIsrUpdatesPerSec``:
    a leader's own ISR changes once ZooKeeper took them, and its refused writes (a stale zkVersion)."""

    shrinks: int = 0
    expands: int = 0
    failed_updates: int = 0
