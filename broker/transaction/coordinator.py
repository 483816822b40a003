"""TransactionCoordinator (Kafka's TransactionCoordinator with the cache of TransactionStateManager): InitProducerId
with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn against the transactional ids of the
__transaction_state partitions this broker leads, the abort of timed-out transactions and the expiry of idle ids.

Pure: the wall clock is injected (timestamps are stored and compared by whichever broker leads next), a change is
stored through an injected ``append`` that answers later, and a decided transaction's markers go out through an
injected ``send_markers``; whoever sends them calls ``on_markers_written`` when every partition has its marker.
A change is applied only once its record is durable; meanwhile it is the id's pending transition and any other
request is answered CONCURRENT_TRANSACTIONS."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.group.coordinator import partition_for
from broker.transaction import log_records
from broker.transaction.metadata import (
    EXPIRABLE_STATES,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    TxnState,
    TxnTransitMetadata,
)

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
Entry = tuple[bytes, bytes | None]
# (state partition, entries, done(error)): store records in __transaction_state with acks=all
AppendFunction = Callable[[int, list[Entry], Callable[[ErrorCode], None]], None]
Respond = Callable[[ErrorCode], None]
InitRespond = Callable[[ErrorCode, int, int], None]
S = TxnState


@dataclass(frozen=True)
class TxnConfig:
    state_partitions: int = 50                 # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000              # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000        # transactional.id.expiration.ms
    offsets_topic_partitions: int = 50         # where AddOffsetsToTxn finds a group's partition


@dataclass(frozen=True)
class TxnMarkerRequest:
    """One decided transaction's markers: what the marker channel writes to every partition's leader."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    state_partition: int
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True)
class TxnStateChange:
    """A durable change of a transactional id (or the in-memory PrepareEpochFence), for traces."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    old_state: TxnState
    new_state: TxnState
    partitions: frozenset[TopicPartition]
    coordinator_epoch: int
    state_partition: int
    reason: str


def map_append_error(error: ErrorCode) -> ErrorCode:
    """What a client sees when writing to __transaction_state failed
    (TransactionStateManager.appendTransactionToLog)."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                 ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error, ErrorCode.fenced_leader_epoch,
                 ErrorCode.not_coordinator):
        return ErrorCode.not_coordinator
    return error if error == ErrorCode.none else ErrorCode.unknown_server_error


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, append: AppendFunction, send_markers: Callable[[TxnMarkerRequest], None],
                 clock: Callable[[], int], on_state_change: Callable[[TxnStateChange], None] = lambda _: None) -> None:
        self.config = config
        self._append = append
        self._send_markers = send_markers
        self.now_ms = clock
        self._on_state_change = on_state_change
        self.owned_partitions: dict[int, int] = {}  # state partition -> coordinator epoch (its leader epoch)
        self.loading_partitions: dict[int, int] = {}
        self.transactions: dict[str, TransactionMetadata] = {}
        # decided transactions whose markers are written but whose Complete* record could not be stored yet
        self._completions_to_retry: dict[str, TxnMarkerRequest] = {}
        self._completing: dict[str, TxnTransitMetadata] = {}  # the Complete* of each transaction being finished

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.state_partitions)

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        partition = self.partition_of(transactional_id)
        if partition in self.loading_partitions:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self.owned_partitions:
            return ErrorCode.not_coordinator
        return None

    # --- InitProducerId -----------------------------------------------------------------------------

    def handle_init_producer_id(self, transactional_id: str, timeout_ms: int,
                                expected: tuple[int, int] | None, new_producer_id: Callable[[], int],
                                respond: InitRespond) -> None:
        """``expected``: the (producer id, epoch) a KIP-360 client (InitProducerId v3+) says it has, if any."""
        def fail(error: ErrorCode) -> None:
            respond(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)

        if transactional_id == "":
            return fail(ErrorCode.invalid_request)
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return fail(ErrorCode.invalid_transaction_timeout)
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return fail(error)
        now = self.now_ms()
        txn = self.transactions.get(transactional_id)
        if txn is None:
            txn = TransactionMetadata(transactional_id, new_producer_id(), NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                                      NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY, set(), -1, now)
            self.transactions[transactional_id] = txn
        if txn.pending_state is not None:
            return fail(ErrorCode.concurrent_transactions)
        if expected is not None and expected[0] != NO_PRODUCER_ID and not self._is_valid_producer_id(txn, expected):
            return fail(ErrorCode.producer_fenced)
        if txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return fail(ErrorCode.concurrent_transactions)
        if txn.state is S.ONGOING:
            # Abort the open transaction under the next epoch and have the client retry: its retry bumps the epoch
            # once more (or rotates the producer id if that exhausted it), and the old producer is fenced.
            return self._fence_and_abort(txn, "fenced by InitProducerId",
                                         lambda e: fail(ErrorCode.concurrent_transactions if e == ErrorCode.none
                                                        else e))
        if txn.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return fail(ErrorCode.concurrent_transactions)  # Dead: on its way out of the cache
        if txn.is_epoch_exhausted() and (expected is None or expected[1] == txn.producer_epoch):
            transit = txn.prepare_producer_id_rotation(new_producer_id(), timeout_ms, now,
                                                       record_last_epoch=expected is not None)
        else:
            bumped = self._bumped_epochs(txn, expected)
            if bumped is None:
                return fail(ErrorCode.producer_fenced)
            transit = txn.prepare_epoch_bump(timeout_ms, now, *bumped)
        self._store(txn, transit, "InitProducerId",
                    lambda e: respond(e, transit.producer_id, transit.producer_epoch) if e == ErrorCode.none
                    else fail(e))

    @staticmethod
    def _is_valid_producer_id(txn: TransactionMetadata, expected: tuple[int, int]) -> bool:
        # Kafka's TransactionMetadata.isValidProducerId: a just-created id, the current producer, or the previous
        # producer retrying after a rotation it never heard the answer of.
        producer_id, epoch = expected
        return (txn.producer_epoch == NO_PRODUCER_EPOCH or producer_id == txn.producer_id
                or (producer_id == txn.last_producer_id and epoch >= 32766))

    @staticmethod
    def _bumped_epochs(txn: TransactionMetadata, expected: tuple[int, int] | None) -> tuple[int, int] | None:
        """(new epoch, last epoch) of prepareIncrementProducerEpoch; None: the expected epoch is stale."""
        bumped = txn.producer_epoch + 1
        if expected is None:
            return bumped, NO_PRODUCER_EPOCH
        if expected[1] in (NO_PRODUCER_EPOCH, txn.producer_epoch):
            return bumped, txn.producer_epoch
        if expected[1] == txn.last_producer_epoch:
            return txn.producer_epoch, txn.last_producer_epoch  # a retry of a bump already made
        return None

    # --- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                        ) -> tuple[ErrorCode | None, TransactionMetadata | None]:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error, None
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced, None
        if txn.pending_state is not None:
            return ErrorCode.concurrent_transactions, None
        return None, txn

    def handle_add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[TopicPartition], respond: Respond) -> None:
        partitions = set(partitions)
        error, txn = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error is not None:
            return respond(error)
        if txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return respond(ErrorCode.concurrent_transactions)
        if txn.state is S.ONGOING and partitions <= txn.topic_partitions:
            return respond(ErrorCode.none)
        self._store(txn, txn.prepare_add_partitions(partitions, self.now_ms()), "AddPartitionsToTxn", respond)

    def handle_add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                           respond: Respond) -> None:
        partition = partition_for(group_id, self.config.offsets_topic_partitions)
        self.handle_add_partitions(transactional_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, partition)],
                                   respond)

    # --- EndTxn -------------------------------------------------------------------------------------

    def handle_end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                       respond: Respond) -> None:
        error, txn = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error is not None:
            return respond(error)
        prepare, complete = (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT)
        if txn.state is S.ONGOING:
            return self._end(txn, prepare, f"EndTxn({'commit' if commit else 'abort'})", respond)
        if txn.state is complete:
            return respond(ErrorCode.none)  # a retry of an EndTxn whose answer was lost
        if txn.state is prepare:
            return respond(ErrorCode.concurrent_transactions)
        return respond(ErrorCode.invalid_txn_state)

    def _end(self, txn: TransactionMetadata, prepare: TxnState, reason: str, respond: Respond) -> None:
        """Prepare* is stored, the requester answered, then the markers go out (Complete* follows them)."""
        transit = txn.prepare_abort_or_commit(prepare, self.now_ms())

        def stored(error: ErrorCode) -> None:
            respond(error)
            if error == ErrorCode.none:
                self._write_markers(txn)
        self._store(txn, transit, reason, stored)

    def _fence_and_abort(self, txn: TransactionMetadata, reason: str, respond: Respond) -> None:
        txn.prepare_fence_producer_epoch()
        partition = self.partition_of(txn.transactional_id)
        self._on_state_change(TxnStateChange(txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.state,
                                             S.PREPARE_EPOCH_FENCE, frozenset(txn.topic_partitions),
                                             self.owned_partitions.get(partition, -1), partition, reason))
        self._end(txn, S.PREPARE_ABORT, reason, respond)

    def _write_markers(self, txn: TransactionMetadata) -> None:
        partition = self.partition_of(txn.transactional_id)
        coordinator_epoch = self.owned_partitions.get(partition)
        if coordinator_epoch is None:
            return  # no longer the coordinator: the next one completes it after loading
        request = TxnMarkerRequest(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                   txn.state is S.PREPARE_COMMIT, coordinator_epoch, partition,
                                   frozenset(txn.topic_partitions))
        # pending until the markers are written and Complete* is stored
        self._completing[txn.transactional_id] = txn.prepare_complete(self.now_ms())
        if request.partitions:
            self._send_markers(request)
        else:
            self.on_markers_written(request)

    def on_markers_written(self, request: TxnMarkerRequest) -> None:
        """Every partition of the transaction has its marker: store Complete* (if still its coordinator)."""
        txn = self.transactions.get(request.transactional_id)
        transit = self._completing.get(request.transactional_id)
        if (txn is None or transit is None
                or self.owned_partitions.get(request.state_partition) != request.coordinator_epoch
                or txn.producer_id != request.producer_id or txn.pending_state is not transit.state):
            return

        def stored(error: ErrorCode) -> None:
            if error == ErrorCode.none or error == ErrorCode.not_coordinator:
                self._completing.pop(request.transactional_id, None)
                self._completions_to_retry.pop(request.transactional_id, None)
                return
            # the markers are written, only the record is missing: the id stays pending, retried at the next check
            log.warning("storing %s of %s failed (%s); retried at the next check", transit.state.label,
                        request.transactional_id, error.name)
            self._completions_to_retry[request.transactional_id] = request
        self._store(txn, transit, "markers written", stored, keep_pending_on_error=True)

    def retry_completions(self) -> None:
        for request in list(self._completions_to_retry.values()):
            self.on_markers_written(request)

    # --- timeouts and expiry ------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> list[str]:
        """Kafka's abortTimedOutTransactions (every transaction.abort.timed.out.transaction.cleanup.interval.ms):
        an Ongoing transaction older than its timeout is fenced and aborted."""
        self.retry_completions()
        now = self.now_ms()
        aborted = []
        for txn in list(self.transactions.values()):
            if (txn.state is S.ONGOING and txn.pending_state is None
                    and self.partition_of(txn.transactional_id) in self.owned_partitions
                    and txn.txn_start_timestamp + txn.txn_timeout_ms < now):
                aborted.append(txn.transactional_id)
                self._fence_and_abort(txn, "timed out", lambda _e: None)
        return aborted

    def expire_transactional_ids(self) -> list[str]:
        """Kafka's removeExpiredTransactionalIds: an id idle for transactional.id.expiration.ms gets a tombstone
        and leaves the cache."""
        now = self.now_ms()
        expired = []
        for txn in list(self.transactions.values()):
            if (txn.state in EXPIRABLE_STATES and txn.pending_state is None
                    and self.partition_of(txn.transactional_id) in self.owned_partitions
                    and txn.txn_last_update_timestamp <= now - self.config.id_expiration_ms):
                expired.append(txn.transactional_id)
                transit = txn.prepare_dead()

                def removed(error: ErrorCode, txn: TransactionMetadata = txn) -> None:
                    if error == ErrorCode.none and self.transactions.get(txn.transactional_id) is txn:
                        del self.transactions[txn.transactional_id]
                self._store(txn, transit, "transactional.id.expiration.ms", removed, tombstone=True)
        return expired

    # --- storing ------------------------------------------------------------------------------------

    def _store(self, txn: TransactionMetadata, transit: TxnTransitMetadata, reason: str, done: Respond,
               tombstone: bool = False, keep_pending_on_error: bool = False) -> None:
        partition = self.partition_of(txn.transactional_id)
        coordinator_epoch = self.owned_partitions.get(partition)
        if coordinator_epoch is None:
            txn.abort_transition()
            return done(ErrorCode.not_coordinator)
        value = None if tombstone else log_records.encode_value(transit)

        def appended(error: ErrorCode) -> None:
            if self.owned_partitions.get(partition) != coordinator_epoch:
                # the partition moved (or came back under a new epoch) while the record was in flight: the new
                # coordinator reads what was stored, this one must not act on it
                return done(ErrorCode.not_coordinator)
            if error != ErrorCode.none:
                if not keep_pending_on_error:
                    txn.abort_transition()
                return done(map_append_error(error))
            old = txn.state
            txn.complete_transition(transit)
            self._on_state_change(TxnStateChange(txn.transactional_id, txn.producer_id, txn.producer_epoch, old,
                                                 txn.state, transit.topic_partitions or frozenset(),
                                                 coordinator_epoch, partition, reason))
            done(ErrorCode.none)
        self._append(partition, [(log_records.encode_key(txn.transactional_id), value)], appended)

    # --- loading ------------------------------------------------------------------------------------

    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        self.loading_partitions[partition] = coordinator_epoch

    def load_partition(self, partition: int, coordinator_epoch: int, entries: Iterable[Entry]) -> int:
        """Replay a state partition's records (the last one of an id wins, a tombstone removes it), then finish
        the transactions that were decided but not completed: their markers are sent again."""
        loaded: dict[str, TxnTransitMetadata] = {}
        for key, value in entries:
            transactional_id = log_records.decode_key(key)
            transit = log_records.decode_value(value)
            if transit is None:
                loaded.pop(transactional_id, None)
            else:
                loaded[transactional_id] = transit
        self.loading_partitions.pop(partition, None)
        self.owned_partitions[partition] = coordinator_epoch
        for transactional_id, transit in loaded.items():
            txn = TransactionMetadata.from_transit(transactional_id, transit)
            self.transactions[transactional_id] = txn
            if txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._write_markers(txn)
        return len(loaded)

    def unload_partition(self, partition: int) -> int:
        """This broker stopped leading the partition: forget its ids (appends in flight will answer
        NOT_COORDINATOR, markers in flight are not completed here)."""
        self.loading_partitions.pop(partition, None)
        self.owned_partitions.pop(partition, None)
        gone = [t for t in self.transactions if self.partition_of(t) == partition]
        for transactional_id in gone:
            del self.transactions[transactional_id]
            self._completions_to_retry.pop(transactional_id, None)
            self._completing.pop(transactional_id, None)
        return len(gone)
