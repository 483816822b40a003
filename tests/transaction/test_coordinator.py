"""The transaction coordinator's rules, driven directly with an injected clock, store and marker channel:
InitProducerId (new ids, epoch bumps, rotation of an exhausted epoch, fencing of an open transaction, KIP-360
checks), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn (answered once Prepare* is durable, completed once the markers
are written), timeouts, expiry of idle ids, loading a partition another coordinator wrote and losing it."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.group.coordinator import partition_for
from broker.transaction import log_records
from broker.transaction.coordinator import TransactionCoordinator, TxnConfig, TxnMarkerRequest
from broker.transaction.metadata import TxnState

TXN = "payments-tx"
T0 = 1_700_000_000_000
TIMEOUT_MS = 60_000
PARTITIONS = 5
COORDINATOR_EPOCH = 7


class Store:
    """What the coordinator appends to __transaction_state, answered at once, held, or failed."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.held: list = []
        self.hold = False
        self.error = ErrorCode.none

    def append(self, partition, entries, done) -> None:
        if self.error != ErrorCode.none:
            done(self.error)
            return
        self.records += [(partition, key, value) for key, value in entries]
        if self.hold:
            self.held.append(done)
        else:
            done(ErrorCode.none)

    def release(self, error: ErrorCode = ErrorCode.none) -> None:
        held, self.held = self.held, []
        for done in held:
            done(error)

    def last_value(self, transactional_id: str):
        key = log_records.encode_key(transactional_id)
        return next(log_records.decode_value(v) for _, k, v in reversed(self.records) if k == key)


class Harness:
    def __init__(self, max_timeout_ms: int = 900_000, expiration_ms: int = 604_800_000) -> None:
        self.store = Store()
        self.now = T0
        self.markers: list[TxnMarkerRequest] = []
        self.changes: list[tuple[str, str, str]] = []
        self.next_pid = 1000
        self.coordinator = TransactionCoordinator(
            TxnConfig(state_partitions=PARTITIONS, max_timeout_ms=max_timeout_ms, id_expiration_ms=expiration_ms,
                      offsets_topic_partitions=10),
            self.store.append, self.markers.append, lambda: self.now,
            lambda c: self.changes.append((c.transactional_id, c.old_state.label, c.new_state.label)))
        self.coordinator.load_partition(self.coordinator.partition_of(TXN), COORDINATOR_EPOCH, [])

    def new_pid(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def init(self, txn: str = TXN, timeout_ms: int = TIMEOUT_MS, expected=None) -> list:
        answers: list = []
        self.coordinator.handle_init_producer_id(txn, timeout_ms, expected, self.new_pid,
                                                 lambda *answer: answers.append(answer))
        return answers

    def add(self, pid: int, epoch: int, partitions, txn: str = TXN) -> list:
        answers: list = []
        self.coordinator.handle_add_partitions(txn, pid, epoch, partitions, answers.append)
        return answers

    def end(self, pid: int, epoch: int, commit: bool, txn: str = TXN) -> list:
        answers: list = []
        self.coordinator.handle_end_txn(txn, pid, epoch, commit, answers.append)
        return answers

    def state(self, txn: str = TXN) -> TxnState:
        return self.coordinator.transactions[txn].state

    def started(self) -> tuple[int, int]:
        [(error, pid, epoch)] = self.init()
        assert error == ErrorCode.none
        return pid, epoch

    def ongoing(self) -> tuple[int, int]:
        pid, epoch = self.started()
        assert self.add(pid, epoch, [("orders", 0), ("orders", 1)]) == [ErrorCode.none]
        return pid, epoch

    def markers_written(self) -> None:
        markers, self.markers = self.markers, []
        for request in markers:
            self.coordinator.on_markers_written(request)


# --- InitProducerId -------------------------------------------------------------------------------

def test_a_new_transactional_id_gets_a_new_producer_id_at_epoch_zero_once_stored():
    h = Harness()
    h.store.hold = True
    answers = h.init()
    assert answers == []  # not before the Empty record is durable
    h.store.release()
    assert answers == [(ErrorCode.none, 1001, 0)]
    stored = h.store.last_value(TXN)
    assert (stored.producer_id, stored.producer_epoch, stored.state, stored.txn_timeout_ms) == \
        (1001, 0, TxnState.EMPTY, TIMEOUT_MS)
    assert h.store.records[0][0] == partition_for(TXN, PARTITIONS)


def test_init_again_bumps_the_epoch_of_the_same_producer_id():
    h = Harness()
    h.started()
    assert h.init() == [(ErrorCode.none, 1001, 1)]


def test_an_exhausted_epoch_rotates_to_a_new_producer_id():
    h = Harness()
    h.started()
    h.coordinator.transactions[TXN].producer_epoch = 32766
    assert h.init() == [(ErrorCode.none, 1002, 0)]
    assert h.coordinator.transactions[TXN].last_producer_id == 1001


def test_empty_and_too_long_timeouts_are_refused():
    h = Harness(max_timeout_ms=1000)
    assert h.init(txn="") == [(ErrorCode.invalid_request, -1, -1)]
    assert h.init(timeout_ms=1001) == [(ErrorCode.invalid_transaction_timeout, -1, -1)]
    assert h.init(timeout_ms=0) == [(ErrorCode.invalid_transaction_timeout, -1, -1)]
    assert h.init(timeout_ms=1000)[0][0] == ErrorCode.none


def test_a_change_in_flight_answers_concurrent_transactions():
    h = Harness()
    h.started()
    h.store.hold = True
    h.init()
    assert h.init() == [(ErrorCode.concurrent_transactions, -1, -1)]


def test_init_on_an_open_transaction_fences_it_aborts_it_and_asks_for_a_retry():
    h = Harness()
    pid, epoch = h.ongoing()
    answers = h.init()
    assert answers == [(ErrorCode.concurrent_transactions, -1, -1)]
    stored = h.store.last_value(TXN)
    assert (stored.state, stored.producer_epoch) == (TxnState.PREPARE_ABORT, epoch + 1)
    assert [(m.producer_epoch, m.commit, sorted(m.partitions)) for m in h.markers] == \
        [(epoch + 1, False, [("orders", 0), ("orders", 1)])]
    assert (TXN, "Ongoing", "PrepareEpochFence") in h.changes
    # the fenced producer's next request
    assert h.add(pid, epoch, [("orders", 2)]) == [ErrorCode.producer_fenced]
    assert h.init() == [(ErrorCode.concurrent_transactions, -1, -1)]  # markers still being written
    h.markers_written()
    assert h.state() is TxnState.COMPLETE_ABORT
    assert h.init() == [(ErrorCode.none, pid, epoch + 2)]
    assert h.end(pid, epoch, commit=True) == [ErrorCode.producer_fenced]


def test_kip360_an_unknown_producer_id_is_fenced_a_matching_one_bumps():
    h = Harness()
    pid, epoch = h.started()
    assert h.init(expected=(4242, 0)) == [(ErrorCode.producer_fenced, -1, -1)]
    assert h.init(expected=(pid, epoch)) == [(ErrorCode.none, pid, epoch + 1)]
    # a retry of that bump (its answer lost) gets the same epoch again
    assert h.init(expected=(pid, epoch)) == [(ErrorCode.none, pid, epoch + 1)]
    assert h.init(expected=(pid, epoch - 1 if epoch else 17)) == [(ErrorCode.producer_fenced, -1, -1)]


# --- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------------

def test_adding_partitions_makes_the_transaction_ongoing_from_now():
    h = Harness()
    pid, epoch = h.started()
    h.now += 500
    assert h.add(pid, epoch, [("orders", 0)]) == [ErrorCode.none]
    txn = h.coordinator.transactions[TXN]
    assert (txn.state, txn.topic_partitions, txn.txn_start_timestamp) == (TxnState.ONGOING, {("orders", 0)}, T0 + 500)
    h.now += 500
    assert h.add(pid, epoch, [("orders", 1)]) == [ErrorCode.none]
    assert txn.topic_partitions == {("orders", 0), ("orders", 1)} and txn.txn_start_timestamp == T0 + 500
    records = len(h.store.records)
    assert h.add(pid, epoch, [("orders", 1)]) == [ErrorCode.none]
    assert len(h.store.records) == records  # already in: nothing stored


def test_add_partitions_checks_the_producer():
    h = Harness()
    pid, epoch = h.started()
    assert h.add(pid + 1, epoch, [("orders", 0)]) == [ErrorCode.invalid_producer_id_mapping]
    assert h.add(pid, epoch + 1, [("orders", 0)]) == [ErrorCode.producer_fenced]
    same_partition = next(f"tx-{i}" for i in range(100) if partition_for(f"tx-{i}", PARTITIONS) ==
                          partition_for(TXN, PARTITIONS) and f"tx-{i}" != TXN)
    assert h.add(pid, epoch, [("orders", 0)], txn=same_partition) == [ErrorCode.invalid_producer_id_mapping]


def test_add_offsets_adds_the_groups_offsets_partition():
    h = Harness()
    pid, epoch = h.started()
    answers: list = []
    h.coordinator.handle_add_offsets(TXN, pid, epoch, "shipping", answers.append)
    assert answers == [ErrorCode.none]
    assert h.coordinator.transactions[TXN].topic_partitions == {("__consumer_offsets", partition_for("shipping", 10))}


def test_a_partition_it_does_not_lead_is_not_its_to_answer():
    h = Harness()
    other = next(f"tx-{i}" for i in range(100) if partition_for(f"tx-{i}", PARTITIONS) != partition_for(TXN,
                                                                                                          PARTITIONS))
    assert h.init(txn=other) == [(ErrorCode.not_coordinator, -1, -1)]
    h.coordinator.begin_loading(partition_for(other, PARTITIONS), 3)
    assert h.init(txn=other) == [(ErrorCode.coordinator_load_in_progress, -1, -1)]
    assert h.add(1, 0, [("orders", 0)], txn=other) == [ErrorCode.coordinator_load_in_progress]


# --- EndTxn ---------------------------------------------------------------------------------------

def test_commit_is_answered_once_prepare_commit_is_durable_then_markers_then_complete():
    h = Harness()
    pid, epoch = h.ongoing()
    h.store.hold = True
    answers = h.end(pid, epoch, commit=True)
    assert answers == [] and h.markers == []
    h.store.release()
    assert answers == [ErrorCode.none]
    assert h.state() is TxnState.PREPARE_COMMIT
    [marker] = h.markers
    assert (marker.producer_id, marker.producer_epoch, marker.commit, marker.coordinator_epoch) == \
        (pid, epoch, True, COORDINATOR_EPOCH)
    assert marker.partitions == {("orders", 0), ("orders", 1)}
    assert h.end(pid, epoch, commit=True) == [ErrorCode.concurrent_transactions]  # still writing markers
    h.store.hold = False
    h.markers_written()
    assert h.state() is TxnState.COMPLETE_COMMIT
    assert h.coordinator.transactions[TXN].topic_partitions == set()
    assert h.store.last_value(TXN).state is TxnState.COMPLETE_COMMIT
    assert [c[1:] for c in h.changes] == [("Empty", "Empty"), ("Empty", "Ongoing"), ("Ongoing", "PrepareCommit"),
                                          ("PrepareCommit", "CompleteCommit")]
    # a retry whose answer was lost, and the wrong decision
    assert h.end(pid, epoch, commit=True) == [ErrorCode.none]
    assert h.end(pid, epoch, commit=False) == [ErrorCode.invalid_txn_state]


def test_abort_goes_through_prepare_abort_to_complete_abort():
    h = Harness()
    pid, epoch = h.ongoing()
    assert h.end(pid, epoch, commit=False) == [ErrorCode.none]
    assert not h.markers[0].commit
    h.markers_written()
    assert h.state() is TxnState.COMPLETE_ABORT
    # the next transaction starts from a completed one
    assert h.add(pid, epoch, [("orders", 3)]) == [ErrorCode.none]
    assert h.state() is TxnState.ONGOING


def test_end_txn_without_a_transaction_is_an_invalid_state():
    h = Harness()
    pid, epoch = h.started()
    assert h.end(pid, epoch, commit=True) == [ErrorCode.invalid_txn_state]
    assert h.end(pid, epoch + 1, commit=True) == [ErrorCode.producer_fenced]
    assert h.end(pid + 5, epoch, commit=True) == [ErrorCode.invalid_producer_id_mapping]


def test_a_failed_append_changes_nothing_and_says_what_to_do():
    h = Harness()
    pid, epoch = h.ongoing()
    h.store.error = ErrorCode.not_enough_replicas
    assert h.end(pid, epoch, commit=True) == [ErrorCode.coordinator_not_available]
    assert h.state() is TxnState.ONGOING and h.coordinator.transactions[TXN].pending_state is None
    h.store.error = ErrorCode.not_leader_or_follower
    assert h.end(pid, epoch, commit=True) == [ErrorCode.not_coordinator]
    h.store.error = ErrorCode.none
    assert h.end(pid, epoch, commit=True) == [ErrorCode.none]


def test_complete_is_retried_when_its_record_could_not_be_stored():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(pid, epoch, commit=True)
    h.store.error = ErrorCode.not_enough_replicas
    h.markers_written()
    assert h.state() is TxnState.PREPARE_COMMIT
    assert h.end(pid, epoch, commit=True) == [ErrorCode.concurrent_transactions]
    h.store.error = ErrorCode.none
    h.coordinator.abort_timed_out_transactions()  # the periodic check retries it
    assert h.state() is TxnState.COMPLETE_COMMIT


# --- timeouts and expiry --------------------------------------------------------------------------

def test_a_transaction_older_than_its_timeout_is_fenced_and_aborted():
    h = Harness()
    pid, epoch = h.ongoing()
    h.now += TIMEOUT_MS
    assert h.coordinator.abort_timed_out_transactions() == []
    h.now += 1
    assert h.coordinator.abort_timed_out_transactions() == [TXN]
    [marker] = h.markers
    assert (marker.commit, marker.producer_epoch) == (False, epoch + 1)
    h.markers_written()
    assert h.state() is TxnState.COMPLETE_ABORT
    assert h.end(pid, epoch, commit=True) == [ErrorCode.producer_fenced]


def test_an_idle_transactional_id_expires_with_a_tombstone():
    h = Harness(expiration_ms=10_000)
    pid, epoch = h.ongoing()
    h.now += 20_000
    assert h.coordinator.expire_transactional_ids() == []  # an open transaction never expires
    h.end(pid, epoch, commit=True)
    h.markers_written()
    h.now += 10_000
    assert h.coordinator.expire_transactional_ids() == [TXN]
    assert TXN not in h.coordinator.transactions
    assert h.store.records[-1][2] is None
    assert h.changes[-1] == (TXN, "CompleteCommit", "Dead")
    assert h.init() == [(ErrorCode.none, 1002, 0)]  # a new producer id


# --- loading and unloading ------------------------------------------------------------------------

def test_a_new_coordinator_loads_the_records_and_finishes_decided_transactions():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(pid, epoch, commit=True)  # PrepareCommit stored; the coordinator dies before the markers
    records = [(key, value) for _, key, value in h.store.records]
    successor = Harness()
    successor.coordinator.unload_partition(successor.coordinator.partition_of(TXN))
    partition = successor.coordinator.partition_of(TXN)
    successor.coordinator.begin_loading(partition, COORDINATOR_EPOCH + 1)
    assert successor.init() == [(ErrorCode.coordinator_load_in_progress, -1, -1)]
    assert successor.coordinator.load_partition(partition, COORDINATOR_EPOCH + 1, records) == 1
    [marker] = successor.markers
    assert (marker.producer_id, marker.commit, marker.coordinator_epoch) == (pid, True, COORDINATOR_EPOCH + 1)
    successor.markers_written()
    assert successor.state() is TxnState.COMPLETE_COMMIT


def test_a_tombstone_removes_an_id_when_loading():
    h = Harness()
    h.started()
    records = [(key, value) for _, key, value in h.store.records] + [(log_records.encode_key(TXN), None)]
    assert h.coordinator.load_partition(h.coordinator.partition_of(TXN), 9, records) == 0


def test_an_append_that_lands_after_the_partition_moved_answers_not_coordinator():
    h = Harness()
    pid, epoch = h.ongoing()
    h.store.hold = True
    answers = h.end(pid, epoch, commit=True)
    assert h.coordinator.unload_partition(h.coordinator.partition_of(TXN)) == 1
    h.store.release()
    assert answers == [ErrorCode.not_coordinator]
    assert h.markers == []


def test_markers_of_an_old_coordinator_epoch_do_not_complete():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(pid, epoch, commit=True)
    [marker] = h.markers
    partition = h.coordinator.partition_of(TXN)
    records = [(key, value) for _, key, value in h.store.records]
    h.coordinator.unload_partition(partition)
    h.coordinator.load_partition(partition, COORDINATOR_EPOCH + 1, records)
    h.coordinator.on_markers_written(marker)  # the old epoch's send finishing late
    assert h.state() is TxnState.PREPARE_COMMIT
    h.markers = h.markers[1:]
    h.markers_written()
    assert h.state() is TxnState.COMPLETE_COMMIT
