"""The analysis of a real run: 3 brokers, a producer, the leader killed with SIGKILL and restarted.

The traces must tell the same story ZooKeeper lived through, version by version; the failover breakdown
must add up; no acknowledged write may be missing; the CLI and the notebook must draw their figures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.report import RunAnalysis, analyze_run
from cluster.cli import main
from tests.analysis.runs import FailoverRun, failover_run
from tests.harness import start_cluster

pytestmark = [pytest.mark.spark, pytest.mark.processes, pytest.mark.slow]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, zk_server: str) -> Iterator[FailoverRun]:
    base = tmp_path_factory.mktemp("failover")
    cluster = start_cluster(base, zk_server, brokers=3)
    try:
        yield failover_run(cluster, base / "run")
    finally:
        cluster.stop_all()


@pytest.fixture(scope="module")
def analysis(spark, run: FailoverRun) -> RunAnalysis:
    return analyze_run(spark, run.run_dir)


def states(analysis: RunAnalysis, topic: str):
    timeline = analysis.timeline
    return timeline[timeline.topic == topic].sort_values("zk_version")


def test_the_timeline_is_every_version_of_the_partition_state_zookeeper_went_through(run, analysis):
    timeline = states(analysis, run.topic)
    assert list(timeline.zk_version) == list(range(run.final.version + 1)), "a state write is missing or doubled"
    last = timeline.iloc[-1]
    assert (last.leader, last.leader_epoch, sorted(last.isr)) == (run.final.leader, run.final.leader_epoch,
                                                                  sorted(run.final.isr))
    assert analysis.version_gaps.empty
    # every state an outside watcher saw in ZooKeeper is the reconstructed state of that version
    by_version = timeline.set_index("zk_version")
    assert len(run.watched) >= 2 and run.final.version in run.watched
    for version, seen in run.watched.items():
        state = by_version.loc[version]
        assert (state.leader, state.leader_epoch, list(state.isr)) == (seen.leader, seen.leader_epoch, seen.isr)
    # the story: the first leader with the full ISR, the dead leader dropped, the new leader, the rejoin
    leaders = [row.leader for row in timeline.itertuples() if row.change in ("initial", "offline")]
    assert leaders[-1] == run.second_leader and run.first_leader in leaders
    epochs = list(timeline.leader_epoch)
    assert epochs == sorted(epochs), "leader epochs only grow"
    rejoin = timeline[timeline.change == "isr_expand"].iloc[-1]
    assert sorted(rejoin.isr) == [1, 2, 3] and rejoin.leader == run.second_leader


def test_the_figures_lead_with_the_partition_that_failed_over_and_mark_the_kill(run, analysis):
    shown = analysis.shown_partitions
    assert (shown.topic[0], shown.partition[0]) == (run.topic, 0), shown
    assert "leader changes" in shown.why[0]
    assert "__consumer_offsets" not in set(shown.topic)
    kills = analysis.faults[analysis.faults.action == "sigkill"]
    assert list(kills.broker_id) == [run.first_leader]
    # its LEO and HW lines are there to draw, with the records produced
    drawn = analysis.replica_offsets
    mine = drawn[(drawn.topic == run.topic) & (drawn.partition == 0)]
    assert mine.log_end_offset.max() == run.produced and mine.high_watermark.max() == run.produced


def test_the_failover_breakdown_has_every_step_in_order_and_its_phases_add_up(run, analysis):
    failovers = analysis.failovers[analysis.failovers.topic == run.topic]
    assert len(failovers) == 1
    f = failovers.iloc[0]
    assert (f.previous_leader, f.leader, f.change) == (run.first_leader, run.second_leader, "offline")
    steps = [f.death_ms, f.expiry_ms, f.decided_ms, f.applied_ms, f.first_ack_ms]
    assert all(s == s for s in steps), f"a step is missing: {steps}"  # NaN != NaN
    assert steps == sorted(steps), f"steps out of order: {steps}"
    phases = [f.detection_ms, f.election_ms, f.propagation_ms, f.first_write_ms]
    assert sum(phases) == pytest.approx(f.total_ms, abs=1e-6)
    # the death is noticed when the ZooKeeper session (2 s in the classroom profile) expires
    assert 1000 <= f.detection_ms <= 15000


def test_isr_churn_and_under_replicated_time_follow_the_dead_broker(run, analysis):
    periods = analysis.out_of_isr[analysis.out_of_isr.topic == run.topic]
    assert list(periods.replica) == [run.first_leader]
    period = periods.iloc[0]
    assert period.rejoined and period.out_of_isr_ms > 0
    under = analysis.under_replicated.set_index("topic").loc[run.topic]
    assert 0 < under.under_replicated_ms < under.observed_ms
    assert under.offline_ms == 0
    counts = analysis.isr_counts.set_index("topic").loc[run.topic]
    assert (counts.shrinks, counts.expands) == (1, 1)


def test_followers_lag_and_every_acknowledged_write_is_in_the_final_log(run, analysis):
    assert analysis.acknowledged_writes == run.produced
    assert analysis.missing_writes is not None and analysis.missing_writes.empty
    lag = analysis.follower_lag
    assert not lag.empty and (lag.lag_offsets >= 0).all()
    assert set(lag.replica) <= {1, 2, 3}
    assert analysis.dropped.empty or analysis.dropped.dropped.sum() == 0


def test_kafkasim_analyze_writes_the_figures_and_the_summary(run, spark, tmp_path: Path, capsys):
    assert main(["analyze", str(run.run_dir), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    for name in ("timeline.png", "follower_lag.png", "failover_phases.png", "transactions.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000, name
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert summary in printed
    # the kill moved the leaders of the quiet partitions it led too; the story's partition changed once
    assert sum(line.strip().startswith(f"{run.topic}-0 epoch") for line in summary.splitlines()) == 1
    assert f"acknowledged writes: {run.produced}, missing from the final logs: 0" in summary
    assert main(["analyze", str(tmp_path / "nothing-here")]) == 2


def test_the_notebook_runs_headless_on_the_run_and_saves_its_figures(run, tmp_path: Path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    notebook = Path(__file__).resolve().parents[2] / "analysis" / "replication_traces.ipynb"
    figures = tmp_path / "figures"
    monkeypatch.setenv("KAFKASIM_RUN_DIR", str(run.run_dir))
    monkeypatch.setenv("KAFKASIM_FIGURES_DIR", str(figures))
    monkeypatch.setenv("KAFKASIM_SPARK_MASTER", "local[2]")
    nb = nbformat.read(notebook, as_version=4)
    NotebookClient(nb, timeout=240, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    for name in ("timeline.png", "follower_lag.png", "failover_phases.png", "transactions.png"):
        assert (figures / name).stat().st_size > 1000, name
    outputs = "".join(o.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                      for o in cell.get("outputs", []))
    assert sum(line.strip().startswith(f"{run.topic}-0 epoch") for line in outputs.splitlines()) == 1, outputs
    images = [o for cell in nb.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 4
