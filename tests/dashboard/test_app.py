"""The app without a cluster: the page ships with the package, and the fault endpoint is closed unless allowed."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from cluster.dashboard.app import create_app
from cluster.dashboard.poller import Poller


def _client(allow_faults: bool, data_dir: Path | None) -> TestClient:
    # no `with`: the lifespan (the poller) does not run, nothing connects anywhere
    return TestClient(create_app(Poller("127.0.0.1:1", None, None, allow_faults), data_dir))


def test_the_page_and_its_script_are_served_from_the_package(tmp_path: Path):
    client = _client(False, tmp_path)
    page = client.get("/")
    assert page.status_code == 200 and "/static/dashboard.js" in page.text
    script = client.get("/static/dashboard.js")
    assert script.status_code == 200 and "EventSource" in script.text
    assert client.get("/static/dashboard.css").status_code == 200


def test_fault_buttons_are_refused_on_a_read_only_dashboard(tmp_path: Path):
    response = _client(False, tmp_path).post("/api/fault", json={"action": "kill", "broker": 1})
    assert response.status_code == 403
    assert "--allow-faults" in response.json()["error"]


def test_a_dashboard_with_no_cluster_to_act_on_refuses_faults_even_when_allowed():
    assert _client(True, None).post("/api/fault", json={"action": "heal"}).status_code == 403


def test_a_bad_fault_request_is_refused_with_the_reason(tmp_path: Path):
    client = _client(True, tmp_path)
    assert client.post("/api/fault", json={"action": "explode", "broker": 1}).status_code == 400
    response = client.post("/api/fault", json={"action": "kill"})
    assert response.status_code == 400 and "broker id" in response.json()["error"]


def test_a_fault_on_a_missing_cluster_says_what_to_do(tmp_path: Path):
    response = _client(True, tmp_path).post("/api/fault", json={"action": "kill", "broker": 1})
    assert response.status_code == 409 and "kafkasim up" in response.json()["error"]
