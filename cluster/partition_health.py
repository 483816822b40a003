"""Kafka's `kafka-topics --describe` report filters, pure: which partitions are under-replicated, unavailable,
under or at their min.insync.replicas. The rules are TopicCommand's (Kafka 2.8): under-replicated means fewer
in-sync replicas than assigned ones; unavailable means no leader or a leader that is not a live broker; under
min ISR counts a leaderless partition too."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cluster.admin import PartitionView

# the option (without dashes) → the rule; the options exclude one another, as in kafka-topics
REPORTS = ("under-replicated-partitions", "unavailable-partitions", "under-min-isr-partitions",
           "at-min-isr-partitions")


@dataclass(frozen=True)
class PartitionHealth:
    under_replicated: bool
    unavailable: bool
    under_min_isr: bool
    at_min_isr: bool

    def reported_by(self, report: str) -> bool:
        return getattr(self, report.removesuffix("-partitions").replace("-", "_"))


def health(partition: PartitionView, live_brokers: Iterable[int], min_isr: int) -> PartitionHealth:
    has_leader = partition.leader >= 0
    return PartitionHealth(
        under_replicated=len(partition.isr) < len(partition.replicas),
        unavailable=not has_leader or partition.leader not in set(live_brokers),
        under_min_isr=not has_leader or len(partition.isr) < min_isr,
        at_min_isr=len(partition.isr) == min_isr,
    )


def select(partitions: Iterable[PartitionView], report: str, live_brokers: Iterable[int],
           min_isr_of: dict[str, int]) -> list[PartitionView]:
    """The partitions a report names; ``min_isr_of`` holds each topic's effective min.insync.replicas."""
    if report not in REPORTS:
        raise ValueError(f"unknown report {report!r}; one of {', '.join(REPORTS)}")
    live = set(live_brokers)
    return [p for p in partitions if health(p, live, min_isr_of.get(p.topic, 1)).reported_by(report)]


def effective_min_isr(topic_config: dict[str, str], broker_default: str | None) -> int:
    """The topic's own min.insync.replicas, else the brokers' default, else Kafka's default of 1."""
    raw = topic_config.get("min.insync.replicas", broker_default or "1")
    try:
        return int(raw)
    except ValueError:
        return 1
