"""A chaos run's history, one JSON object per line, as Jepsen records one.

Every client operation is two lines: its ``invoke`` and its completion, ``ok``, ``fail`` (definitely did not
happen; the Kafka error name says why) or ``info`` (the outcome is unknown: a timeout, a crashed client).
Both carry the same ``index``, so the checker pairs them and can name an operation by it. Faults go to their
own file (``nemesis.jsonl``) with the same time fields, so anomalies can be laid against them. After the faults
are healed the runner reads every replica's log into ``FinalReads``.

The file names differ from ``traces.history``'s ``*history.jsonl`` on purpose: ``kafkasim analyze`` reads those
as acknowledged writes, and an operations file would not parse as one.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from traces.history import StoredRecord

OPERATIONS_FILE = "history.jsonl"  # `kafkasim analyze` reads its acknowledged sends too (analysis/load.py)
NEMESIS_FILE = "nemesis.jsonl"
FINAL_READS_FILE = "final-reads.json"

Function = Literal["send", "poll", "assign", "subscribe", "txn", "rewind"]
OperationType = Literal["invoke", "ok", "fail", "info"]
NemesisKind = Literal["kill", "pause", "partition", "zk-isolate", "slow", "controller", "bounce", "disk-full",
                      "zk-down"]
NEMESIS_KINDS: tuple[str, ...] = get_args(NemesisKind)
HEAL = "heal"  # not a fault: ends every fault still active, the step before the final reads


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TopicPartition(_Frozen):
    topic: str
    partition: int = Field(ge=0)


class PolledRecord(_Frozen):
    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    value: str | None


class GroupOffset(_Frozen):
    """A consumer group's committed offset of one partition (-1: none committed): after healing in the final reads,
    or as a transformer's rewind was answered."""

    group: str
    topic: str
    partition: int = Field(ge=0)
    offset: int


class Operation(_Frozen):
    """One half of a client operation.

    send:      invoke carries topic, value (unique in the run) and the partition if the client chose it, and the
               record's key when it has one (a compacted topic's sends); a tombstone (null value, a delete) carries
               its key and no value; ok carries partition and offset (offset None: librdkafka reported the write
               persisted without its offset, as an idempotent producer may).
    poll:      ok carries every record the poll returned, in the order returned.
    assign:    partitions the consumer reads from now on; its offsets may start anywhere again.
    subscribe: topics on the invoke; a group consumer's new assignment (on_assign) is recorded as an assign.
    txn:       one consume-transform-produce transaction (the txn workload). The invoke carries the input records
               the transformer consumed (``records``), the output topic (``topic``) and the values it produces
               there (``values``, one per input record, to the input record's partition number); ok: committed,
               fail: definitely aborted (the error says why), info: the commit was asked for and its outcome is
               unknown.
    rewind:    a transformer going back to its group's committed offsets after a transaction that did not commit
               (the txn workload): ok carries the offsets the group coordinator answered (``offsets``, -1: none),
               fail the error of the OffsetFetch.
    """

    index: int = Field(ge=0)
    type: OperationType
    process: str
    f: Function
    ts_ms: float                  # wall clock, epoch milliseconds (as traces' events)
    mono_ns: int                  # monotonic clock of the runner
    topic: str | None = None
    partition: int | None = Field(default=None, ge=0)
    offset: int | None = Field(default=None, ge=0)
    value: str | None = None
    key: str | None = None        # a send's record key (compacted topics); with no value: a tombstone
    records: tuple[PolledRecord, ...] = ()
    partitions: tuple[TopicPartition, ...] = ()
    topics: tuple[str, ...] = ()
    values: tuple[str, ...] = ()  # a txn's output values, values[i] made from records[i]
    offsets: tuple[GroupOffset, ...] = ()  # a rewind's committed offsets, as the group coordinator answered
    error: str | None = None      # the Kafka error name (NOT_ENOUGH_REPLICAS, _MSG_TIMED_OUT, ...)

    @model_validator(mode="after")
    def _fields_fit_the_operation(self) -> Operation:
        if self.type == "fail" and not self.error:
            raise ValueError("a fail completion needs the error that made it definite")
        if self.type in ("invoke", "ok") and self.error is not None:
            raise ValueError(f"an {self.type} has no error (use fail or info)")
        if self.f == "send" and self.type == "invoke" and (self.topic is None or
                                                           (self.value is None and self.key is None)):
            raise ValueError("a send invoke needs its topic and its unique value (a tombstone: its key)")
        if self.key is not None and self.f != "send":
            raise ValueError("only a send carries a key")
        if self.f == "send" and self.type == "ok" and self.partition is None:
            raise ValueError("a send ok needs the partition the write went to")
        if self.records and (self.f, self.type) not in (("poll", "ok"), ("txn", "invoke")):
            raise ValueError("only a poll ok and a txn invoke carry records")
        if self.values and (self.f, self.type) != ("txn", "invoke"):
            raise ValueError("only a txn invoke carries output values")
        if (self.f, self.type) == ("txn", "invoke") and (
                self.topic is None or not self.records or len(self.values) != len(self.records)):
            raise ValueError("a txn invoke needs its output topic, its input records and one output value per record")
        if self.offsets and (self.f, self.type) != ("rewind", "ok"):
            raise ValueError("only a rewind ok carries committed offsets")
        if self.offset is not None and (self.f, self.type) != ("send", "ok"):
            raise ValueError("only a send ok carries an offset")
        return self


class NemesisEvent(_Frozen):
    """A fault starting or stopping. ``targets`` are broker ids; empty for ZooKeeper-wide faults and for
    faults whose victim is found when it starts (the controller) — then ``detail`` names it."""

    type: Literal["start", "stop"]
    kind: NemesisKind | Literal["heal"]
    ts_ms: float
    mono_ns: int
    targets: tuple[int, ...] = ()
    detail: str = ""
    step: int | None = None       # the schedule step this event carries out


class ReplicaRead(_Frozen):
    """One replica's log of one partition, read after healing: (offset, value) in offset order, and the key of each
    record that has one (``keys``, in offset order: a compacted topic's records; a tombstone is known by its key)."""

    broker: int
    topic: str
    partition: int = Field(ge=0)
    records: tuple[tuple[int, str | None], ...] = ()
    log_start_offset: int = Field(default=0, ge=0)   # values below it were deleted by retention, not lost
    leader: bool = False          # the partition's leader at read time: its log is what consumers will read
    # (offset, producer id, producer epoch) of each record an idempotent producer wrote, when the read saw batches
    writers: tuple[tuple[int, int, int], ...] = ()
    keys: tuple[tuple[int, str], ...] = ()

    @property
    def log_end_offset(self) -> int:
        return self.records[-1][0] + 1 if self.records else self.log_start_offset


IsolationLevel = Literal["read_committed", "read_uncommitted"]


class IsolatedRead(_Frozen):
    """One partition read from offset 0 to its end by a fresh consumer after healing, at one isolation level
    (the txn workload's output topic): what a read_committed reader is shown, and what the log holds."""

    isolation_level: IsolationLevel
    topic: str
    partition: int = Field(ge=0)
    records: tuple[tuple[int, str | None], ...] = ()


class FinalReads(_Frozen):
    replicas: tuple[ReplicaRead, ...] = ()
    isolated: tuple[IsolatedRead, ...] = ()          # the txn workload's output, read by consumers
    group_offsets: tuple[GroupOffset, ...] = ()      # the txn workload's transformers' group
    # wall clock (epoch ms) when the logs were read, after the brokers stopped: no cleaning ran later, so a tombstone
    # sent less than delete.retention.ms before it cannot have been removed (None: unknown, not checked)
    read_ts_ms: float | None = None

    @classmethod
    def from_stored_records(cls, stored: Iterable[StoredRecord], leaders: dict[tuple[str, int], int] | None = None,
                            read_ts_ms: float | None = None) -> FinalReads:
        """From ``cluster.final_logs`` records (any order); ``leaders`` maps (topic, partition) to its leader."""
        grouped: dict[tuple[int, str, int], list[tuple[int, str | None]]] = {}
        writers: dict[tuple[int, str, int], list[tuple[int, int, int]]] = {}
        keys: dict[tuple[int, str, int], list[tuple[int, str]]] = {}
        for record in stored:
            replica = (record.broker, record.topic, record.partition)
            grouped.setdefault(replica, []).append((record.offset, record.value))
            if record.producer_id >= 0:
                writers.setdefault(replica, []).append((record.offset, record.producer_id, record.producer_epoch))
            if record.key is not None:
                keys.setdefault(replica, []).append((record.offset, record.key))
        leaders = leaders or {}
        return cls(replicas=tuple(
            ReplicaRead(broker=broker, topic=topic, partition=partition, records=tuple(sorted(records)),
                        leader=leaders.get((topic, partition)) == broker,
                        writers=tuple(sorted(writers.get((broker, topic, partition), ()))),
                        keys=tuple(sorted(keys.get((broker, topic, partition), ()))))
            for (broker, topic, partition), records in sorted(grouped.items())), read_ts_ms=read_ts_ms)

    def of(self, topic: str, partition: int) -> list[ReplicaRead]:
        return [r for r in self.replicas if (r.topic, r.partition) == (topic, partition)]


class HistoryFormatError(ValueError):
    """A history line that is not JSON or not a valid event; names the file and line."""


Model = TypeVar("Model", bound=BaseModel)


def read_jsonl(path: Path, model: type[Model]) -> list[Model]:
    """Every line of ``path`` as ``model``. A torn last line (the runner was killed mid-write) is an error too:
    the caller decides whether to cut it, because silently dropping it could hide a completion."""
    events = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                events.append(model.model_validate_json(line))
            except ValidationError as error:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in error.errors())
                raise HistoryFormatError(
                    f"{path}:{number}: not a valid {model.__name__}: {problems}. "
                    "Fix or remove the line (a torn last line means the run was killed while writing it)"
                ) from None
    return events


def read_operations(path: Path) -> list[Operation]:
    return read_jsonl(path, Operation)


def read_nemesis(path: Path) -> list[NemesisEvent]:
    return read_jsonl(path, NemesisEvent)


def read_final_reads(path: Path) -> FinalReads:
    try:
        return FinalReads.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as error:
        raise HistoryFormatError(f"{path}: not valid final reads: {error}") from None


class JsonLinesWriter:
    """Appends one model per line and flushes it at once, so a killed run still leaves its history.

    Producer delivery callbacks and consumer threads may record concurrently: a lock keeps lines whole.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, event: BaseModel) -> None:
        line = event.model_dump_json() + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> JsonLinesWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Recorder:
    """Builds operations with fresh indexes and the injected clocks' times and hands each to its sink
    (``JsonLinesWriter.append`` of history.jsonl / nemesis.jsonl, or a list's ``append`` in tests).

    ``complete`` takes the invoke, so a completion cannot name another operation's index or process.
    """

    def __init__(self, operations: Callable[[Operation], None], nemesis: Callable[[NemesisEvent], None],
                 wall_ms: Callable[[], float], monotonic_ns: Callable[[], int]) -> None:
        self._operations = operations
        self._nemesis = nemesis
        self._wall_ms = wall_ms
        self._monotonic_ns = monotonic_ns
        self._indexes: Iterator[int] = itertools.count()
        self._lock = threading.Lock()

    def invoke(self, process: str, f: Function, **fields: Any) -> Operation:
        with self._lock:
            index = next(self._indexes)
        operation = Operation(index=index, type="invoke", process=process, f=f, ts_ms=self._wall_ms(),
                              mono_ns=self._monotonic_ns(), **fields)
        self._operations(operation)
        return operation

    def complete(self, invoke: Operation, type: Literal["ok", "fail", "info"], **fields: Any) -> Operation:
        if invoke.type != "invoke":
            raise ValueError(f"operation {invoke.index} is a {invoke.type}, not an invoke")
        carried: dict[str, Any] = {"topic": invoke.topic, "partition": invoke.partition, "value": invoke.value,
                                   "key": invoke.key}
        operation = Operation(index=invoke.index, type=type, process=invoke.process, f=invoke.f,
                              ts_ms=self._wall_ms(), mono_ns=self._monotonic_ns(), **(carried | fields))
        self._operations(operation)
        return operation

    def nemesis(self, type: Literal["start", "stop"], kind: str, targets: Iterable[int] = (), detail: str = "",
                step: int | None = None) -> NemesisEvent:
        event = NemesisEvent(type=type, kind=kind, ts_ms=self._wall_ms(), mono_ns=self._monotonic_ns(),
                             targets=tuple(targets), detail=detail, step=step)
        self._nemesis(event)
        return event


# The broker refused these before appending (or the client never sent the record): the write did not happen,
# provided no earlier attempt of the same send reached a broker, which only a client without retries knows.
# KAFKA_STORAGE_ERROR is not here: a failing disk (disk-full) may have taken part of the batch.
REJECTED_BEFORE_APPEND = frozenset({
    "NOT_ENOUGH_REPLICAS", "NOT_LEADER_OR_FOLLOWER", "NOT_LEADER_FOR_PARTITION", "UNKNOWN_TOPIC_OR_PARTITION",
    "MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "CORRUPT_MESSAGE", "INVALID_RECORD", "INVALID_TIMESTAMP",
    "INVALID_REQUIRED_ACKS", "TOPIC_AUTHORIZATION_FAILED", "OUT_OF_ORDER_SEQUENCE_NUMBER", "INVALID_PRODUCER_EPOCH",
    "UNKNOWN_PRODUCER_ID",
})
# librdkafka's local errors for a record that never left the client
NEVER_SENT = frozenset({"_MSG_SIZE_TOO_LARGE", "_QUEUE_FULL", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "_INVALID_ARG"})


def send_completion(error: str, retries: bool) -> Literal["fail", "info"]:
    """``fail`` only when the send definitely did not happen. NOT_ENOUGH_REPLICAS_AFTER_APPEND, timeouts and
    broken connections are ``info``: the record may be in the leader's log and survive — reading it then is no
    aborted read. With retries on, an earlier attempt may have landed even if the last was refused."""
    if error in NEVER_SENT or (error in REJECTED_BEFORE_APPEND and not retries):
        return "fail"
    return "info"
