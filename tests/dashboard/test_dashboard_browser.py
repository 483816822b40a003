"""The dashboard in a real browser against a running cluster: a killed leader's successor, the shrunk ISR and the
election in the feed show up without a reload; a paused broker is shown as such while the page keeps updating."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal

import pytest

from cluster import commands
from tests.dashboard.support import ARTIFACTS, chromium, dashboard_process
from tests.harness import RunningCluster, wait_until, zk_call
from zk.admin import create_topic

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.browser,
              pytest.mark.skipif(shutil.which("chromium") is None or shutil.which("chromedriver") is None,
                                 reason="needs Debian's chromium and chromium-driver (scripts/setup.sh)")]

TOPIC = "orders"


def _partition(driver, name: str) -> dict:
    element = driver.find_element("css selector", f'[data-partition="{name}"]')
    return {"leader": int(element.get_attribute("data-leader")),
            "isr": [int(b) for b in element.get_attribute("data-isr").split(",") if b],
            "leader_epoch": int(element.get_attribute("data-leader-epoch"))}


def _feed(driver) -> list[str]:
    return [li.text for li in driver.find_elements("css selector", "#feed li")]


def _seq(driver) -> int:
    return int(driver.find_element("id", "updated").get_attribute("data-seq"))


@pytest.fixture
def topic_cluster(cluster: RunningCluster) -> RunningCluster:
    zk_call(cluster.zk_connect, lambda zk: create_topic(zk, TOPIC, 3, 3))
    wait_until(lambda: all(p.leader >= 0 and len(p.isr) == 3 for p in cluster.state([TOPIC]).partitions), 30,
               "every partition to have a leader and a full ISR")
    return cluster


def test_a_killed_leader_shows_its_successor_the_shrunk_isr_and_the_election_without_a_reload(
        topic_cluster: RunningCluster):
    cluster = topic_cluster
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = f"{TOPIC}-0"
    with dashboard_process(cluster.data_dir) as url:
        driver = chromium()
        try:
            driver.get(url)
            before = wait_until(lambda: (p := _partition(driver, name))["leader"] >= 0 and len(p["isr"]) == 3 and p,
                                20, f"the page to show the leader of {name}")
            mark = driver.execute_script("return window.dashboardLoadMark")
            driver.save_screenshot(str(ARTIFACTS / "before-kill.png"))
            killed = before["leader"]
            # the CLI's own kill: `kafkasim kill BROKER` (kill -9)
            asyncio.run(commands.kill(cluster.data_dir, cluster.spec, killed, False, None, signal.SIGKILL))
            cluster.killed.add(killed)

            def moved() -> dict | None:
                p = _partition(driver, name)
                return p if p["leader"] not in (killed, -1) and killed not in p["isr"] else None

            after = wait_until(moved, 20, f"the page to show a new leader of {name} and an ISR without {killed}")
            elected = f"elected broker {after['leader']} leader of {name}, leader epoch {after['leader_epoch']}"
            wait_until(lambda: any(elected in line for line in _feed(driver)), 10, f"'{elected}' in the feed")
            wait_until(lambda: any(f"sigkill broker {killed}" in line for line in _feed(driver)), 10,
                       "the kill in the feed")
            row = driver.find_element("css selector", f'#brokers tr[data-broker="{killed}"]')
            assert row.get_attribute("data-state") == "down"
            assert driver.execute_script("return window.dashboardLoadMark") == mark, "the page was reloaded"
            assert after["leader_epoch"] > before["leader_epoch"]
            driver.save_screenshot(str(ARTIFACTS / "after-kill.png"))
            print(f"screenshots in {ARTIFACTS}")
        finally:
            driver.quit()


def test_the_page_keeps_updating_while_a_broker_is_paused(topic_cluster: RunningCluster):
    cluster = topic_cluster
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    paused = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != cluster.controller())
    with dashboard_process(cluster.data_dir) as url:
        driver = chromium()
        try:
            driver.get(url)
            wait_until(lambda: _seq(driver) > 0, 20, "the first update")
            os.kill(cluster.pid(paused), signal.SIGSTOP)
            try:
                # the classroom profile's session timeout is 2 s: the page must say so well within it
                row = f'#brokers tr[data-broker="{paused}"]'
                wait_until(lambda: driver.find_element("css selector", row).get_attribute("data-state") == "paused",
                           2.0, f"broker {paused} shown as paused")
                seq = _seq(driver)
                wait_until(lambda: _seq(driver) >= seq + 8, 5, "the page to keep updating while a broker is paused")
                driver.save_screenshot(str(ARTIFACTS / "paused.png"))
            finally:
                os.kill(cluster.pid(paused), signal.SIGCONT)
        finally:
            driver.quit()
