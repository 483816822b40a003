"""Kafka's replication test matrix (tests/kafkatest/tests/core/replication_test.py) as data, and the table
of its results. Which cells to run and how to run them is the runner's job; this only says what each cell is.

Kafka's test: 3 brokers, one topic of 3 partitions, replication factor 3, min.insync.replicas 2, an acks=all
producer and a consumer throughout; one of four failures hits the leader of partition 0 or the controller.
It passes when at least 5000 records were acknowledged and every acknowledged record was consumed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict
from rich.table import Table
from rich.text import Text

from cluster.chaos.checker import CheckResult

FailureMode = Literal["clean_shutdown", "hard_shutdown", "clean_bounce", "hard_bounce"]
BrokerType = Literal["leader", "controller"]
FAILURE_MODES: tuple[FailureMode, ...] = ("clean_shutdown", "hard_shutdown", "clean_bounce", "hard_bounce")
BROKER_TYPES: tuple[BrokerType, ...] = ("leader", "controller")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReplicationCell(_Frozen):
    failure_mode: FailureMode
    broker_type: BrokerType        # leader: of partition 0 of the topic, found again before every blow
    signal: Literal["SIGTERM", "SIGKILL"]
    blows: int                     # shutdowns happen once; bounces 5 times, chasing the current target
    restart: bool                  # a shutdown leaves the broker down: 2 replicas still meet min.insync.replicas
    # a hard bounce restarts only once the broker's registration has left /brokers/ids (ZooKeeper session
    # timeout + 5 s in Kafka's test), so every kill is a real failover and not a quick reconnect
    wait_for_deregistration: bool
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    acks: Literal["all"] = "all"
    min_acknowledged: int = 5000

    @property
    def cell_id(self) -> str:
        return f"{self.failure_mode}/{self.broker_type}"


def _cell(failure_mode: FailureMode, broker_type: BrokerType) -> ReplicationCell:
    hard = failure_mode.startswith("hard")
    bounce = failure_mode.endswith("bounce")
    return ReplicationCell(failure_mode=failure_mode, broker_type=broker_type,
                           signal="SIGKILL" if hard else "SIGTERM", blows=5 if bounce else 1, restart=bounce,
                           wait_for_deregistration=hard and bounce)


REPLICATION_MATRIX: tuple[ReplicationCell, ...] = tuple(
    _cell(mode, broker_type) for mode in FAILURE_MODES for broker_type in BROKER_TYPES)


class MatrixRow(_Frozen):
    cell_id: str
    failure_mode: FailureMode
    broker_type: BrokerType
    verdict: Literal["valid", "invalid", "unknown", "kafka-known", "not run"]
    passed: bool | None            # None: not run
    acknowledged: int = 0
    lost: int = 0
    duplicates: int = 0
    other_anomalies: int = 0       # every other anomaly but unseen
    unavailable_share: float = 0.0
    longest_without_ok_send_ms: float = 0.0
    note: str = ""

    @classmethod
    def from_result(cls, cell: ReplicationCell, result: CheckResult | None) -> MatrixRow:
        base = {"cell_id": cell.cell_id, "failure_mode": cell.failure_mode, "broker_type": cell.broker_type}
        if result is None:
            return cls(**base, verdict="not run", passed=None)
        acknowledged = result.summary.acknowledged
        enough = acknowledged >= cell.min_acknowledged
        counted = {"lost-write", "duplicate", "unseen"}
        return cls(
            **base, verdict=result.verdict, passed=result.valid and enough, acknowledged=acknowledged,
            lost=result.counts["lost-write"], duplicates=result.counts["duplicate"],
            other_anomalies=sum(n for name, n in result.counts.items() if name not in counted),
            unavailable_share=result.availability.unavailable_share,
            longest_without_ok_send_ms=result.availability.longest_without_ok_send_ms,
            note="" if enough else f"only {acknowledged} acknowledged; Kafka's test wants {cell.min_acknowledged}",
        )


def matrix_rows(results: Mapping[str, CheckResult], cells: Sequence[ReplicationCell] = REPLICATION_MATRIX,
                ) -> list[MatrixRow]:
    """One row per cell, in the matrix's order; ``results`` by ``cell_id``, cells without one are "not run"."""
    return [MatrixRow.from_result(cell, results.get(cell.cell_id)) for cell in cells]


_VERDICT_STYLE = {"valid": "green", "invalid": "bold red", "unknown": "yellow", "kafka-known": "magenta",
                  "not run": "dim"}


def matrix_table(rows: Sequence[MatrixRow], title: str = "replication test matrix (RF 3, min.insync.replicas 2)",
                 ) -> Table:
    table = Table(title=title)
    for header, justify in (("failure", "left"), ("broker", "left"), ("verdict", "left"), ("acked", "right"),
                            ("lost", "right"), ("duplicates", "right"), ("other anomalies", "right"),
                            ("failed/unknown ops", "right"), ("longest outage", "right"), ("note", "left")):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        ran = row.verdict != "not run"
        verdict = "valid, too few acks" if row.verdict == "valid" and row.passed is False else row.verdict
        table.add_row(
            Text(row.failure_mode), Text(row.broker_type), Text(verdict, style=_VERDICT_STYLE[row.verdict]),
            *(Text(str(n) if ran else "-", style="bold red" if ran and n and name != "acked" else "")
              for name, n in (("acked", row.acknowledged), ("lost", row.lost), ("duplicates", row.duplicates),
                              ("other", row.other_anomalies))),
            Text(f"{row.unavailable_share:.1%}" if ran else "-"),
            Text(f"{row.longest_without_ok_send_ms / 1000:.1f} s" if ran else "-"),
            Text(row.note),
        )
    return table
