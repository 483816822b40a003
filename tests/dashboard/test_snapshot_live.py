"""One poll of a running cluster: every replica's LEO and the high watermark come from the brokers themselves."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer

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
