"""The dashboard's consumer-group panel against a real group on a running cluster: its state, its member, what it
owns and its lag per partition, as the coordinators report them, in the JSON and on the page."""

from __future__ import annotations

import json
import shutil
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.dashboard.support import chromium, dashboard_process
from tests.harness import RunningCluster, wait_until, zk_call
from zk.admin import create_topic

pytestmark = [pytest.mark.processes, pytest.mark.slow]

TOPIC = "lessons"
GROUP = "class"


def _state(url: str) -> dict:
    with urllib.request.urlopen(url + "api/state", timeout=5) as response:
        return json.load(response)


def _group(url: str) -> dict | None:
    return next((g for g in _state(url)["groups"]["groups"] if g["group"] == GROUP), None)


@pytest.fixture
def live_group(cluster: RunningCluster):
    """Group "class": one member owning both partitions of "lessons", 4 of 14 committed on partition 0 and 6 of 6
    on partition 1, so its lag is 10."""
    zk_call(cluster.zk_connect, lambda zk: create_topic(zk, TOPIC, 2, 3))
    wait_until(lambda: all(p.leader >= 0 and len(p.isr) == 3 for p in cluster.state([TOPIC]).partitions), 30,
               "both partitions led with a full ISR")
    # idempotent: a retry under load must not store a value twice (the panel shows the HW)
    producer = Producer({"bootstrap.servers": cluster.spec.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True})
    for partition, count in ((0, 14), (1, 6)):
        for i in range(count):
            producer.produce(TOPIC, f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.spec.bootstrap_servers, "group.id": GROUP,
                         "client.id": "student-1", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])

        def assigned() -> bool:
            consumer.poll(0.2)
            return len(consumer.assignment()) == 2
        wait_until(assigned, 30, "the member to be given both partitions")
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 4), TopicPartition(TOPIC, 1, 6)], asynchronous=False)
        yield consumer.memberid()
    finally:
        consumer.close()


def test_the_panel_data_shows_a_live_groups_state_member_owner_and_lag(cluster: RunningCluster, live_group: str):
    with dashboard_process(cluster.data_dir, "--no-allow-faults") as url:
        group = wait_until(lambda: (g := _group(url)) is not None and g.get("state") == "Stable" and g, 30,
                           f"group {GROUP} shown as Stable")
        assert [(m["member_id"], m["client_id"]) for m in group["members"]] == [(live_group, "student-1")]
        rows = [(p["topic"], p["partition"], p["committed"], p["high_watermark"], p["lag"], p["owner"])
                for p in group["partitions"]]
        assert rows == [(TOPIC, 0, 4, 14, 10, live_group), (TOPIC, 1, 6, 6, 0, live_group)]
        assert group["lag"] == 10
        assert group["coordinator"] in {b.broker_id for b in cluster.spec.brokers}


@pytest.mark.browser
@pytest.mark.skipif(shutil.which("chromium") is None or shutil.which("chromedriver") is None,
                    reason="needs Debian's chromium and chromium-driver (scripts/setup.sh)")
def test_the_page_shows_the_group_with_its_lag(cluster: RunningCluster, live_group: str):
    with dashboard_process(cluster.data_dir, "--no-allow-faults") as url:
        driver = chromium()
        try:
            driver.get(url)

            def panel() -> list | None:
                # one script per read: the page renders anew at every update
                return driver.execute_script(
                    "const h = document.querySelector('#groups h3[data-group=\"class\"]'); if (h === null) return null;"
                    "const rows = [...h.nextElementSibling.querySelectorAll('tbody tr')]"
                    "  .map((tr) => [...tr.children].map((td) => td.textContent));"
                    "return [h.dataset.groupState, h.textContent, rows];")
            _, heading, rows = wait_until(lambda: (p := panel()) is not None and p[0] == "Stable" and p, 30,
                                              "the group panel to show the group as Stable")
            assert "1 members, lag 10" in heading
            assert rows == [[f"{TOPIC}-0", "4", "14", "10", "student-1"], [f"{TOPIC}-1", "6", "6", "0", "student-1"]]
        finally:
            driver.quit()
