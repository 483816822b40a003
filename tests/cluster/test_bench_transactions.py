"""``kafkasim bench transactions``: its figures from measured times (pure) — throughput against the idempotent
run, commit latency percentiles, the refusal of impossible settings — and one small run of the real command
against a fresh cluster with the transaction coordinator. Its registration and options are checked with every
bench's in test_bench_registry.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cluster.bench.transactions import TransactionsBenchSettings, idempotent_phase, transactional_phase
from cluster.processes import ClusterError

SETTINGS = TransactionsBenchSettings(transactions=4, records=256)  # 1024 records of 1 KiB: 1 MiB


def test_the_transactional_figures_compare_with_the_idempotent_run_and_time_each_commit():
    idempotent = idempotent_phase(SETTINGS, 0.5, {}, {})
    assert [(f.name, f.value) for f in idempotent.figures] == [("idempotent_mib_s", 2.0)]
    phase = transactional_phase(SETTINGS, 2.0, [0.010, 0.020, 0.030, 0.400], idempotent.figures[0].value, {}, {})
    assert {f.name: round(f.value, 3) for f in phase.figures} == {
        "transactional_mib_s": 0.5, "transactional_over_idempotent": 0.25, "transactions_per_s": 2.0,
        "commit_p50_ms": 20.0, "commit_p99_ms": 400.0}
    assert phase.details["commit_ms_max"] == 400.0


def test_a_run_stopped_early_counts_only_the_committed_transactions():
    phase = transactional_phase(SETTINGS, 1.0, [0.010], None, {}, {})
    figures = {f.name: f.value for f in phase.figures}
    assert figures["transactional_mib_s"] == 0.25 and "transactional_over_idempotent" not in figures


def test_impossible_settings_are_refused_with_the_option_to_change():
    with pytest.raises(ClusterError, match="--records must be positive"):
        TransactionsBenchSettings(records=0).check()


def test_bench_transactions_measures_both_producers_and_every_commit():
    result = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "bench", "transactions", "--transactions", "10", "--records", "20",
         "--phase-timeout", "90", "--json"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["error"] is None, report["error"]
    figures = {f["name"]: f["value"] for f in report["figures"]}
    assert set(figures) == {"idempotent_mib_s", "transactional_mib_s", "transactional_over_idempotent",
                            "transactions_per_s", "commit_p50_ms", "commit_p99_ms"}
    assert all(value > 0 for value in figures.values()), figures
    assert figures["commit_p50_ms"] <= figures["commit_p99_ms"]
    (transactional,) = [p for p in report["phases"] if p["name"] == "transactional"]
    assert transactional["details"]["delivered"] == 200
