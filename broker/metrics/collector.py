"""Prometheus families from a ``BrokerSnapshot`` (pure), and the prometheus_client Collector that takes one
snapshot per scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from collections import Counter

from prometheus_client.core import Metric

from broker.metrics import catalogue as c
from broker.metrics.catalogue import MetricDef
from broker.metrics.names import PERCENTILES, Kind, histogram_count_name, quantile_label, request_label
from broker.metrics.reservoir import quantiles
from broker.metrics.snapshot import BrokerSnapshot

Labels = dict[str, str]
_QUANTILES = [p / 100 for p in PERCENTILES]
_QUANTILE_LABELS = [quantile_label(p) for p in PERCENTILES]


def _family(definition: MetricDef, samples: Iterable[tuple[Labels, float]]) -> Metric:
    if definition.kind is Kind.METER:
        family = Metric(definition.name.removesuffix("_total"), definition.help, "counter")
    else:
        family = Metric(definition.name, definition.help, "gauge")
    for labels, value in samples:
        family.add_sample(definition.name, labels, value)
    return family


def _one(definition: MetricDef, value: float) -> Metric:
    return _family(definition, [({}, value)])


def _per_topic(definition: MetricDef, counts: Counter) -> Metric:
    """Kafka's all-topics meter (no label) and one per topic."""
    samples = [({}, sum(counts.values()))]
    samples += [({"topic": topic}, value) for topic, value in sorted(counts.items())]
    return _family(definition, samples)


def _histogram(definition: MetricDef, by_request: dict[str, tuple[int, list[float]]]) -> Metric:
    """A Yammer histogram as the exporter shows it: quantile gauges and a _count, no _sum."""
    family = Metric(definition.name, definition.help, "summary")
    count_name = histogram_count_name(definition.name)
    for request, (count, values) in sorted(by_request.items()):
        for label, value in zip(_QUANTILE_LABELS, quantiles(values, _QUANTILES), strict=True):
            family.add_sample(definition.name, {"request": request_label(request), "quantile": label}, value)
        family.add_sample(count_name, {"request": request_label(request)}, count)
    return family


def families(snapshot: BrokerSnapshot) -> list[Metric]:
    s = snapshot
    parts = s.partitions
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
        _family(c.REQUESTS, [({"request": request_label(api), "version": str(version)}, n)
                             for (api, version), n in sorted(s.requests.items())]),
        _family(c.ERRORS, [({"request": request_label(api), "error": error}, n)
                           for (api, error), n in sorted(s.errors.items())]),
    ]
    for metric, definition in c.REQUEST_TIMES.items():
        by_request = {api: (times.count, times.values) for (name, api), times in s.request_times.items()
                      if name == metric}
        result.append(_histogram(definition, by_request))
    result += [
        _one(c.REQUEST_QUEUE_SIZE, s.request_queue_size),
        _family(c.PURGATORY_SIZE, [({"delayedOperation": name}, n) for name, n in sorted(s.purgatory_size.items())]),
        _family(c.NUM_DELAYED, [({"delayedOperation": name}, n) for name, n in sorted(s.purgatory_delayed.items())]),
    ]
    ordered = sorted(parts, key=lambda p: (p.topic, p.partition))

    def per_partition(definition: MetricDef, value: Callable) -> Metric:
        return _family(definition, [({"topic": p.topic, "partition": str(p.partition)}, value(p)) for p in ordered])

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
        _family(c.FOLLOWER_LAG, [
            ({"topic": p.topic, "partition": str(p.partition), "replica": str(replica)},
             max(0, p.log_end_offset - leo))
            for p in ordered for replica, leo in p.follower_log_end_offsets if leo >= 0]),
        _one(c.BROKER_EPOCH, s.broker_epoch),
        _one(c.CONTROLLER_EPOCH, s.controller_epoch),
    ]
    return result


class BrokerCollector:
    """Registered in the broker's own registry; prometheus_client calls ``collect`` from its HTTP thread."""

    def __init__(self, take_snapshot: Callable[[], BrokerSnapshot]) -> None:
        self._take_snapshot = take_snapshot

    def collect(self) -> Iterator[Metric]:
        yield from families(self._take_snapshot())
