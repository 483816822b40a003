"""The JMX exporter's naming rules and the collector over hand-made broker state: no processes."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.log.cleaner.log_cleaner import CleanerMetrics
from broker.metrics import catalogue
from broker.metrics.collector import BrokerExposition, families, label_value, render
from broker.metrics.names import PERCENTILES, Kind, exporter_name, quantile_label, request_label
from broker.metrics.reservoir import SlidingReservoir, quantiles
from broker.metrics.snapshot import BrokerSnapshot, PartitionSample, RequestTimes
from broker.metrics.topic_stats import BrokerTopicStats, IsrStats

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_a_meter_loses_per_sec_and_counts_as_total():
    assert exporter_name("kafka.server", "ReplicaManager", "IsrShrinksPerSec", Kind.METER) == \
        "kafka_server_replicamanager_isrshrinks_total"
    assert exporter_name("kafka.server", "BrokerTopicMetrics", "BytesInPerSec", Kind.METER) == \
        "kafka_server_brokertopicmetrics_bytesin_total"
    assert exporter_name("kafka.network", "RequestMetrics", "RequestsPerSec", Kind.METER) == \
        "kafka_network_requestmetrics_requests_total"


def test_gauges_and_histograms_keep_their_lowercased_name():
    assert exporter_name("kafka.controller", "KafkaController", "ActiveControllerCount", Kind.GAUGE) == \
        "kafka_controller_kafkacontroller_activecontrollercount"
    assert exporter_name("kafka.network", "RequestMetrics", "TotalTimeMs", Kind.HISTOGRAM) == \
        "kafka_network_requestmetrics_totaltimems"
    assert exporter_name("kafka.log", "LogCleanerManager", "max-dirty-percent", Kind.GAUGE) == \
        "kafka_log_logcleanermanager_max_dirty_percent"


def test_a_name_outside_kafka_domains_is_refused():
    with pytest.raises(ValueError):
        exporter_name("java.lang", "Memory", "HeapMemoryUsage", Kind.GAUGE)


def test_percentiles_become_the_exporters_quantile_labels():
    assert [quantile_label(p) for p in PERCENTILES] == ["0.50", "0.75", "0.95", "0.98", "0.99", "0.999"]


def test_request_labels_are_kafkas_api_names():
    assert request_label("API_VERSIONS") == "ApiVersions"
    assert request_label("OFFSET_FOR_LEADER_EPOCH") == "OffsetForLeaderEpoch"
    assert request_label("999") == "999"


def test_quantiles_interpolate_as_yammer_does_and_are_zero_without_samples():
    assert quantiles([], [0.5, 0.99]) == [0.0, 0.0]
    assert quantiles(range(1, 101), [0.5, 0.99, 0.999]) == [50.5, 99.99, 100]
    assert quantiles([7.0], [0.5]) == [7.0]


def test_the_reservoir_counts_everything_but_keeps_only_the_latest_samples():
    reservoir = SlidingReservoir(size=3)
    for value in range(10):
        reservoir.update(value)
    assert reservoir.count == 10
    assert reservoir.values() == [7, 8, 9]


def partition(topic: str, index: int, *, leader: bool, isr: tuple[int, ...], followers=()) -> PartitionSample:
    return PartitionSample(topic=topic, partition=index, is_leader=leader, log_start_offset=0, log_end_offset=10,
                           high_watermark=8, size_bytes=700, num_segments=1, replicas=(1, 2, 3), isr=isr,
                           min_insync_replicas=2, follower_log_end_offsets=followers)


def hand_made() -> BrokerSnapshot:
    topics = BrokerTopicStats()
    topics.record_append("a", 100, 3)
    topics.record_append("b", 50, 1)
    times = [float(v) for v in range(1, 101)]
    return BrokerSnapshot(
        broker_id=1, broker_epoch=42, controller_epoch=7, active_controller=True, offline_partitions=2,
        partitions=[partition("a", 0, leader=True, isr=(1, 2), followers=((2, 10), (3, 4))),
                    partition("a", 1, leader=True, isr=(1, 2, 3), followers=((2, 10), (3, -1))),
                    partition("b", 0, leader=False, isr=())],
        isr=IsrStats(shrinks=4, expands=3), topics=topics,
        requests={("PRODUCE", 7): 5}, errors={("PRODUCE", "NONE"): 4, ("PRODUCE", "NOT_LEADER_OR_FOLLOWER"): 1},
        request_times={("TotalTimeMs", "PRODUCE"): RequestTimes(100, times)},
        purgatory_size={"Produce": 1, "Fetch": 3}, purgatory_delayed={"Produce": 1, "Fetch": 2},
        replica_fetcher_max_lag=5,
        cleaner=CleanerMetrics(max_buffer_utilization_percent=12, cleaner_recopy_percent=5, max_clean_time_secs=3,
                               max_compaction_delay_secs=0, dead_thread_count=0, max_dirty_percent=61,
                               time_since_last_run_ms=250, uncleanable={"/data/a": (0, 0), "/data/b": (1, 4096)}))


def scrape(snapshot: BrokerSnapshot) -> dict[tuple[str, frozenset], float]:
    text = BrokerExposition(lambda: snapshot).text()  # prometheus_client's parser reads it
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_collector_reports_the_replica_manager_and_controller_view():
    samples = scrape(hand_made())
    assert samples[("kafka_server_replicamanager_underreplicatedpartitions", frozenset())] == 1
    assert samples[("kafka_server_replicamanager_partitioncount", frozenset())] == 3
    assert samples[("kafka_server_replicamanager_leadercount", frozenset())] == 2
    assert samples[("kafka_server_replicamanager_atminisrpartitioncount", frozenset())] == 1
    assert samples[("kafka_server_replicamanager_isrshrinks_total", frozenset())] == 4
    assert samples[("kafka_server_replicamanager_isrexpands_total", frozenset())] == 3
    assert samples[("kafka_controller_kafkacontroller_activecontrollercount", frozenset())] == 1
    assert samples[("kafka_controller_kafkacontroller_offlinepartitionscount", frozenset())] == 2
    assert samples[("kafkasim_server_broker_epoch", frozenset())] == 42
    assert samples[("kafkasim_controller_epoch", frozenset())] == 7


def test_topic_meters_have_an_all_topics_sample_without_a_label():
    samples = scrape(hand_made())
    assert samples[("kafka_server_brokertopicmetrics_bytesin_total", frozenset())] == 150
    assert samples[("kafka_server_brokertopicmetrics_bytesin_total", frozenset({("topic", "a")}))] == 100
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", frozenset({("topic", "b")}))] == 1


def test_request_metrics_carry_kafkas_labels_and_quantiles():
    samples = scrape(hand_made())
    assert samples[("kafka_network_requestmetrics_requests_total",
                    frozenset({("request", "Produce"), ("version", "7")}))] == 5
    assert samples[("kafka_network_requestmetrics_errors_total",
                    frozenset({("request", "Produce"), ("error", "NOT_LEADER_OR_FOLLOWER")}))] == 1
    assert samples[("kafka_network_requestmetrics_totaltimems",
                    frozenset({("request", "Produce"), ("quantile", "0.50")}))] == 50.5
    assert samples[("kafka_network_requestmetrics_totaltimems_count", frozenset({("request", "Produce")}))] == 100
    assert not any(name.endswith("_sum") for name, _ in samples)  # the exporter has no _sum for Yammer histograms
    assert samples[("kafka_server_delayedoperationpurgatory_purgatorysize",
                    frozenset({("delayedOperation", "Fetch")}))] == 3
    assert samples[("kafka_server_replicafetchermanager_maxlag", frozenset({("clientId", "Replica")}))] == 5


def test_partition_gauges_and_follower_lag_come_from_the_leader():
    samples = scrape(hand_made())
    a0 = frozenset({("topic", "a"), ("partition", "0")})
    b0 = frozenset({("topic", "b"), ("partition", "0")})
    assert samples[("kafka_log_log_logendoffset", a0)] == 10
    assert samples[("kafkasim_partition_highwatermark", a0)] == 8
    assert samples[("kafka_cluster_partition_underreplicated", a0)] == 1
    assert samples[("kafka_cluster_partition_insyncreplicascount", b0)] == 0  # a follower does not know
    assert samples[("kafkasim_partition_follower_lag", a0 | {("replica", "3")})] == 6
    # a follower not heard from in this leader epoch has no lag sample
    assert ("kafkasim_partition_follower_lag", frozenset({("topic", "a"), ("partition", "1"), ("replica", "3")})) \
        not in samples


def test_the_log_cleaner_gauges_have_kafkas_names_and_a_log_directory_label():
    samples = scrape(hand_made())
    assert samples[("kafka_log_logcleaner_max_buffer_utilization_percent", frozenset())] == 12
    assert samples[("kafka_log_logcleaner_cleaner_recopy_percent", frozenset())] == 5
    assert samples[("kafka_log_logcleaner_max_clean_time_secs", frozenset())] == 3
    assert samples[("kafka_log_logcleaner_max_compaction_delay_secs", frozenset())] == 0
    assert samples[("kafka_log_logcleaner_deadthreadcount", frozenset())] == 0
    assert samples[("kafka_log_logcleanermanager_max_dirty_percent", frozenset())] == 61
    assert samples[("kafka_log_logcleanermanager_time_since_last_run_ms", frozenset())] == 250
    assert samples[("kafka_log_logcleanermanager_uncleanable_partitions_count",
                    frozenset({("logDirectory", "/data/b")}))] == 1
    assert samples[("kafka_log_logcleanermanager_uncleanable_bytes", frozenset({("logDirectory", "/data/b")}))] == 4096
    assert samples[("kafka_log_logcleanermanager_uncleanable_bytes", frozenset({("logDirectory", "/data/a")}))] == 0
    # a broker whose cleaner does not run reports none of them, as Kafka creates no LogCleaner then
    without = scrape(dataclasses.replace(hand_made(), cleaner=None))
    assert not any(name.startswith("kafka_log_logcleaner") for name, _ in without)


def test_every_reported_name_is_in_the_catalogue_and_documented():
    documented = set(re.findall(r"`((?:kafka|kafkasim)_[a-z_0-9]+)`", DOCS.read_text()))
    names = {definition.name for definition in catalogue.ALL}
    assert names <= documented, f"not in docs/metrics.md: {sorted(names - documented)}"
    assert {family.definition.name for family in families(hand_made())} == names
    counters = Counter(definition.name for definition in catalogue.ALL)
    assert max(counters.values()) == 1


def test_label_values_are_escaped_as_the_exposition_format_says():
    assert label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    text = render(families(hand_made()))
    assert all(line.startswith(("# HELP ", "# TYPE ", "kafka_", "kafkasim_")) for line in text.splitlines())
