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
from cluster.bench.transactions_timeline import STEPS, Cycle, committed_cycles, timeline_phase
from traces.events import TransactionStateChanged, TxnMarkerWritten
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


def _state(ts_ms: float, old: str, new: str, producer_id: int = 7, txn_id: str = "t") -> TransactionStateChanged:
    return TransactionStateChanged(ts_ms=ts_ms, transactional_id=txn_id, producer_id=producer_id, producer_epoch=0,
                                   old_state=old, new_state=new, txn_partitions=[], coordinator_epoch=0,
                                   state_partition=0)


def _marker(ts_ms: float, producer_id: int = 7, marker: str = "COMMIT") -> TxnMarkerWritten:
    return TxnMarkerWritten(ts_ms=ts_ms, topic="out", partition=0, producer_id=producer_id, producer_epoch=0,
                            marker=marker, offset=1, coordinator_epoch=0)


def test_a_committed_transaction_is_cut_into_its_steps_up_to_the_next_ones_begin():
    events = [_state(100, "Empty", "Ongoing"), _state(106, "Ongoing", "PrepareCommit"), _marker(107),
              _marker(108, producer_id=99), _marker(107.5), _state(112, "PrepareCommit", "CompleteCommit"),
              _state(132, "CompleteCommit", "Ongoing"), _state(133, "Ongoing", "Ongoing"),
              _state(138, "Ongoing", "PrepareCommit"), _marker(139), _state(143, "PrepareCommit", "CompleteCommit"),
              _state(50, "Empty", "Ongoing", txn_id="other")]
    (cycle,) = committed_cycles(list(reversed(events)), "t")  # the last transaction has no next: no cycle
    assert cycle == Cycle(100, 106, 107.5, 112, 132)
    assert [cycle.step_ms(step) for step in STEPS] == [6, 1.5, 4.5, 20]
    assert cycle.total_ms == 32


def test_an_aborted_transaction_is_no_committed_cycle():
    events = [_state(0, "Empty", "Ongoing"), _state(5, "Ongoing", "PrepareAbort"), _marker(6, marker="ABORT"),
              _state(9, "PrepareAbort", "CompleteAbort"), _state(30, "CompleteAbort", "Ongoing")]
    assert committed_cycles(events, "t") == []


def test_the_timeline_counts_the_transactions_that_waited_for_the_clients_retry():
    cycles = [Cycle(0, 6, 7, 12, 32), Cycle(32, 38, 39, 44, 47)]
    phase = timeline_phase(cycles)
    figures = {f.name: f.value for f in phase.figures}
    assert figures["concurrent_retry_share"] == 50
    assert figures["step_next_begin_p50_ms"] == 3  # nearest rank: the smaller of two
    assert phase.details["share_percent"]["next_begin"] == pytest.approx(23 / 47 * 100, abs=0.1)


def test_bench_transactions_measures_both_producers_and_every_commit():
    result = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "bench", "transactions", "--transactions", "10", "--records", "20",
         "--phase-timeout", "90", "--json"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["error"] is None, report["error"]
    figures = {f["name"]: f["value"] for f in report["figures"]}
    steps = {f"step_{step}_p50_ms" for step in STEPS}
    assert set(figures) == {"idempotent_mib_s", "transactional_mib_s", "transactional_over_idempotent",
                            "transactions_per_s", "commit_p50_ms", "commit_p99_ms", "cycle_p50_ms",
                            "concurrent_retry_share", *steps}
    assert all(figures[name] > 0 for name in figures if name not in ("concurrent_retry_share", *steps)), figures
    assert all(figures[step] >= 0 for step in steps), figures
    # the steps of one transaction add up to about its whole (medians of each, so not exactly)
    assert sum(figures[step] for step in steps) == pytest.approx(figures["cycle_p50_ms"], rel=0.5)
    (timeline,) = [p for p in report["phases"] if p["name"] == "timeline"]
    assert sum(timeline["details"]["share_percent"].values()) == pytest.approx(100, abs=0.5)
    assert figures["commit_p50_ms"] <= figures["commit_p99_ms"]
    (transactional,) = [p for p in report["phases"] if p["name"] == "transactional"]
    assert transactional["details"]["delivered"] == 200
