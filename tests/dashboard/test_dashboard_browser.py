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


# each read is one script: the page renders anew at every update, so an element found by one call may be gone by
# the next (a stale element)
def _attribute(driver, selector: str, name: str) -> str | None:
    return driver.execute_script("const e = document.querySelector(arguments[0]);"
                                 "return e === null ? null : e.getAttribute(arguments[1]);", selector, name)


def _partition(driver, name: str) -> dict:
    found = driver.execute_script(
        "const e = document.querySelector(arguments[0]); if (e === null) return null;"
        "return [e.dataset.leader, e.dataset.isr, e.dataset.leaderEpoch];", f'[data-partition="{name}"]')
    assert found is not None, f"no {name} on the page yet"
    return {"leader": int(found[0]), "isr": [int(b) for b in found[1].split(",") if b], "leader_epoch": int(found[2])}


def _feed(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#feed li')].map((li) => li.textContent);")


def _seq(driver) -> int:
    return int(_attribute(driver, "#updated", "data-seq") or 0)


def _broker_state(driver, broker: int) -> str | None:
    return _attribute(driver, f'#brokers tr[data-broker="{broker}"]', "data-state")


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
            wait_until(lambda: _broker_state(driver, killed) == "down", 5, f"broker {killed} shown as down")
            assert driver.execute_script("return window.dashboardLoadMark") == mark, "the page was reloaded"
            assert after["leader_epoch"] > before["leader_epoch"]
            driver.save_screenshot(str(ARTIFACTS / "after-kill.png"))
            print(f"screenshots in {ARTIFACTS}")
        finally:
            driver.quit()


def _click_and_confirm(driver, action: str, broker: int) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    button = f'#brokers button[data-action="{action}"][data-broker="{broker}"]'
    # tried again when the page re-rendered the button between finding and clicking it
    wait_until(lambda: driver.find_element("css selector", button).click() or True, 5, f"the {action} button")
    alert = WebDriverWait(driver, 5).until(lambda d: d.switch_to.alert)
    assert f"{action} broker {broker}" in alert.text
    alert.accept()


def test_the_pause_button_pauses_a_broker_and_the_page_keeps_updating(topic_cluster: RunningCluster):
    cluster = topic_cluster
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    paused = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != cluster.controller())
    pid = cluster.pid(paused)
    with dashboard_process(cluster.data_dir) as url:
        driver = chromium()
        try:
            driver.get(url)
            wait_until(lambda: _seq(driver) > 0, 20, "the first update")
            try:
                # the button asks first, then calls `kafkasim kill BROKER --signal STOP`'s function
                _click_and_confirm(driver, "pause", paused)
                # the classroom profile's session timeout is 2 s: the page must say so well within it
                wait_until(lambda: _broker_state(driver, paused) == "paused", 2.0, f"broker {paused} shown as paused")
                wait_until(lambda: any(f"sigstop broker {paused}" in line for line in _feed(driver)), 5,
                           "the pause in the feed")
                seq = _seq(driver)
                wait_until(lambda: _seq(driver) >= seq + 8, 5, "the page to keep updating while a broker is paused")
                driver.save_screenshot(str(ARTIFACTS / "paused.png"))
                _click_and_confirm(driver, "resume", paused)
                wait_until(lambda: _broker_state(driver, paused) == "up", 30, f"broker {paused} shown as up again")
                wait_until(lambda: any(f"sigcont broker {paused}" in line for line in _feed(driver)), 5,
                           "the resume in the feed")
            finally:
                os.kill(pid, signal.SIGCONT)
        finally:
            driver.quit()


def test_a_read_only_page_has_no_fault_buttons_and_the_server_refuses_them(topic_cluster: RunningCluster):
    with dashboard_process(topic_cluster.data_dir, "--no-allow-faults") as url:
        driver = chromium()
        try:
            driver.get(url)
            wait_until(lambda: _seq(driver) > 0, 20, "the first update")
            # in one script: the page renders anew at every update, so elements found earlier go stale
            shown = driver.execute_script(
                "const b = [...document.querySelectorAll('#brokers button[data-action]')];"
                "return [b.length, b.filter((x) => x.offsetParent !== null).length];")
            assert shown[0] > 0 and shown[1] == 0, f"{shown[1]} of {shown[0]} fault buttons shown"
            status = driver.execute_script(
                "const r = await fetch('/api/fault', {method: 'POST', body: JSON.stringify({action: 'kill', "
                "broker: 1})}); return r.status;")
            assert status == 403
        finally:
            driver.quit()
