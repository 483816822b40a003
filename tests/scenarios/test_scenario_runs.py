"""Every scenario runs with --auto against real processes and its predictions hold; a deliberately wrong
prediction is reported as not holding with the measured value; the demo exits 0; an existing cluster that already
has a scenario's topic is refused."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from cluster.cli import main
from cluster.scenarios.model import Expect
from cluster.scenarios.registry import DEMO, SCENARIOS
from cluster.scenarios.runner import Options, run_scenario
from tests.cluster.test_netns import names_of, remove_by_name
from tests.harness import own_cluster
from traces import events as te
from traces.events import parse_line
from zk.server import free_port

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def _kafkasim(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(data_dir), *args],
                          capture_output=True, text=True, timeout=240, env=os.environ | {"COLUMNS": "200"})


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.netns] if scenario.netns else [])
                                  for name, scenario in SCENARIOS.items()])
def test_the_scenario_reaches_its_documented_outcome(tmp_path, name):
    out = tmp_path / "run"
    if SCENARIOS[name].netns:
        # CI runs as root: a scenario that cannot run there is a failure, not a skip
        assert os.geteuid() == 0, f"{name} runs its cluster in network namespaces, which needs root"
    try:
        done = _kafkasim(tmp_path, "scenario", "run", name, "--auto", "--speed", "inf", "--out", str(out))
    finally:
        if out.with_name("run.cluster").exists():  # the run died before taking its cluster down
            remove_by_name(out.with_name("run.cluster"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    if SCENARIOS[name].netns:
        [tag] = re.findall(r"namespaces kafkasim-(\w+)-\*", done.stdout)
        assert names_of(tag) == ([], []), "the scenario's namespaces and links are removed with its cluster"
    assert "every prediction held" in done.stdout
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["held"] and verdict["verdicts"] and all(v["held"] for v in verdict["verdicts"])
    # the run folder is a `traces collect` folder, which `kafkasim analyze` reads
    assert (out / "collected.json").exists() and list((out / "traces").rglob("trace.jsonl"))
    assert list((out / "final-logs").rglob("broker-*.jsonl"))
    assert list((out / "history").rglob("scenario-history.jsonl"))
    assert not out.with_name("run.cluster").exists(), "the scenario's own cluster is taken down and removed"
    # every step's start and outcome is in the tools' trace, where the dashboard's feed tells it
    [tools] = list((out / "traces").rglob("tools-trace.jsonl"))
    steps = [e for e in map(parse_line, tools.read_text().splitlines()) if isinstance(e, te.ScenarioStep)]
    assert {e.step for e in steps if e.outcome == "started"} == set(range(1, len(SCENARIOS[name].steps) + 1))
    assert all(e.scenario == name for e in steps)
    predicting = sum(1 for step in SCENARIOS[name].steps if step.expect)
    assert [e.outcome for e in steps if e.outcome != "started"] == ["held"] * predicting


def test_a_wrong_prediction_is_reported_as_not_holding_with_what_was_measured(tmp_path):
    # the copy predicts that the dead broker still leads after the election
    steps = list(DEMO.steps)
    steps[2] = dataclasses.replace(steps[2], expect=(Expect("leader:events", "==", "$killed"),))
    wrong = dataclasses.replace(DEMO, name="wrong-failover", steps=tuple(steps[:3]))
    output = io.StringIO()
    code = run_scenario(wrong, Options("auto", float("inf"), out=tmp_path / "run"), tmp_path,
                        Console(file=output, width=200))
    text = output.getvalue()
    assert code == 1, text
    assert "did not hold" in text
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    [wrong_one] = [v for v in verdict["verdicts"] if not v["held"]]
    assert wrong_one["fact"] == "leader:events" and verdict["held"] is False
    assert wrong_one["measured"] != wrong_one["expected"] and wrong_one["measured"] >= 1
    assert f"│ {wrong_one['measured']}" in text, "the verdict table shows the measured leader"


def test_the_demo_exits_0(tmp_path):
    done = _kafkasim(tmp_path, "demo", "--speed", "inf")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "every prediction held" in done.stdout and "What to try next" in done.stdout


def test_bootstrap_uses_the_running_cluster_it_names_and_refuses_an_address_or_a_topic_not_its_own(tmp_path):
    data_dir = tmp_path / "cluster"
    with own_cluster(data_dir) as cluster:
        first = cluster.spec.brokers[0]
        # a listener of no broker of this cluster: the scenario could not stop or restart what answers there
        stranger = _kafkasim(data_dir, "scenario", "run", "controller-failover", "--bootstrap",
                             f"{first.host}:{free_port()}", "--out", str(tmp_path / "refused"))
        assert stranger.returncode == 2, stranger.stdout + stranger.stderr
        assert "is not a listener of the kafkasim cluster" in stranger.stderr
        assert cluster.spec.bootstrap_servers in stranger.stderr and "--data-dir" in stranger.stderr
        assert not (tmp_path / "refused").exists()

        done = _kafkasim(data_dir, "scenario", "run", "controller-failover", "--bootstrap", first.bootstrap,
                         "--speed", "inf", "--out", str(tmp_path / "run"))
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert f"using the running cluster of {data_dir}" in done.stdout
        assert all(cluster.pid(b.broker_id) is not None for b in cluster.spec.brokers), "the cluster is left running"
        assert json.loads((tmp_path / "run" / "verdict.json").read_text())["held"]

        # the same scenario again: its topic exists now
        again = _kafkasim(data_dir, "scenario", "run", "controller-failover", "--bootstrap",
                          cluster.spec.bootstrap_servers, "--speed", "inf", "--out", str(tmp_path / "again"))
    assert again.returncode == 2, again.stdout + again.stderr
    assert "t already exist" in again.stderr and "kafkasim topic delete" in again.stderr


def test_bootstrap_without_a_kafkasim_cluster_in_the_data_dir_says_what_to_do(tmp_path):
    done = _kafkasim(tmp_path, "scenario", "run", "leader-failover", "--bootstrap", "127.0.0.1:9092")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "there is no kafkasim cluster in" in done.stderr and "leave out --bootstrap" in done.stderr


def test_scenario_list_names_every_scenario(capsys):
    assert main(["scenario", "list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in SCENARIOS)
