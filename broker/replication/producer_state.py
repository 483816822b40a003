"""Per-partition idempotent-producer state, as Kafka 2.8's ProducerStateManager: pure, no IO, no clock.

The leader asks ``check`` before appending a client batch that carries a producer id, and ``record``s every
batch it appends; a follower ``record``s every batch it replicates, so a new leader still recognises a
retried batch. The rules are those of ProducerStateEntry, ProducerAppendInfo.checkProducerEpoch /
checkSequence (core/src/main/scala/kafka/log/ProducerStateManager.scala) and
Log.analyzeAndValidateProducerState (core/src/main/scala/kafka/log/Log.scala). Transactions: each producer's
open transaction (its first offset, ProducerStateEntry.currentTxnFirstOffset) starts at its first transactional
batch and ends at its marker; a non-transactional batch while one is open is INVALID_TXN_STATE
(ProducerAppendInfo.appendDataBatch). The log keeps the partition's transactions (LSO, ``.txnindex``):
``broker.log.transactions``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from broker.log.record_batch import BatchHeader
from broker.log.transactions import is_transactional

NUM_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NumBatchesToRetain: the producer's max.in.flight ceiling
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """DefaultRecordBatch.incrementSequence: sequences wrap from Int32.MaxValue back to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    # NO_SEQUENCE (-1) + 1 == 0: a producer with no batches under its epoch must start at 0.
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None  # the first offset of the producer's open transaction
    # the newest transaction coordinator epoch whose marker this leader wrote for the producer (-1: none yet)
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def batch_with_sequence_range(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        # Only an exact (first, last) match is a duplicate, as in ProducerStateEntry.batchWithSequenceRange.
        return next((b for b in self.batches if b.first_seq == first_seq and b.last_seq == last_seq), None)


@dataclass(frozen=True)
class Decision:
    """Append the batch, answer with the original offsets of the batch it duplicates, or refuse it."""

    error_code: ErrorCode = ErrorCode.none
    message: str = ""
    duplicate_of: BatchMetadata | None = None

    @property
    def should_append(self) -> bool:
        return self.error_code is ErrorCode.none and self.duplicate_of is None


APPEND = Decision()


class ProducerStateManager:
    def __init__(self) -> None:
        self._producers: dict[int, ProducerStateEntry] = {}
        # producer id -> (epoch, base sequence) of the first batch refused with NOT_ENOUGH_REPLICAS since the
        # producer's last append; see refused_for_isr.
        self._refused_for_isr: dict[int, tuple[int, int]] = {}

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        return MappingProxyType(self._producers)

    def check(self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int,
              transactional: bool = False) -> Decision:
        """The leader's verdict on one client batch of producer ``producer_id`` (>= 0) before appending it."""
        decision = self.check_batches([(producer_id, producer_epoch, base_sequence, last_sequence)])
        if decision.should_append and not transactional:
            entry = self._producers.get(producer_id)
            if entry is not None and entry.current_txn_first_offset is not None:
                # ProducerAppendInfo.appendDataBatch: "Expected transactional write from producer"
                return Decision(ErrorCode.invalid_txn_state,
                                f"producer {producer_id} sent a non-transactional batch while its transaction "
                                f"from offset {entry.current_txn_first_offset} is open")
        return decision

    def check_batches(self, batches: Iterable[tuple[int, int, int, int]]) -> Decision:
        """The verdict on a produce record set: (producer_id, epoch, base_sequence, last_sequence) per batch.

        As in Log.analyzeAndValidateProducerState, duplicates are looked up in the state before this set
        (the first one found answers for the whole set), while sequences chain across the set's batches.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last sequence) within this set
        for producer_id, epoch, base_sequence, last_sequence in batches:
            if producer_id < 0:
                continue
            committed = self._producers.get(producer_id)
            if committed is not None and committed.producer_epoch == epoch:
                duplicate = committed.batch_with_sequence_range(base_sequence, last_sequence)
                if duplicate is not None:
                    return Decision(duplicate_of=duplicate)
            current_epoch, current_last_seq = pending.get(producer_id) or (
                (committed.producer_epoch, committed.last_seq) if committed else (NO_PRODUCER_EPOCH, NO_SEQUENCE))
            unknown = committed is None or committed.producer_epoch == NO_PRODUCER_EPOCH
            refusal = _refusal(producer_id, epoch, base_sequence, current_epoch, current_last_seq, unknown)
            waiting = self._waiting_for_refused_batch(producer_id, epoch, base_sequence, current_last_seq,
                                                      unknown or refusal is not None)
            if waiting is not None or refusal is not None:
                return waiting or refusal
            pending[producer_id] = (epoch, last_sequence)
        return APPEND

    def refused_for_isr(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """The leader answered this producer's batch NOT_ENOUGH_REPLICAS (nothing appended).

        The producer's next batches are usually already in flight on the same connection. Should the ISR grow
        back before they arrive, Kafka would answer them OUT_OF_ORDER_SEQUENCE_NUMBER (the refused batch left
        a gap), and librdkafka reacts to that by bumping its epoch and re-sending, under new sequence numbers,
        everything not yet acknowledged, including a refused retry this leader already held from replication:
        a duplicate. So until the producer appends again, a gap that starts at a batch refused for lack of
        replicas is answered NOT_ENOUGH_REPLICAS too, and the client retries its batches in order.
        """
        if producer_id >= 0:
            self._refused_for_isr.setdefault(producer_id, (producer_epoch, base_sequence))

    def _waiting_for_refused_batch(self, producer_id: int, epoch: int, base_sequence: int, last_sequence: int,
                                   out_of_order: bool) -> Decision | None:
        # out_of_order: the batch does not follow the producer's last one (or the producer is unknown here,
        # so nothing says what follows): if it comes after a refused batch, it has to wait for that one.
        refused = self._refused_for_isr.get(producer_id)
        if (not out_of_order or refused is None or refused[0] != epoch or base_sequence == refused[1]
                or (last_sequence != NO_SEQUENCE and refused[1] > increment_sequence(last_sequence, 1))):
            return None
        return Decision(ErrorCode.not_enough_replicas,
                        f"producer {producer_id} epoch {epoch}: its batch at sequence {refused[1]} was refused for "
                        "lack of in-sync replicas; the batches after it wait until it is retried")

    def forget_refusals(self) -> None:
        """Leadership changed: the refusals were this leader's answers, not the new one's."""
        self._refused_for_isr.clear()

    def record(self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int,
               first_offset: int, last_offset: int, timestamp: int, transactional: bool = False) -> None:
        """A data batch was appended (as leader or follower): it becomes the producer's newest batch; a
        transactional one opens the producer's transaction unless one is open."""
        self._refused_for_isr.pop(producer_id, None)
        entry = self._bump_epoch(producer_id, producer_epoch)
        entry.batches.append(BatchMetadata(base_sequence, last_sequence, first_offset, last_offset, timestamp))
        entry.last_timestamp = timestamp
        if transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset

    def note_coordinator_epoch(self, producer_id: int, coordinator_epoch: int) -> None:
        """A marker from this coordinator epoch is being written: older coordinators are fenced from now on."""
        entry = self._producers.setdefault(producer_id, ProducerStateEntry(producer_id))
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)

    def record_header(self, header: BatchHeader, coordinator_epoch: int | None = None) -> None:
        """``record`` from a batch header as stored in the log; batches without a producer id are ignored.
        ``coordinator_epoch``: an end-transaction marker's, which fences older coordinators here too, as on the
        leader that wrote it (Kafka's appendEndTxnMarker keeps it in every replica's producer state)."""
        if header.producer_id < 0:
            return
        if header.is_control:
            # A transaction marker moves the producer to its epoch but carries no sequence, and ends its open
            # transaction (appendEndTxnMarker).
            entry = self._bump_epoch(header.producer_id, header.producer_epoch)
            entry.last_timestamp = header.max_timestamp
            entry.current_txn_first_offset = None
            if coordinator_epoch is not None:
                entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
            return
        self.record(header.producer_id, header.producer_epoch, header.base_sequence,
                    increment_sequence(header.base_sequence, header.last_offset_delta),
                    header.base_offset, header.last_offset, header.max_timestamp, is_transactional(header))

    def rebuild(self, batches: Iterable[tuple[BatchHeader, int | None]]) -> None:
        """Forget everything and replay the log's batches in offset order (log load, recovery): each header with
        the coordinator epoch of an end-transaction marker (None for any other batch)."""
        self._producers.clear()
        self._refused_for_isr.clear()
        for header, coordinator_epoch in batches:
            self.record_header(header, coordinator_epoch)

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or above ``offset``, and producers left with none.

        Cheaper than Kafka's reload-from-snapshot-and-replay and exact for every producer that keeps a batch;
        a producer whose retained batches all went is forgotten and may restart at any sequence (the 2.8
        rule for unknown producers). ``rebuild`` from the remaining headers gives the exact state.
        """
        for producer_id, entry in list(self._producers.items()):
            while entry.batches and entry.batches[-1].last_offset >= offset:
                entry.batches.pop()
            if entry.current_txn_first_offset is not None and entry.current_txn_first_offset >= offset:
                entry.current_txn_first_offset = None
            if not entry.batches:
                del self._producers[producer_id]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        """Drop producers idle for ``expiration_ms`` (2.8 uses transactional.id.expiration.ms for this)."""
        for producer_id, entry in list(self._producers.items()):
            if now_ms - entry.last_timestamp >= expiration_ms:
                del self._producers[producer_id]

    def _bump_epoch(self, producer_id: int, producer_epoch: int) -> ProducerStateEntry:
        entry = self._producers.setdefault(producer_id, ProducerStateEntry(producer_id))
        if entry.producer_epoch != producer_epoch:
            # maybeUpdateProducerEpoch: a new epoch restarts the sequence space, old batches can't be retried.
            entry.batches.clear()
            entry.producer_epoch = producer_epoch
        return entry


def _refusal(producer_id: int, epoch: int, base_sequence: int, current_epoch: int, current_last_seq: int,
             unknown: bool) -> Decision | None:
    if epoch < current_epoch:
        # Since 2.7 an old epoch is INVALID_PRODUCER_EPOCH (retriable for the client), no longer PRODUCER_FENCED.
        return Decision(ErrorCode.invalid_producer_epoch,
                        f"producer {producer_id} sent epoch {epoch} but epoch {current_epoch} is current: a newer "
                        "instance of this producer took over; close this one or re-initialize it")
    if epoch != current_epoch:
        if base_sequence != 0 and current_epoch != NO_PRODUCER_EPOCH:
            return Decision(ErrorCode.out_of_order_sequence_number,
                            f"producer {producer_id} began epoch {epoch} at sequence {base_sequence}; "
                            "a new epoch must start at sequence 0")
        return None
    # KIP-360 (2.5+): a producer the partition has no state for (its batches were deleted by retention or
    # DeleteRecords, or expired) may continue at any sequence; 2.4 and older answered UNKNOWN_PRODUCER_ID.
    if unknown or in_sequence(current_last_seq, base_sequence):
        return None
    return Decision(ErrorCode.out_of_order_sequence_number,
                    f"producer {producer_id} epoch {epoch} sent sequence {base_sequence} but the next expected "
                    f"is {increment_sequence(current_last_seq, 1)}; earlier batches were lost, the producer "
                    "must reset its sequence (idempotent producers bump their epoch)")
