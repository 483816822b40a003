"""Produce and fetch rates. Two sources: the leaders' LEO deltas between two snapshots (messages/s produced,
needs nothing but DescribeBroker), and, where brokers serve Prometheus metrics (``metrics_port`` > 0), Kafka's
BrokerTopicMetrics counters (bytes in and out, messages in) scraped and differenced. A broker without metrics,
or one that refuses the scrape, just has no metric-based rate."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = {
    "kafka_server_brokertopicmetrics_bytesin": "bytes_in",
    "kafka_server_brokertopicmetrics_bytesout": "bytes_out",
    "kafka_server_brokertopicmetrics_messagesin": "messages_in",
}
SCRAPE_TIMEOUT_S = 0.5


def leader_offsets(snapshot: dict) -> dict[str, int]:
    """partition name -> its leader's LEO, for every partition whose leader answered."""
    found = {}
    for p in snapshot["partitions"]:
        leo = p["leo"].get(str(p["leader"])) if p["leader"] >= 0 else None
        if leo is not None and leo >= 0:
            found[p["name"]] = leo
    return found


@dataclass
class LeoRates:
    """Messages/s per topic from the leaders' LEO: one offset per record. A partition whose leader changed
    between two polls counts from the new leader's LEO on (a truncation never makes a rate negative)."""

    _last: tuple[float, dict[str, int]] | None = None
    per_topic: dict[str, float] = field(default_factory=dict)

    def update(self, now_s: float, offsets: dict[str, int]) -> dict[str, float]:
        if self._last is not None and now_s > self._last[0]:
            elapsed = now_s - self._last[0]
            rates: dict[str, float] = {}
            for name, offset in offsets.items():
                before = self._last[1].get(name)
                topic = name.rpartition("-")[0]
                rates.setdefault(topic, 0.0)
                if before is not None and offset > before:
                    rates[topic] += (offset - before) / elapsed
            self.per_topic = rates
        self._last = (now_s, offsets)
        return self.per_topic


@dataclass
class CommitRates:
    """Messages/s each consumer group consumed, from its committed offsets between two group polls: the fetch side
    without metrics (what a group commits it has fetched)."""

    _last: dict[str, tuple[float, int]] = field(default_factory=dict)
    per_group: dict[str, float] = field(default_factory=dict)

    def update(self, now_s: float, groups: list[dict]) -> dict[str, float]:
        rates = {}
        for group in groups:
            if "partitions" not in group:
                continue
            committed = sum(p["committed"] for p in group["partitions"] if p["committed"] is not None)
            last = self._last.get(group["group"])
            self._last[group["group"]] = (now_s, committed)
            if last is not None and now_s > last[0]:
                rates[group["group"]] = max(0, committed - last[1]) / (now_s - last[0])
        self.per_group = rates
        return rates


def parse_counters(text: str) -> dict[tuple[str, str], float]:
    """(counter, topic or "" for all topics) -> value, from a Prometheus text exposition."""
    values: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        # by sample name: the parser files a counter's `_total` samples under its own family or under one named
        # with `_total`, depending on the version and on the TYPE line
        for sample in family.samples:
            name = COUNTERS.get(sample.name.removesuffix("_total"))
            if name is not None and not sample.name.endswith(("_created", "_bucket")):
                values[(name, sample.labels.get("topic", ""))] = sample.value
    return values


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str | None:
    """Blocking: call it in a thread. None when the broker has no metrics or does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read().decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None


@dataclass
class MetricRates:
    """Per-broker counters, differenced between scrapes into rates per second."""

    _last: dict[int, tuple[float, dict[tuple[str, str], float]]] = field(default_factory=dict)
    per_broker: dict[int, dict[str, float]] = field(default_factory=dict)

    def update(self, broker_id: int, now_s: float, counters: dict[tuple[str, str], float] | None) -> None:
        if counters is None:
            self._last.pop(broker_id, None)
            self.per_broker.pop(broker_id, None)
            return
        last = self._last.get(broker_id)
        self._last[broker_id] = (now_s, counters)
        if last is None or now_s <= last[0]:
            return
        elapsed = now_s - last[0]
        rates = {}
        for (name, topic), value in counters.items():
            if topic:
                continue
            before = last[1].get((name, topic))
            if before is not None and value >= before:   # a restarted broker's counters start again at 0
                rates[name] = (value - before) / elapsed
        self.per_broker[broker_id] = rates

    def totals(self) -> dict[str, float]:
        return _sum(self.per_broker.values())


def _sum(rates: Iterable[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for one in rates:
        for name, value in one.items():
            total[name] = total.get(name, 0.0) + value
    return total
