"""DelayedProduce, DelayedFetch and DelayedDeleteRecords (Kafka's DelayedProduce.scala, DelayedFetch.scala and
DelayedDeleteRecords.scala): an acks=all produce waits until the high watermark passes its batches; a fetch waits
for min_bytes or max_wait_ms; a DeleteRecords waits until the low watermark reaches the offsets it asked for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from broker.purgatory.delayed_operation import DelayedOperation
from broker.replication.fetch_session import LeaderFetchSession
from broker.replication.partition import FetchIsolation, LogReadResult, Partition, PartitionError

TopicPartition = tuple[str, int]
# told when an operation ends: (purgatory name, expired?, the partitions it waited on)
FinishedListener = Callable[[str, bool, list[TopicPartition]], None]


@dataclass
class ProducePartitionStatus:
    """One partition of a produce request: where its batch landed and whether acks are still pending."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    required_offset: int = -1  # acks=all is satisfied once the HW reaches this (last offset + 1)
    acks_pending: bool = False
    error_message: str | None = None


class PendingStatus(Protocol):
    """A partition's status in a DelayedPartitionAcks: its answer, and whether it still waits."""

    error: ErrorCode
    acks_pending: bool


class DelayedPartitionAcks(DelayedOperation):
    """What DelayedProduce and DelayedDeleteRecords share: a status per partition, each still pending until
    :meth:`_settle` decides it; done when none is pending, at the timeout the pending ones answer
    REQUEST_TIMED_OUT."""

    purgatory = ""  # the purgatory's name, for on_finished

    def __init__(self, timeout_ms: int, statuses: dict[TopicPartition, PendingStatus],
                 respond: Callable[[dict[TopicPartition, PendingStatus]], None],
                 on_finished: FinishedListener | None = None) -> None:
        super().__init__(timeout_ms)
        self.statuses = statuses
        self._respond = respond
        self._on_finished = on_finished
        for status in statuses.values():
            if status.acks_pending:
                status.error = ErrorCode.request_timed_out  # what an expiry answers

    def _settle(self, tp: TopicPartition, status: PendingStatus) -> None:
        """Clears ``status.acks_pending`` (with the answer) if the partition is done."""
        raise NotImplementedError

    def try_complete(self) -> bool:
        for tp, status in self.statuses.items():
            if status.acks_pending:
                self._settle(tp, status)
        if any(status.acks_pending for status in self.statuses.values()):
            return False
        completed = self.force_complete()
        if completed and self._on_finished is not None:
            self._on_finished(self.purgatory, False, list(self.statuses))
        return completed

    def on_complete(self) -> None:
        self._respond(self.statuses)

    def on_expiration(self) -> None:
        if self._on_finished is not None:
            self._on_finished(self.purgatory, True, [tp for tp, s in self.statuses.items() if s.acks_pending])


class DelayedProduce(DelayedPartitionAcks):
    purgatory = "Produce"

    def __init__(self, timeout_ms: int, statuses: dict[TopicPartition, ProducePartitionStatus],
                 lookup: Callable[[TopicPartition], Partition],
                 min_insync_replicas: Callable[[Partition], int],
                 respond: Callable[[dict[TopicPartition, ProducePartitionStatus]], None],
                 on_finished: FinishedListener | None = None) -> None:
        super().__init__(timeout_ms, statuses, respond, on_finished)
        self._lookup = lookup
        self._min_insync = min_insync_replicas

    def _settle(self, tp: TopicPartition, status: ProducePartitionStatus) -> None:
        try:
            partition = self._lookup(tp)  # raises NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION
        except PartitionError as exc:
            done, error = True, exc.error_code
        else:
            done, error = partition.check_enough_replicas_reach_offset(status.required_offset,
                                                                       self._min_insync(partition))
        if done:
            status.acks_pending, status.error = False, error


@dataclass
class DeleteRecordsPartitionStatus:
    """One partition of a DeleteRecords request: the offset its log start must reach, and the answer so far."""

    error: ErrorCode
    low_watermark: int = -1  # Kafka's INVALID_LOW_WATERMARK until known
    required_offset: int = -1
    acks_pending: bool = False
    error_message: str | None = None


LowWatermark = Callable[[TopicPartition], int]  # the leader's low watermark; raises PartitionError


class DelayedDeleteRecords(DelayedPartitionAcks):
    """Done when, for every partition, the low watermark (the smallest log start offset among the live replicas)
    has reached the requested offset or the partition answers an error (the leader moved); at the timeout the
    partitions still waiting answer REQUEST_TIMED_OUT with the low watermark known when the request arrived."""

    purgatory = "DeleteRecords"

    def __init__(self, timeout_ms: int, statuses: dict[TopicPartition, DeleteRecordsPartitionStatus],
                 low_watermark: LowWatermark,
                 respond: Callable[[dict[TopicPartition, DeleteRecordsPartitionStatus]], None],
                 on_finished: FinishedListener | None = None) -> None:
        super().__init__(timeout_ms, statuses, respond, on_finished)
        self._low_watermark = low_watermark

    def _settle(self, tp: TopicPartition, status: DeleteRecordsPartitionStatus) -> None:
        try:
            low = self._low_watermark(tp)
        except PartitionError as exc:
            status.acks_pending, status.error, status.low_watermark = False, exc.error_code, -1
            status.error_message = str(exc)
            return
        if low >= status.required_offset:
            status.acks_pending, status.error, status.low_watermark = False, ErrorCode.none, low


@dataclass
class FetchPartitionRequest:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int | None = None
    log_start_offset: int = -1  # a follower's own log start


@dataclass
class FetchPartitionResult:
    error: ErrorCode
    read: LogReadResult | None = None
    error_message: str | None = None
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) for a follower to truncate to


@dataclass
class FetchParams:
    replica_id: int  # -1 for consumers, the follower's broker id for replication
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: FetchIsolation
    partitions: list[FetchPartitionRequest] = field(default_factory=list)


ReadFunction = Callable[[FetchParams], dict[TopicPartition, FetchPartitionResult]]


class DelayedFetch(DelayedOperation):
    """Completes when the data now readable reaches min_bytes, when any partition errors (the leader
    moved, the epoch changed), or at max_wait_ms with whatever is there. Reading is index lookups
    only (no bytes copied), so checking by reading is cheap and exact."""

    def __init__(self, params: FetchParams, read: ReadFunction,
                 respond: Callable[[dict[TopicPartition, FetchPartitionResult]], None],
                 on_finished: FinishedListener | None = None) -> None:
        super().__init__(params.max_wait_ms)
        self.params = params
        self._read = read
        self._respond = respond
        self._on_finished = on_finished

    def try_complete(self) -> bool:
        results = self._read(self.params)
        available = 0
        for result in results.values():
            if result.error != ErrorCode.none or result.diverging_epoch is not None:
                return self._completed_here(self.force_complete())
            available += result.read.size if result.read else 0
        if available >= self.params.min_bytes:
            return self._completed_here(self.force_complete())
        return False

    def _completed_here(self, completed: bool) -> bool:
        if completed and self._on_finished is not None:
            self._on_finished("Fetch", False, [(p.topic, p.partition) for p in self.params.partitions])
        return completed

    def on_complete(self) -> None:
        self._respond(self._read(self.params))

    def on_expiration(self) -> None:
        if self._on_finished is not None:
            self._on_finished("Fetch", True, [(p.topic, p.partition) for p in self.params.partitions])


def partition_error(exc: PartitionError) -> FetchPartitionResult:
    return FetchPartitionResult(exc.error_code, error_message=str(exc))


class DelayedSessionFetch(DelayedOperation):
    """A follower's parked fetch in an incremental fetch session (KIP-227): watched on the session's one key, not
    on each partition's; a wake of any partition in the session notes it in ``session.touched`` and checks this
    operation, which looks at those partitions only. Completes when one has records past the follower's fetch
    offset or an error to tell, or at max_wait_ms; ``answer`` then reads what the follower is to be told of the
    partitions woken while it waited."""

    def __init__(self, timeout_ms: int, session: LeaderFetchSession, has_data_or_error: Callable[[set], bool],
                 answer: Callable[[set], None]) -> None:
        super().__init__(timeout_ms)
        self.session = session
        self._has_data_or_error = has_data_or_error
        self._answer = answer
        self._woken: set = set()

    def try_complete(self) -> bool:
        touched, self.session.touched = self.session.touched, set()
        self._woken |= touched
        if touched and self._has_data_or_error(touched):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        touched, self.session.touched = self.session.touched, set()
        self._answer(self._woken | touched)

    def on_expiration(self) -> None:
        pass
