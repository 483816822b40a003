"""The Prometheus text of a ``BrokerSnapshot`` (version 0.0.4 of the exposition format).

Written here rather than through prometheus_client's ``generate_latest``: a broker with 100 partitions
reports about 1,300 samples, and the library's per-sample validation and escaping took most of the 20 ms a
scrape may cost on the 2-core test machine; this builds each partition's labels once and joins strings. The
output is checked with prometheus_client's own parser in the tests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker.metrics import catalogue as c
from broker.metrics.catalogue import MetricDef
from broker.metrics.names import PERCENTILES, Kind, histogram_count_name, quantile_label, request_label
from broker.metrics.reservoir import quantiles
from broker.metrics.snapshot import BrokerSnapshot, RequestTimes

_QUANTILES = [p / 100 for p in PERCENTILES]
_QUANTILE_LABELS = [quantile_label(p) for p in PERCENTILES]
_TYPES = {Kind.GAUGE: "gauge", Kind.METER: "counter", Kind.HISTOGRAM: "summary"}


def label_value(text: str) -> str:
    """The exposition format's escaping of a label value: backslash, double quote and newline."""
    if "\\" in text or '"' in text or "\n" in text:
        return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return text


def labels_of(**labels: str) -> str:
    """Rendered once and reused by every family of a partition: ``topic="a",partition="0"``."""
    return ",".join(f'{name}="{label_value(value)}"' for name, value in labels.items())


def number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


@dataclass
class Family:
    definition: MetricDef
    samples: list[tuple[str, str, float]] = field(default_factory=list)  # (sample name, rendered labels, value)

    def add(self, labels: str, value: float, name: str | None = None) -> None:
        self.samples.append((name or self.definition.name, labels, value))

    def render(self, out: list[str]) -> None:
        d = self.definition
        out.append(f"# HELP {d.name} {d.help}\n# TYPE {d.name} {_TYPES[d.kind]}\n")
        out.extend(f"{name}{{{labels}}} {number(value)}\n" if labels else f"{name} {number(value)}\n"
                   for name, labels, value in self.samples)


def render(families: Iterable[Family]) -> str:
    out: list[str] = []
    for family in families:
        family.render(out)
    return "".join(out)


def _one(definition: MetricDef, value: float) -> Family:
    return Family(definition, [(definition.name, "", value)])


def _per_topic(definition: MetricDef, counts: Counter) -> Family:
    """Kafka's all-topics meter (no label) and one per topic."""
    family = _one(definition, sum(counts.values()))
    for topic, value in sorted(counts.items()):
        family.add(labels_of(topic=topic), value)
    return family


class QuantileCache:
    """Quantiles of a histogram are sorted out once per new sample set: a histogram no request touched since
    the last scrape (same count) keeps its figures."""

    def __init__(self) -> None:
        self._cached: dict[tuple[str, str], tuple[int, list[float]]] = {}

    def quantiles(self, key: tuple[str, str], times: RequestTimes) -> list[float]:
        cached = self._cached.get(key)
        if cached is not None and cached[0] == times.count:
            return cached[1]
        figures = quantiles(times.values, _QUANTILES)
        self._cached[key] = (times.count, figures)
        return figures


def _histograms(snapshot: BrokerSnapshot, cache: QuantileCache) -> list[Family]:
    """A Yammer histogram as the exporter shows it: quantile gauges and a _count, no _sum."""
    result = []
    for metric, definition in c.REQUEST_TIMES.items():
        family = Family(definition)
        count_name = histogram_count_name(definition.name)
        for (name, api), times in sorted(snapshot.request_times.items(), key=lambda item: item[0][1]):
            if name != metric:
                continue
            request = labels_of(request=request_label(api))
            for label, value in zip(_QUANTILE_LABELS, cache.quantiles((name, api), times), strict=True):
                family.add(f'{request},quantile="{label}"', value)
            family.add(request, times.count, count_name)
        result.append(family)
    return result


def families(snapshot: BrokerSnapshot, cache: QuantileCache | None = None) -> list[Family]:
    s = snapshot
    parts = sorted(s.partitions, key=lambda p: (p.topic, p.partition))
    leaders = [p for p in parts if p.is_leader]
    result = [
        _one(c.UNDER_REPLICATED, sum(p.under_replicated for p in parts)),
        _one(c.PARTITION_COUNT, len(parts)),
        _one(c.LEADER_COUNT, len(leaders)),
        _one(c.OFFLINE_REPLICAS, s.offline_replicas),
        _one(c.UNDER_MIN_ISR, sum(p.under_min_isr for p in parts)),
        _one(c.AT_MIN_ISR, sum(p.at_min_isr for p in parts)),
        _one(c.ISR_SHRINKS, s.isr.shrinks),
        _one(c.ISR_EXPANDS, s.isr.expands),
        _one(c.FAILED_ISR_UPDATES, s.isr.failed_updates),
        _one(c.ACTIVE_CONTROLLER, 1 if s.active_controller else 0),
        _one(c.OFFLINE_PARTITIONS, s.offline_partitions),
        _one(c.PREFERRED_IMBALANCE, s.preferred_replica_imbalance),
        _one(c.GLOBAL_TOPICS, s.global_topic_count),
        _one(c.GLOBAL_PARTITIONS, s.global_partition_count),
        _per_topic(c.BYTES_IN, s.topics.bytes_in),
        _per_topic(c.MESSAGES_IN, s.topics.messages_in),
        _per_topic(c.BYTES_OUT, s.topics.bytes_out),
        _per_topic(c.TOTAL_PRODUCE, s.topics.total_produce_requests),
        _per_topic(c.FAILED_PRODUCE, s.topics.failed_produce_requests),
        _per_topic(c.TOTAL_FETCH, s.topics.total_fetch_requests),
        _per_topic(c.FAILED_FETCH, s.topics.failed_fetch_requests),
        _one(c.REPLICATION_BYTES_OUT, s.topics.replication_bytes_out),
        Family(c.REQUESTS, [(c.REQUESTS.name, labels_of(request=request_label(api), version=str(version)), n)
                            for (api, version), n in sorted(s.requests.items())]),
        Family(c.ERRORS, [(c.ERRORS.name, labels_of(request=request_label(api), error=error), n)
                          for (api, error), n in sorted(s.errors.items())]),
        *_histograms(s, cache or QuantileCache()),
        _one(c.REQUEST_QUEUE_SIZE, s.request_queue_size),
        Family(c.PURGATORY_SIZE, [(c.PURGATORY_SIZE.name, labels_of(delayedOperation=name), n)
                                  for name, n in sorted(s.purgatory_size.items())]),
        Family(c.NUM_DELAYED, [(c.NUM_DELAYED.name, labels_of(delayedOperation=name), n)
                               for name, n in sorted(s.purgatory_delayed.items())]),
        # Kafka's replica fetcher manager is registered with clientId "Replica"
        Family(c.MAX_LAG, [(c.MAX_LAG.name, labels_of(clientId="Replica"), s.replica_fetcher_max_lag)]),
    ]
    result += _cleaner(s)
    labels = [labels_of(topic=p.topic, partition=str(p.partition)) for p in parts]

    def per_partition(definition: MetricDef, value: Callable) -> Family:
        name = definition.name
        return Family(definition, [(name, tp, value(p)) for tp, p in zip(labels, parts, strict=True)])

    lag = Family(c.FOLLOWER_LAG)
    for tp, p in zip(labels, parts, strict=True):
        for replica, leo in p.follower_log_end_offsets:
            if leo >= 0:  # a follower not heard from in this leader epoch has no LEO yet
                lag.add(f'{tp},replica="{replica}"', max(0, p.log_end_offset - leo))
    result += [
        per_partition(c.LOG_END_OFFSET, lambda p: p.log_end_offset),
        per_partition(c.LOG_START_OFFSET, lambda p: p.log_start_offset),
        per_partition(c.LOG_SIZE, lambda p: p.size_bytes),
        per_partition(c.LOG_SEGMENTS, lambda p: p.num_segments),
        per_partition(c.PARTITION_UNDER_REPLICATED, lambda p: int(p.under_replicated)),
        per_partition(c.PARTITION_ISR_COUNT, lambda p: len(p.isr) if p.is_leader else 0),
        per_partition(c.PARTITION_REPLICAS_COUNT, lambda p: len(p.replicas) if p.is_leader else 0),
        per_partition(c.PARTITION_UNDER_MIN_ISR, lambda p: int(p.under_min_isr)),
        per_partition(c.PARTITION_AT_MIN_ISR, lambda p: int(p.at_min_isr)),
        per_partition(c.HIGH_WATERMARK, lambda p: p.high_watermark),
        lag,
        _one(c.BROKER_EPOCH, s.broker_epoch),
        _one(c.CONTROLLER_EPOCH, s.controller_epoch),
    ]
    return result


def _cleaner(snapshot: BrokerSnapshot) -> list[Family]:
    """LogCleaner's and LogCleanerManager's gauges; no samples when the cleaner does not run (Kafka does not create
    it then)."""
    m = snapshot.cleaner
    if m is None:
        return [Family(definition) for definition in c.CLEANER]
    per_dir = sorted(m.uncleanable.items())
    return [
        _one(c.CLEANER_BUFFER, m.max_buffer_utilization_percent),
        _one(c.CLEANER_RECOPY, m.cleaner_recopy_percent),
        _one(c.CLEANER_MAX_TIME, m.max_clean_time_secs),
        _one(c.CLEANER_MAX_DELAY, m.max_compaction_delay_secs),
        _one(c.CLEANER_DEAD_THREADS, m.dead_thread_count),
        _one(c.CLEANER_MAX_DIRTY, m.max_dirty_percent),
        _one(c.CLEANER_SINCE_RUN, m.time_since_last_run_ms),
        Family(c.UNCLEANABLE_PARTITIONS, [(c.UNCLEANABLE_PARTITIONS.name, labels_of(logDirectory=d), n)
                                          for d, (n, _) in per_dir]),
        Family(c.UNCLEANABLE_BYTES, [(c.UNCLEANABLE_BYTES.name, labels_of(logDirectory=d), size)
                                     for d, (_, size) in per_dir]),
    ]


class BrokerExposition:
    """One scrape: a snapshot (taken on the loop by ``take_snapshot``), rendered on the caller's thread."""

    def __init__(self, take_snapshot: Callable[[], BrokerSnapshot]) -> None:
        self._take_snapshot = take_snapshot
        self._quantiles = QuantileCache()

    def text(self) -> str:
        return render(families(self._take_snapshot(), self._quantiles))
