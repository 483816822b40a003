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


def test_a_running_cluster_that_has_the_topic_already_is_refused(tmp_path):
    data_dir = tmp_path / "cluster"
    with own_cluster(data_dir):
        assert main(["--data-dir", str(data_dir), "topic", "create", "events", "--replication-factor", "3"]) == 0
        done = _kafkasim(data_dir, "scenario", "run", "leader-failover", "--existing", "--speed", "inf",
                         "--out", str(tmp_path / "run"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "events already exist" in done.stderr and "kafkasim topic delete" in done.stderr


def test_scenario_list_names_every_scenario(capsys):
    assert main(["scenario", "list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in SCENARIOS)
