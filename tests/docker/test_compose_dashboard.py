"""The compose file's `dashboard` service (profile `dashboard`), run for real: the kafkasim image serves the page,
reads ZooKeeper and the brokers inside the compose network, and its fault buttons act on the containers through
the Docker socket, as `kafkasim kill --docker` does."""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from collections.abc import Iterator

import pytest

from tests.docker.conftest import ComposeRun
from tests.harness import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def dashboard(compose_run: ComposeRun) -> Iterator[str]:
    port = free_port()
    os.environ["KAFKASIM_DASHBOARD_PORT"] = str(port)   # compose reads it from the environment it runs in
    try:
        compose_run.run("--profile", "dashboard", "up", "-d", "--wait", "dashboard", timeout_s=300)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.environ.pop("KAFKASIM_DASHBOARD_PORT", None)
        compose_run.run("--profile", "dashboard", "rm", "-s", "-f", "dashboard", timeout_s=120)


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def brokers(state: dict) -> dict[int, str]:
    return {b["id"]: b["state"] for b in state["brokers"]}


def test_the_compose_dashboard_shows_the_cluster_and_its_buttons_kill_and_start_a_container(dashboard: str):
    state = wait_until(lambda: (s := get(f"{dashboard}/api/state")) and brokers(s) == {1: "up", 2: "up", 3: "up"}
                       and s["controller"]["id"] in (1, 2, 3) and s, 60, "the page to show three brokers up")
    assert state["zookeeper"]["answering"]
    assert get(f"{dashboard}/api/actions")["allow_faults"], "the compose service has its fault buttons"
    victim = next(b for b in (1, 2, 3) if b != state["controller"]["id"])
    post(f"{dashboard}/api/fault", {"action": "kill", "broker": victim})
    try:
        wait_until(lambda: brokers(get(f"{dashboard}/api/state"))[victim] == "down", 30,
                   f"the page to show broker {victim} down after its container was killed")
        feed = " ".join(str(line) for line in get(f"{dashboard}/api/state")["feed"])
        assert f"broker {victim}" in feed or f"kafka-{victim}" in feed, feed
    finally:
        post(f"{dashboard}/api/fault", {"action": "start", "broker": victim})
    wait_until(lambda: brokers(get(f"{dashboard}/api/state"))[victim] == "up", 120,
               f"the page to show broker {victim} up again")
