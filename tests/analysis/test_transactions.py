"""The transaction jobs on trace files written through the brokers' TraceWriter (no cluster): a coordinator's
state changes and the leaders' markers become each transaction's timeline with its durations, and the leaders'
HW moves and LSO reports become the LSO's lag behind the HW."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis import transactions as tx
from analysis.analyze import run_analyze
from analysis.load import load_events
from traces import events as te
from traces.writer import TraceWriter

pytestmark = pytest.mark.spark

COORDINATOR, LEADER_A, LEADER_B = 1, 2, 3


class Run:
    """One TraceWriter per broker of a run folder, all on one hand-set wall clock (milliseconds)."""

    def __init__(self, root: Path) -> None:
        self.now_ms = 0.0
        self.writers = {b: TraceWriter(root / f"broker-{b}" / "trace.jsonl", b, clock=lambda: self.now_ms / 1000)
                        for b in (COORDINATOR, LEADER_A, LEADER_B)}

    def at(self, ts_ms: float, broker: int, event_type: type[te.TraceEvent], **fields) -> None:
        self.now_ms = ts_ms
        self.writers[broker].emit(event_type, **fields)

    def state(self, ts_ms: float, txn_id: str, producer_id: int, old: str, new: str, partitions: list[str],
              reason: str = "") -> None:
        self.at(ts_ms, COORDINATOR, te.TransactionStateChanged, transactional_id=txn_id, producer_id=producer_id,
                producer_epoch=0, old_state=old, new_state=new, txn_partitions=partitions, coordinator_epoch=3,
                state_partition=7, reason=reason)

    def marker(self, ts_ms: float, leader: int, partition: int, producer_id: int, kind: str, offset: int) -> None:
        self.at(ts_ms, leader, te.TxnMarkerWritten, topic="orders", partition=partition, producer_id=producer_id,
                producer_epoch=0, marker=kind, offset=offset, coordinator_epoch=3)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def three_transactions(root: Path) -> None:
    run = Run(root)
    # tx-a's first transaction: two partitions, committed
    run.state(1000, "tx-a", 100, "Empty", "Ongoing", ["orders-0"])
    run.state(1010, "tx-a", 100, "Ongoing", "Ongoing", ["orders-0", "orders-1"])
    run.state(1100, "tx-a", 100, "Ongoing", "PrepareCommit", ["orders-0", "orders-1"], "EndTxn(commit)")
    run.marker(1120, LEADER_A, 0, 100, "COMMIT", 5)
    run.marker(1130, LEADER_B, 1, 100, "COMMIT", 7)
    run.state(1150, "tx-a", 100, "PrepareCommit", "CompleteCommit", ["orders-0", "orders-1"])
    # its second, same producer id and epoch, aborted on timeout
    run.state(2000, "tx-a", 100, "CompleteCommit", "Ongoing", ["orders-0"])
    run.state(2300, "tx-a", 100, "Ongoing", "PrepareAbort", ["orders-0"], "timed out")
    run.marker(2310, LEADER_A, 0, 100, "ABORT", 9)
    run.state(2320, "tx-a", 100, "PrepareAbort", "CompleteAbort", ["orders-0"])
    # tx-b's, still open when the trace ends
    run.state(2500, "tx-b", 200, "Empty", "Ongoing", ["orders-1"])
    run.close()


def test_each_transaction_gets_its_steps_markers_and_durations(spark, tmp_path: Path):
    three_transactions(tmp_path)
    events = load_events(spark, tmp_path)
    steps_frame = tx.transaction_steps(events)
    assert steps_frame.columns == tx.STEP_COLUMNS  # what a run without transactions gets, empty
    steps = steps_frame.collect()
    first = [(r.step, r.state, list(r.partitions), r.broker)
             for r in steps if (r.transactional_id, r.txn) == ("tx-a", 1)]
    assert first == [(tx.BEGIN, "Ongoing", ["orders-0"], COORDINATOR),
                     (tx.ADDED, "Ongoing", ["orders-1"], COORDINATOR),
                     (tx.END_REQUESTED, "PrepareCommit", ["orders-0", "orders-1"], COORDINATOR),
                     (tx.MARKER, "COMMIT", ["orders-0"], LEADER_A),
                     (tx.MARKER, "COMMIT", ["orders-1"], LEADER_B),
                     (tx.COMPLETE, "CompleteCommit", ["orders-0", "orders-1"], COORDINATOR)]

    summary_frame = tx.transaction_summary(events)
    assert summary_frame.columns == tx.SUMMARY_COLUMNS
    summary = {(r.transactional_id, r.txn): r for r in summary_frame.collect()}
    committed, aborted, still_open = summary["tx-a", 1], summary["tx-a", 2], summary["tx-b", 1]
    assert (committed.outcome, list(committed.partitions), committed.markers, list(committed.marker_offsets)) == \
        ("commit", ["orders-0", "orders-1"], 2, ["orders-0@2:5", "orders-1@3:7"])
    assert (committed.ongoing_ms, committed.markers_ms, committed.completion_ms, committed.total_ms) == \
        (100, 30, 50, 150)
    # the second transaction's marker is its own, not the first's (same producer id and epoch)
    assert (aborted.outcome, aborted.end_reason, list(aborted.marker_offsets)) == \
        ("abort", "timed out", ["orders-0@2:9"])
    assert (aborted.ongoing_ms, aborted.markers_ms, aborted.completion_ms, aborted.total_ms) == (300, 10, 20, 320)
    assert (committed.after_previous_ms, aborted.after_previous_ms) == (None, 850)  # 2000 - the first's 1150
    assert (still_open.outcome, still_open.begin_ms, still_open.markers, still_open.total_ms) == \
        ("open", 2500, 0, None)


def lso_story(root: Path) -> None:
    run = Run(root)

    def hw(ts_ms: float, broker: int, high_watermark: int, role: str = "leader", partition: int = 0) -> None:
        run.at(ts_ms, broker, te.HighWatermarkUpdated, topic="orders", partition=partition,
               high_watermark=high_watermark, log_end_offset=high_watermark, role=role)

    def lso(ts_ms: float, last_stable_offset: int, high_watermark: int, open_transactions: int) -> None:
        run.at(ts_ms, LEADER_A, te.LastStableOffsetChanged, topic="orders", partition=0,
               last_stable_offset=last_stable_offset, high_watermark=high_watermark,
               open_transactions=open_transactions)

    hw(100, LEADER_A, 5)
    lso(110, 5, 5, 1)     # a transaction opens at the HW: the LSO still follows it
    hw(120, LEADER_A, 7)
    lso(120, 5, 7, 1)     # the HW passed the transaction's first offset: held at 5
    hw(125, LEADER_B, 7, role="follower")  # a follower's HW is not the leader's
    hw(130, LEADER_A, 9)
    lso(140, 5, 9, 0)     # its marker is written, not yet below the HW
    hw(150, LEADER_A, 10)
    lso(150, 10, 10, 0)   # released
    hw(160, LEADER_A, 12)
    hw(170, LEADER_B, 4, partition=1)  # no transaction there: not in the lag
    run.close()


def test_the_lso_lag_follows_the_held_lso_and_the_hw(spark, tmp_path: Path):
    lso_story(tmp_path)
    lag = tx.lso_lag(load_events(spark, tmp_path))
    assert lag.columns == tx.LSO_LAG_COLUMNS
    rows = [(r.ts_ms, r.high_watermark, r.last_stable_offset, r.lag_offsets, r.leader) for r in lag.collect()]
    assert rows == [(100, 5, 5, 0, LEADER_A), (110, 5, 5, 0, LEADER_A), (120, 7, 7, 0, LEADER_A),
                    (120, 7, 5, 2, LEADER_A), (130, 9, 5, 4, LEADER_A), (140, 9, 5, 4, LEADER_A),
                    (150, 10, 5, 5, LEADER_A), (150, 10, 10, 0, LEADER_A), (160, 12, 12, 0, LEADER_A)]
    summary_frame = tx.lso_lag_summary(lag, end_ms=200)
    assert summary_frame.columns == tx.LSO_SUMMARY_COLUMNS
    (summary,) = summary_frame.collect()
    assert (summary.partition, summary.lag_offsets_max, summary.held_ms) == (0, 5, 30)


def test_kafkasim_analyze_reports_transactions_and_lso_lag(spark, tmp_path: Path):
    three_transactions(tmp_path / "run" / "coordinator")
    lso_story(tmp_path / "run" / "leaders")
    summary, written = run_analyze(tmp_path / "run", tmp_path / "out")
    assert "transactions: 3 (abort 1, commit 1, open 1), markers written: 3\n" in summary
    assert "  begin → complete: median 235 ms, p99 318 ms, max 320 ms\n" in summary  # of 150 and 320
    assert "LSO held behind the HW: 1 partitions, 30 ms in all; largest lag 5 offsets (orders-0)\n" in summary
    assert {"transactions.png", "transactions.csv", "lso_lag_summary.csv"} <= {p.name for p in written}
    assert sorted(pd.read_csv(tmp_path / "out" / "transactions.csv").outcome) == ["abort", "commit", "open"]
