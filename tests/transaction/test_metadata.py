"""TxnState's table of valid previous states, and pending transitions, as Kafka's TransactionMetadata has them."""

from __future__ import annotations

import pytest

from broker.transaction.metadata import (
    VALID_PREVIOUS_STATES,
    IllegalTransitionError,
    TransactionMetadata,
    TxnState,
)

S = TxnState


def metadata(state: TxnState) -> TransactionMetadata:
    return TransactionMetadata("tx", 1000, -1, 4, -1, 60_000, state, {("t", 0)} if state is S.ONGOING else set(),
                               10, 20)


def test_the_table_is_kafkas():
    assert VALID_PREVIOUS_STATES[S.PREPARE_ABORT] == {S.ONGOING, S.PREPARE_EPOCH_FENCE}
    assert VALID_PREVIOUS_STATES[S.COMPLETE_COMMIT] == {S.PREPARE_COMMIT}
    assert VALID_PREVIOUS_STATES[S.DEAD] == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert [s.byte for s in S] == list(range(8))


@pytest.mark.parametrize("state", list(S))
def test_prepare_commit_only_from_ongoing(state: TxnState):
    txn = metadata(state)
    if state is S.ONGOING:
        assert txn.prepare_abort_or_commit(S.PREPARE_COMMIT, 30).state is S.PREPARE_COMMIT
    else:
        with pytest.raises(IllegalTransitionError):
            txn.prepare_abort_or_commit(S.PREPARE_COMMIT, 30)


def test_a_pending_transition_blocks_another_and_applies_only_when_completed():
    txn = metadata(S.ONGOING)
    transit = txn.prepare_abort_or_commit(S.PREPARE_ABORT, 30)
    assert txn.state is S.ONGOING and txn.pending_state is S.PREPARE_ABORT
    with pytest.raises(IllegalTransitionError):
        txn.prepare_add_partitions({("t", 1)}, 31)
    txn.complete_transition(transit)
    assert (txn.state, txn.pending_state, txn.txn_last_update_timestamp) == (S.PREPARE_ABORT, None, 30)


def test_a_fence_aborts_under_the_next_epoch():
    txn = metadata(S.ONGOING)
    txn.prepare_fence_producer_epoch()
    transit = txn.prepare_abort_or_commit(S.PREPARE_ABORT, 30)
    assert (transit.state, transit.producer_epoch, transit.topic_partitions) == (S.PREPARE_ABORT, 5, {("t", 0)})
    txn.complete_transition(transit)
    assert txn.producer_epoch == 5


def test_a_failed_append_leaves_the_id_as_it_was():
    txn = metadata(S.EMPTY)
    txn.prepare_add_partitions({("t", 0)}, 50)
    txn.abort_transition()
    assert (txn.state, txn.pending_state, txn.topic_partitions) == (S.EMPTY, None, set())
