"""Where a transaction's time goes, from the brokers' traces: the coordinator's state changes of one transactional id
and the partition leaders' markers of its producer id. Pure.

One cycle is one transaction, from the AddPartitionsToTxn that moves the id to Ongoing to the next one:

    records      Ongoing -> PrepareCommit durable: the records produced (acks=all) and the EndTxn request, answered
                 once PrepareCommit is replicated in __transaction_state
    markers      PrepareCommit -> the last COMMIT marker appended by a partition leader (WriteTxnMarkers)
    completion   last marker -> CompleteCommit durable (the markers replicated, then CompleteCommit replicated)
    next begin   CompleteCommit -> the next transaction's Ongoing. Kafka 2.8's coordinator answers the next
                 AddPartitionsToTxn CONCURRENT_TRANSACTIONS until CompleteCommit is written
                 (TransactionCoordinator.handleAddPartitionsToTransaction: PrepareCommit, or a pending transition),
                 and librdkafka retries it after a fixed 20 ms (rdkafka_txnmgr.c, as the Java producer since
                 KAFKA-5477): when the client asks before completion, this step is most of that 20 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.bench.measure import percentile
from cluster.bench.report import Figure, Phase
from traces.events import TraceEvent, TransactionStateChanged, TxnMarkerWritten

STEPS = ("records", "markers", "completion", "next_begin")
STEP_TITLES = {
    "records": "AddPartitionsToTxn -> PrepareCommit (records, EndTxn)",
    "markers": "PrepareCommit -> last COMMIT marker",
    "completion": "last marker -> CompleteCommit",
    "next_begin": "CompleteCommit -> next AddPartitionsToTxn",
}
CONCURRENT_RETRY_MS = 20.0  # librdkafka's fixed backoff after CONCURRENT_TRANSACTIONS


@dataclass(frozen=True)
class Cycle:
    began_ms: float
    prepared_ms: float
    last_marker_ms: float
    completed_ms: float
    next_began_ms: float

    def step_ms(self, step: str) -> float:
        return {"records": self.prepared_ms - self.began_ms,
                "markers": self.last_marker_ms - self.prepared_ms,
                "completion": self.completed_ms - self.last_marker_ms,
                "next_begin": self.next_began_ms - self.completed_ms}[step]

    @property
    def total_ms(self) -> float:
        return self.next_began_ms - self.began_ms


def committed_cycles(events: list[TraceEvent], transactional_id: str) -> list[Cycle]:
    """Every committed transaction of ``transactional_id`` that a next one followed, in order."""
    states = sorted((e for e in events if isinstance(e, TransactionStateChanged)
                     and e.transactional_id == transactional_id), key=lambda e: e.ts_ms)
    markers = sorted((e.ts_ms, e.producer_id) for e in events
                     if isinstance(e, TxnMarkerWritten) and e.marker == "COMMIT")
    cycles: list[Cycle] = []
    began = prepared = completed = None
    producer_id = -1
    for event in states:
        starts = event.new_state == "Ongoing" and event.old_state != "Ongoing"
        if starts and began is not None and prepared is not None and completed is not None:
            written = [ts for ts, pid in markers if pid == producer_id and prepared <= ts <= completed]
            cycles.append(Cycle(began, prepared, max(written, default=prepared), completed, event.ts_ms))
        if starts:
            began, prepared, completed, producer_id = event.ts_ms, None, None, event.producer_id
        elif event.new_state == "PrepareCommit":
            prepared = event.ts_ms
        elif event.new_state == "CompleteCommit":
            completed = event.ts_ms
        elif event.new_state in ("PrepareAbort", "CompleteAbort"):
            began = None  # an aborted transaction is not a committed cycle
    return cycles


def timeline_phase(cycles: list[Cycle]) -> Phase:
    figures = [Figure(f"step_{step}_p50_ms", f"  {STEP_TITLES[step]}, p50",
                      percentile([c.step_ms(step) for c in cycles], 50), "ms") for step in STEPS]
    waited = sum(1 for c in cycles if c.step_ms("next_begin") >= CONCURRENT_RETRY_MS * 0.75)
    figures += [Figure("cycle_p50_ms", "  one transaction, begin to next begin, p50",
                       percentile([c.total_ms for c in cycles], 50), "ms"),
                Figure("concurrent_retry_share", "  next transaction began after librdkafka's 20 ms retry",
                       waited / len(cycles) * 100, "%")]
    total = sum(c.total_ms for c in cycles)
    shares = {step: round(sum(c.step_ms(step) for c in cycles) / total * 100, 1) for step in STEPS}
    return Phase("timeline", f"{len(cycles)} committed transactions from the brokers' traces; share of the time: "
                             + ", ".join(f"{step.replace('_', ' ')} {share}%" for step, share in shares.items()),
                 total / 1000, figures, {"share_percent": shares})
