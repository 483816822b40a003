"""ZooKeeper down: the page goes on updating, says so, shows the last known state; back up, it follows again."""

from __future__ import annotations

import json
import signal
import urllib.request
from pathlib import Path

import pytest

from cluster.lifecycle import start_zookeeper, stop_zookeeper
from tests.dashboard.support import dashboard_process
from tests.harness import own_cluster, wait_until, zk_call
from zk.admin import create_topic

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def _state(url: str) -> dict:
    with urllib.request.urlopen(url + "api/state", timeout=5) as response:
        return json.loads(response.read())


def test_the_page_survives_zookeeper_going_down_and_coming_back(tmp_path: Path):
    with own_cluster(tmp_path / "cluster") as cluster, dashboard_process(cluster.data_dir) as url:
        zk_call(cluster.zk_connect, lambda zk: create_topic(zk, "z", 2, 3))
        wait_until(lambda: len(_state(url)["partitions"]) == 2, 20, "the topic on the page")
        stop_zookeeper(cluster.data_dir, signal.SIGKILL, say=lambda _: None)
        down = wait_until(lambda: (s := _state(url)) and not s["zookeeper"]["answering"] and s, 10,
                          "ZooKeeper shown as not answering")
        assert len(down["partitions"]) == 2, "the last known state is shown"
        wait_until(lambda: _state(url)["seq"] >= down["seq"] + 4, 5, "updates while ZooKeeper is down")
        start_zookeeper(cluster.data_dir, say=lambda _: None)
        wait_until(lambda: _state(url)["zookeeper"]["answering"], 30, "ZooKeeper answering again")
        zk_call(cluster.zk_connect, lambda zk: create_topic(zk, "after", 1, 3))
        wait_until(lambda: any(p["topic"] == "after" for p in _state(url)["partitions"]), 30,
                   "a topic created after the outage on the page (watches set again)")
