"""TransactionMetadata and TxnState (Kafka's TransactionMetadata.scala): one transactional id's producer, epoch,
open partitions and state, with the valid-previous-state table and the pending transition that makes a change
wait for its record to be durable in __transaction_state. Pure."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# An epoch at this value cannot be bumped once more (a fence would overflow), so the next InitProducerId hands out a
# new producer id (TransactionMetadata.isEpochExhausted: Short.MaxValue - 1).
EXHAUSTED_EPOCH = 32766

TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    """Each state with the byte __transaction_state stores for it (PrepareEpochFence is never stored)."""

    EMPTY = ("Empty", 0)
    ONGOING = ("Ongoing", 1)
    PREPARE_COMMIT = ("PrepareCommit", 2)
    PREPARE_ABORT = ("PrepareAbort", 3)
    COMPLETE_COMMIT = ("CompleteCommit", 4)
    COMPLETE_ABORT = ("CompleteAbort", 5)
    DEAD = ("Dead", 6)
    PREPARE_EPOCH_FENCE = ("PrepareEpochFence", 7)

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def byte(self) -> int:
        return self.value[1]

    @classmethod
    def of_byte(cls, value: int) -> TxnState:
        for state in cls:
            if state.byte == value:
                return state
        raise ValueError(f"unknown transaction state byte {value}")


S = TxnState
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# only a transactional id with no transaction in flight may be forgotten (transactional.id.expiration.ms)
EXPIRABLE_STATES = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransitionError(RuntimeError):
    """A transition the state table forbids: a coordinator bug, never a client's mistake."""


@dataclass(frozen=True)
class TxnTransitMetadata:
    """What a transactional id becomes once its record is durable: the value written to __transaction_state."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    # the state a change in flight leads to: no other change starts meanwhile (CONCURRENT_TRANSACTIONS)
    pending_state: TxnState | None = None

    def is_epoch_exhausted(self) -> bool:
        return self.producer_epoch >= EXHAUSTED_EPOCH

    def _check(self, new_state: TxnState) -> None:
        if self.pending_state is not None:
            raise IllegalTransitionError(f"{self.transactional_id}: a change to {self.pending_state.label} is "
                                         f"still in flight, cannot start one to {new_state.label}")
        if self.state not in VALID_PREVIOUS_STATES[new_state]:
            raise IllegalTransitionError(f"{self.transactional_id}: {self.state.label} cannot become "
                                         f"{new_state.label}")

    def _transit(self, state: TxnState, *, producer_id: int | None = None, last_producer_id: int | None = None,
                 producer_epoch: int | None = None, last_producer_epoch: int | None = None,
                 timeout_ms: int | None = None, partitions: frozenset[TopicPartition] | None = None,
                 start: int | None = None, now: int) -> TxnTransitMetadata:
        self._check(state)
        self.pending_state = state
        return TxnTransitMetadata(
            producer_id=self.producer_id if producer_id is None else producer_id,
            last_producer_id=self.last_producer_id if last_producer_id is None else last_producer_id,
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            last_producer_epoch=self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms if timeout_ms is None else timeout_ms,
            state=state,
            topic_partitions=frozenset(self.topic_partitions) if partitions is None else partitions,
            txn_start_timestamp=self.txn_start_timestamp if start is None else start,
            txn_last_update_timestamp=now)

    # --- the transitions Kafka's TransactionMetadata prepares -------------------------------------------

    def prepare_epoch_bump(self, timeout_ms: int, now: int, epoch: int, last_epoch: int) -> TxnTransitMetadata:
        """InitProducerId on an Empty or completed id: the same producer id, the next epoch (or the same one,
        for a KIP-360 retry of a bump already made)."""
        return self._transit(S.EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch,
                             timeout_ms=timeout_ms, partitions=frozenset(), start=-1, now=now)

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        """InitProducerId when the epoch is exhausted (or the id is new): a new producer id at epoch 0. The old
        id is remembered so a KIP-360 retry with it is recognised."""
        return self._transit(S.EMPTY, producer_id=new_producer_id, last_producer_id=self.producer_id,
                             producer_epoch=0,
                             last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             timeout_ms=timeout_ms, partitions=frozenset(), start=-1, now=now)

    def prepare_fence_producer_epoch(self) -> None:
        """An Ongoing transaction is fenced (by a new producer or its timeout): nothing else may start until
        the abort that follows, written with the next epoch, is durable (CONCURRENT_TRANSACTIONS meanwhile)."""
        self._check(S.PREPARE_EPOCH_FENCE)
        self.pending_state = S.PREPARE_EPOCH_FENCE

    @property
    def fencing(self) -> bool:
        return self.pending_state is S.PREPARE_EPOCH_FENCE

    def prepare_add_partitions(self, partitions: set[TopicPartition], now: int) -> TxnTransitMetadata:
        start = now if self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else self.txn_start_timestamp
        return self._transit(S.ONGOING, partitions=frozenset(self.topic_partitions | partitions), start=start,
                             now=now)

    def prepare_abort_or_commit(self, state: TxnState, now: int) -> TxnTransitMetadata:
        if self.fencing and state is S.PREPARE_ABORT:
            # the fence goes on as this abort, written with the bumped epoch so that markers carry it and the
            # fenced producer's epoch is refused by every partition (TransactionCoordinator.endTransaction)
            self.pending_state = None
            epoch = self.producer_epoch + 1 if self.producer_epoch < 32767 else self.producer_epoch
            return self._transit(state, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH, now=now)
        return self._transit(state, now=now)

    def prepare_complete(self, now: int) -> TxnTransitMetadata:
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._transit(state, partitions=frozenset(), now=now)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._transit(S.DEAD, partitions=frozenset(), now=self.txn_last_update_timestamp)

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """The record is durable: the id becomes what it says."""
        if self.pending_state is not transit.state:
            raise IllegalTransitionError(f"{self.transactional_id}: completing {transit.state.label} but "
                                         f"{self.pending_state} is pending")
        self.producer_id, self.last_producer_id = transit.producer_id, transit.last_producer_id
        self.producer_epoch, self.last_producer_epoch = transit.producer_epoch, transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None

    def abort_transition(self) -> None:
        """The append failed: nothing changes, another request may try again."""
        self.pending_state = None

    @classmethod
    def from_transit(cls, transactional_id: str, transit: TxnTransitMetadata) -> TransactionMetadata:
        """A transactional id as loaded from its last record."""
        return cls(transactional_id, transit.producer_id, transit.last_producer_id, transit.producer_epoch,
                   transit.last_producer_epoch, transit.txn_timeout_ms, transit.state, set(transit.topic_partitions),
                   transit.txn_start_timestamp, transit.txn_last_update_timestamp)
