"""One poll of a running cluster: every replica's LEO and the high watermark come from the brokers themselves."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer

from cluster.dashboard.rates import MetricRates, parse_counters, scrape
from cluster.dashboard.snapshot import Snapshotter
from tests.harness import RunningCluster, wait_until, zk_call
from zk.admin import create_topic

pytestmark = [pytest.mark.processes]


def test_every_replica_reports_its_leo_and_the_leader_the_high_watermark(cluster: RunningCluster):
    zk_call(cluster.zk_connect, lambda zk: create_topic(zk, "leo", 1, 3))
    wait_until(lambda: len(cluster.state(["leo"]).partitions[0].isr) == 3, 20, "a full ISR")
    producer = Producer({"bootstrap.servers": cluster.spec.bootstrap_servers, "acks": "all"})
    for i in range(50):
        producer.produce("leo", f"m{i}".encode())
    assert producer.flush(20) == 0

    async def poll() -> dict:
        snapshotter = Snapshotter(cluster.zk_connect, cluster.spec, cluster.layout)
        try:
            await snapshotter.refresh_views()
            return (await snapshotter.snapshot())["partitions"][0]
        finally:
            await snapshotter.close()

    partition = wait_until(lambda: (p := asyncio.run(poll()))["high_watermark"] == 50 and p, 20,
                           "the high watermark at 50")
    assert partition["leo"] == {str(r): 50 for r in partition["replicas"]}


def test_the_produce_rates_come_from_the_brokers_own_prometheus_counters(cluster: RunningCluster):
    """The dashboard's byte and message rates are the brokers' BrokerTopicMetrics, differenced between scrapes."""
    zk_call(cluster.zk_connect, lambda zk: create_topic(zk, "rated", 1, 3))
    wait_until(lambda: len(cluster.state(["rated"]).partitions[0].isr) == 3, 20, "a full ISR")
    assert all(b.metrics_port > 0 for b in cluster.spec.brokers), "kafkasim up gives every broker a metrics port"
    rates = MetricRates()

    def scrape_all(at_s: float) -> None:
        for broker in cluster.spec.brokers:
            text = scrape(f"http://{broker.host}:{broker.metrics_port}/metrics")
            assert text is not None, f"broker {broker.broker_id} serves no metrics"
            rates.update(broker.broker_id, at_s, parse_counters(text))

    scrape_all(0.0)
    producer = Producer({"bootstrap.servers": cluster.spec.bootstrap_servers, "acks": "all"})
    for i in range(40):
        producer.produce("rated", f"value-{i:04d}".encode())
        producer.flush(20)   # one record per batch: 40 batches
    scrape_all(2.0)
    totals = rates.totals()
    assert totals["messages_in"] == pytest.approx(40 / 2.0)
    assert totals["bytes_in"] > 40 * len(b"value-0000") / 2.0
