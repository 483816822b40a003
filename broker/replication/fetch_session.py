"""KIP-227 incremental fetch sessions on the replica Fetch stream, both sides, pure bookkeeping.

The first request of a stream is full (session epoch 0): it names every partition the follower fetches, and the
leader answers with a session id. Each later request names only the partitions whose fetch position changed (fetch
offset, log start, leader epoch, high watermark: so a follower's progress always reaches the leader, which moves
its view of the follower's LEO, the HW and the ISR on it) and lists under ``forgotten`` those that left the
follower's fetch (StopReplica, a LeaderAndIsr that moved the leader elsewhere, truncation, backoff). The leader
keeps the session's positions and answers only the partitions with something new: records, another HW or log start,
or an error. An idle fetch of a thousand partitions is then an empty request answered by an empty message, at the
cost of one check per partition on the leader (:meth:`LeaderFetchSession.partitions_to_answer`).

Kafka's FetchSessionHandler (follower) and FetchSession/FetchContext (leader), with the session living as long as
its gRPC stream: the leader needs no session cache nor eviction, a follower that restarts opens a new stream and a
new full session."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from broker.replication.partition import Partition

TopicPartition = tuple[str, int]
INITIAL_EPOCH = 0  # Kafka's FetchMetadata.INITIAL_EPOCH: a full request that opens a session
NO_SESSION_ID = 0


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 1, 2, ... and back to 1 past the largest int32 (0 only ever opens)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class FetchPosition(NamedTuple):
    """What a follower tells the leader of one partition it fetches (a tuple: built for every partition on every
    fetch, and compared with what was told before)."""

    fetch_offset: int
    log_start_offset: int
    current_leader_epoch: int
    high_watermark: int
    partition_max_bytes: int


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What one request of the session carries."""

    session_id: int
    session_epoch: int
    partitions: dict[TopicPartition, FetchPosition]
    forgotten: list[TopicPartition]

    @property
    def is_full(self) -> bool:
        return self.session_epoch == INITIAL_EPOCH


class FollowerFetchSession:
    """The follower's side (Kafka's FetchSessionHandler): what it last told the leader, and the next request."""

    def __init__(self) -> None:
        self.session_id = NO_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._told: dict[TopicPartition, FetchPosition] = {}
        self._pending: dict[TopicPartition, FetchPosition] | None = None

    def build(self, wanted: dict[TopicPartition, FetchPosition]) -> SessionRequest:
        """The next request for the partitions now fetched at these positions (``wanted`` is kept, not copied:
        the caller builds a new one for each request)."""
        self._pending = wanted
        if self.epoch == INITIAL_EPOCH:
            return SessionRequest(NO_SESSION_ID, INITIAL_EPOCH, wanted, [])
        told = self._told
        changed = {tp: position for tp, position in wanted.items() if told.get(tp) != position}
        forgotten = [tp for tp in told if tp not in wanted]
        return SessionRequest(self.session_id, self.epoch, changed, forgotten)

    def answered(self, error_code: int, session_id: int) -> None:
        """The leader answered the request last built: the session moves on, or (an error) starts over."""
        if error_code != ErrorCode.none.value or self._pending is None:
            self.reset()
            return
        self._told, self._pending = self._pending, None
        self.session_id = session_id
        self.epoch = next_epoch(self.epoch)

    def reset(self) -> None:
        """The stream ended or the leader refused the session: the next request is full."""
        self.session_id, self.epoch = NO_SESSION_ID, INITIAL_EPOCH
        self._told, self._pending = {}, None


class LeaderFetchSession:
    """The leader's side: one per follower stream, the partitions in it at the positions the follower last named."""

    def __init__(self, session_id: int, replica_id: int) -> None:
        self.session_id = session_id
        self.replica_id = replica_id
        self.epoch = INITIAL_EPOCH  # the epoch the next request must carry (0 until a full request opened it)
        self.positions: dict[TopicPartition, FetchPosition] = {}
        self.last_fetch_ms = 0
        self.touched: set[TopicPartition] = set()  # woken since the session's last answer
        self.fetches = 0

    def update(self, request: SessionRequest) -> tuple[ErrorCode, list[TopicPartition], list[TopicPartition]]:
        """Applies a request: (error, partitions that joined the session, partitions that left it). A full request
        replaces the session's partitions; an incremental one must carry the expected epoch and this session's id."""
        if request.is_full:
            removed = [tp for tp in self.positions if tp not in request.partitions]
            added = [tp for tp in request.partitions if tp not in self.positions]
            self.positions = dict(request.partitions)
            self.epoch = next_epoch(INITIAL_EPOCH)
            return ErrorCode.none, added, removed
        if request.session_id != self.session_id:
            return ErrorCode.fetch_session_id_not_found, [], []
        if request.session_epoch != self.epoch:
            return ErrorCode.invalid_fetch_session_epoch, [], []
        removed = [tp for tp in request.forgotten if self.positions.pop(tp, None) is not None]
        added = [tp for tp in request.partitions if tp not in self.positions]
        self.positions.update(request.partitions)
        self.epoch = next_epoch(self.epoch)
        return ErrorCode.none, added, removed

    def partitions_to_answer(self, hosted: Mapping[TopicPartition, Partition], local_broker_id: int,
                             among: Iterable[TopicPartition] | None = None) -> list[TopicPartition]:
        """The session's partitions (or ``among`` them) that have something for the follower: records past its
        fetch offset, another HW, a log start past its own, or an error to tell (not leading any more, another
        epoch). One check each: this is all an idle fetch costs the leader per partition."""
        return list(self._with_news(hosted, local_broker_id, self.positions if among is None else among,
                                    data_or_error_only=False))

    def has_data_or_error(self, hosted: Mapping[TopicPartition, Partition], local_broker_id: int,
                          among: Iterable[TopicPartition]) -> bool:
        """Whether a parked fetch should be answered now: one of ``among`` has records past the follower's fetch
        offset, or an error to tell. A new HW alone waits for the next answer, as in Kafka (min bytes)."""
        return next(self._with_news(hosted, local_broker_id, among, data_or_error_only=True), None) is not None

    def _with_news(self, hosted: Mapping[TopicPartition, Partition], local_broker_id: int,
                   among: Iterable[TopicPartition], *, data_or_error_only: bool) -> Iterator[TopicPartition]:
        """The session's partitions among these that have news for the follower, lazily (a parked fetch stops at
        the first); ``data_or_error_only`` leaves out a new HW or log start."""
        positions = self.positions
        for tp in among:
            position = positions.get(tp)
            if position is None:
                continue
            partition = hosted.get(tp)
            if (partition is None or partition.leader != local_broker_id
                    or partition.leader_epoch != position.current_leader_epoch
                    or partition.log.log_end_offset != position.fetch_offset
                    or (not data_or_error_only
                        and (partition.high_watermark != position.high_watermark
                             or partition.log.log_start_offset > position.log_start_offset))):
                yield tp
