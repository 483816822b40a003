"""`kafkasim analyze` on a scenario's run folder: the demo (leader-failover) run with --auto, then analysed as the
scenario's last line says; the timeline must tell the leader change the scenario's verdict measured."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.cli import main

# a scenario and a Spark job: on a busy 2-core machine the analysis alone took 5 min
pytestmark = [pytest.mark.spark, pytest.mark.processes, pytest.mark.slow, pytest.mark.timeout(900)]


def test_kafkasim_analyze_draws_the_timeline_of_a_scenario_run(tmp_path: Path, capsys):
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(tmp_path), "scenario", "run",
                           "leader-failover", "--auto", "--speed", "inf", "--out", str(run)],
                          capture_output=True, text=True, timeout=240, env=os.environ | {"COLUMNS": "200"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "kafkasim analyze" in done.stdout and (run / "collected.json").exists()
    verdict = {v["fact"]: v for v in json.loads((run / "verdict.json").read_text())["verdicts"]}
    killed = verdict["leader:events"]["expected"]  # "leader:events != $killed"

    out = tmp_path / "analysis"
    assert main(["analyze", str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("timeline.png", "follower_lag.png", "failover_phases.png"):
        assert (out / name).stat().st_size > 1000, name
    with open(out / "timeline.csv", newline="") as rows:
        timeline = [row for row in csv.DictReader(rows) if (row["topic"], row["partition"]) == ("events", "0")]
    # the story's partition: first led by the broker the scenario killed, then by another in a later epoch
    assert int(timeline[0]["leader"]) == killed
    changed = [row for row in timeline if row["leader"] != timeline[0]["leader"]]
    assert changed and int(changed[0]["leader"]) not in (killed, -1)
    assert int(changed[0]["leader_epoch"]) > int(timeline[0]["leader_epoch"])
    assert int(timeline[-1]["leader_epoch"]) == verdict["leader_epoch:events"]["measured"]
    summary = (out / "summary.txt").read_text()
    assert summary in printed
    assert sum(line.strip().startswith("events-0 epoch") for line in summary.splitlines()) == 1, summary
    # every value the scenario saw acknowledged is in its history, and the analysis finds none missing
    assert "acknowledged writes: 200, missing from the final logs: 0" in summary
    with open(out / "faults.csv", newline="") as rows:
        assert [(f["action"], int(f["broker_id"])) for f in csv.DictReader(rows)][:1] == [("sigkill", killed)]
