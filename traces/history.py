"""A producer's history of acknowledged writes, and the final logs' records, as JSON lines.

A workload (the chaos producer, a student's script) appends one ``AcknowledgedWrite`` per record the
cluster acknowledged; ``kafkasim traces collect`` gathers these files with the traces and a dump of every
replica's final log (``StoredRecord`` lines), and the analysis reports acknowledged values that no longer
exist. Values are compared as text: both sides go through ``value_text``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

HISTORY_SUFFIX = "history.jsonl"      # e.g. workload-history.jsonl
FINAL_LOGS_DIR = "final-logs"


def value_text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="backslashreplace")


OFFSET_UNKNOWN = -1


class AcknowledgedWrite(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    partition: int
    offset: int   # OFFSET_UNKNOWN when the client was told the write persisted but not where
    value: str | None
    ts_ms: float


class StoredRecord(BaseModel):
    """One record of one replica's log as it is on disk after the run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    broker: int
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    value: str | None
    key: str | None = None   # the record's key, as text (a compacted topic's records: a tombstone is known by it)
    # the batch's idempotent producer (-1: none), so a checker can tell a client's re-send under a new producer
    # epoch from a broker appending one batch twice
    producer_id: int = -1
    producer_epoch: int = -1


class HistoryWriter:
    """Appends acknowledged writes; each call is flushed, so a killed workload still leaves its history."""

    def __init__(self, path: Path) -> None:
        if not path.name.endswith(HISTORY_SUFFIX):
            raise ValueError(f"a history file's name must end with {HISTORY_SUFFIX!r} so collect finds it: {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "a", encoding="utf-8")

    def acknowledged(self, topic: str, partition: int, offset: int | None, value: bytes | None) -> None:
        """``offset`` None: an idempotent librdkafka producer can report a write as persisted without its offset
        (it inferred the write from a later acknowledgement); it is kept as OFFSET_UNKNOWN."""
        self.acknowledged_many(topic, partition, [(OFFSET_UNKNOWN if offset is None else offset, value)])

    def acknowledged_many(self, topic: str, partition: int, records: Iterable[tuple[int, bytes | None]]) -> None:
        now = time.time() * 1000
        self._file.write("".join(
            AcknowledgedWrite(topic=topic, partition=partition, offset=offset, value=value_text(value),
                              ts_ms=now).model_dump_json() + "\n" for offset, value in records))
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
