"""The jobs on traces written with the event models (no cluster): gaps in the znode history are found,
failovers without a fault still get their later phases, and a run without traces of its partition states
still has its lost writes checked against the largest replica."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import jobs
from analysis.load import load_events, load_final_logs, load_history
from analysis.report import analyze_run
from analysis.synthetic import SyntheticRun
from traces import events as te
from traces.history import AcknowledgedWrite, StoredRecord

pytestmark = pytest.mark.spark


def write(path: Path, *events: te.TraceEvent) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(e.model_dump_json() + "\n" for e in events))


def elected(ts: float, version: int, leader: int, epoch: int, isr: list[int], previous: int, kind: str):
    return te.LeaderElected(ts_ms=ts, broker_id=1, topic="t", partition=0, leader=leader, leader_epoch=epoch,
                            isr=isr, previous_leader=previous, zk_version=version, election=kind, replicas=[1, 2])


def test_a_synthetic_run_yields_one_breakdown_per_failover_and_every_one_adds_up(spark, tmp_path: Path):
    run = SyntheticRun(brokers=3, partitions=4, seed=3, failover_rate=0.005)
    run.generate(3000)
    run.write(tmp_path / "run")
    result = analyze_run(spark, tmp_path / "run")
    changes = result.timeline[result.timeline.change == "offline"]
    assert len(result.failovers) == len(changes) > 0
    phases = result.failovers[["detection_ms", "election_ms", "propagation_ms", "first_write_ms"]].sum(axis=1)
    assert (phases - result.failovers.total_ms).abs().max() < 1e-6
    assert (result.failovers.detection_ms == 2000).all()
    assert result.version_gaps.empty and result.events == run.events


def test_a_missing_state_write_shows_as_a_version_gap(spark, tmp_path: Path):
    write(tmp_path / "broker-1" / "trace.jsonl",
          elected(1000, 0, 1, 0, [1, 2], -1, "initial"),
          elected(3000, 2, 2, 2, [2], 1, "offline"))   # version 1 (an ISR shrink, say) never made it to disk
    timeline = jobs.leadership_timeline(load_events(spark, tmp_path))
    gaps = jobs.version_gaps(timeline).select("previous_zk_version", "zk_version").collect()
    assert [tuple(r) for r in gaps] == [(0, 2)]


def test_a_controlled_shutdown_has_no_death_or_expiry_but_its_later_phases(spark, tmp_path: Path):
    write(tmp_path / "broker-1" / "trace.jsonl",
          elected(1000, 0, 1, 0, [1, 2], -1, "initial"),
          elected(2000, 1, 2, 1, [1, 2], 1, "controlled_shutdown"))
    write(tmp_path / "broker-2" / "trace.jsonl",
          te.ReplicaRoleChanged(ts_ms=2010, broker_id=2, topic="t", partition=0, role="leader", leader=2,
                                leader_epoch=1, isr=[1, 2]),
          te.ProduceAcknowledged(ts_ms=2050, broker_id=2, topic="t", partition=0, acks=-1, error="none",
                                 base_offset=0, end_offset=1))
    events = load_events(spark, tmp_path)
    row = jobs.failover_breakdown(events, jobs.leadership_timeline(events)).first()
    assert (row.death_ms, row.expiry_ms, row.detection_ms) == (None, None, None)
    assert (row.propagation_ms, row.first_write_ms, row.total_ms) == (10, 40, 50)


def test_without_partition_traces_lost_writes_are_checked_against_the_largest_replica(spark, tmp_path: Path):
    history = tmp_path / "history" / "w-history.jsonl"
    history.parent.mkdir(parents=True)
    history.write_text("".join(AcknowledgedWrite(topic="t", partition=0, offset=i, value=v, ts_ms=0).model_dump_json()
                               + "\n" for i, v in enumerate(["a", "b", "c"])))
    logs = tmp_path / "final-logs" / "run"
    logs.mkdir(parents=True)
    for broker, values in ((1, ["a"]), (2, ["a", "b", "z"])):
        (logs / f"broker-{broker}.jsonl").write_text("".join(
            StoredRecord(broker=broker, topic="t", partition=0, offset=i, leader_epoch=0, value=v).model_dump_json()
            + "\n" for i, v in enumerate(values)))
    missing = jobs.missing_writes(load_history(spark, tmp_path), load_final_logs(spark, tmp_path)).collect()
    assert [(r.value, r.acknowledged_offset, r.now_at_offset, r.final_replica) for r in missing] == [("c", 2, "z", 2)]
