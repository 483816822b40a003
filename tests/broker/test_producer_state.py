"""The idempotent-producer rules of Kafka 2.8's ProducerStateManager, driven directly."""

import pytest
from kio.schema.errors import ErrorCode

from broker.log.record_batch import CONTROL_FLAG, BatchHeader
from broker.replication.producer_state import (
    INT32_MAX,
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    ProducerStateManager,
    increment_sequence,
)

PID = 7


def header(offset: int, producer_id: int, epoch: int, first_seq: int, count: int, timestamp: int = 1000,
           attributes: int = 0) -> BatchHeader:
    return BatchHeader(base_offset=offset, batch_length=0, partition_leader_epoch=0, magic=2, crc=0,
                       attributes=attributes, last_offset_delta=count - 1, base_timestamp=timestamp,
                       max_timestamp=timestamp, producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=first_seq, records_count=count)


class Leader:
    """A leader's log in miniature: checks, appends at the log end, records, and keeps the headers."""

    def __init__(self) -> None:
        self.state = ProducerStateManager()
        self.headers: list[BatchHeader] = []
        self.log_end_offset = 0

    def produce(self, producer_id: int, epoch: int, first_seq: int, count: int = 2, timestamp: int = 1000):
        last_seq = increment_sequence(first_seq, count - 1)
        decision = self.state.check(producer_id, epoch, first_seq, last_seq)
        if decision.should_append:
            batch = header(self.log_end_offset, producer_id, epoch, first_seq, count, timestamp)
            self.headers.append(batch)
            self.state.record_header(batch)
            self.log_end_offset += count
        return decision


def test_in_order_batches_are_appended():
    leader = Leader()
    for first_seq in (0, 2, 4, 6):
        assert leader.produce(PID, 0, first_seq).should_append
    assert leader.state.producers[PID].last_seq == 7


def test_check_alone_changes_nothing():
    state = ProducerStateManager()
    assert state.check(PID, 0, 0, 1).should_append
    assert state.producers == {}


@pytest.mark.parametrize("age", range(NUM_BATCHES_TO_RETAIN))
def test_a_retry_of_any_of_the_last_five_batches_is_answered_with_its_original_offsets(age):
    leader = Leader()
    for first_seq in range(0, 20, 2):
        leader.produce(PID, 0, first_seq)
    retried = leader.headers[-1 - age]
    decision = leader.produce(PID, 0, retried.base_sequence)
    assert not decision.should_append and decision.error_code is ErrorCode.none
    assert decision.duplicate_of == BatchMetadata(retried.base_sequence, retried.base_sequence + 1,
                                                  retried.base_offset, retried.last_offset, 1000)
    assert leader.log_end_offset == 20


def test_a_retry_of_the_sixth_newest_batch_is_out_of_order():
    leader = Leader()
    for first_seq in range(0, 12, 2):
        leader.produce(PID, 0, first_seq)
    assert leader.produce(PID, 0, 0).error_code is ErrorCode.out_of_order_sequence_number


def test_a_retry_that_only_overlaps_a_retained_batch_is_out_of_order():
    leader = Leader()
    leader.produce(PID, 0, 0, count=4)
    assert leader.produce(PID, 0, 0, count=2).error_code is ErrorCode.out_of_order_sequence_number


def test_a_gap_in_sequences_is_out_of_order_and_says_what_was_expected():
    leader = Leader()
    leader.produce(PID, 0, 0)
    decision = leader.produce(PID, 0, 5)
    assert decision.error_code is ErrorCode.out_of_order_sequence_number
    assert "next expected is 2" in decision.message


def test_an_older_epoch_is_fenced_even_when_retrying_one_of_its_own_batches():
    leader = Leader()
    leader.produce(PID, 0, 0)
    leader.produce(PID, 1, 0)
    assert leader.produce(PID, 0, 0).error_code is ErrorCode.invalid_producer_epoch
    assert leader.produce(PID, 0, 2).error_code is ErrorCode.invalid_producer_epoch


def test_a_new_epoch_must_start_at_sequence_zero():
    leader = Leader()
    leader.produce(PID, 0, 0)
    assert leader.produce(PID, 1, 2).error_code is ErrorCode.out_of_order_sequence_number


def test_an_epoch_bump_restarts_sequences_and_forgets_the_old_epochs_batches():
    leader = Leader()
    leader.produce(PID, 0, 0)
    leader.produce(PID, 0, 2)
    assert leader.produce(PID, 1, 0).should_append
    assert [b.first_seq for b in leader.state.producers[PID].batches] == [0]
    assert leader.produce(PID, 1, 2).should_append


def test_an_unknown_producer_may_continue_at_any_sequence():
    # KIP-360 (2.5+): no UNKNOWN_PRODUCER_ID when the producer's batches are gone from this partition.
    leader = Leader()
    assert leader.produce(PID, 3, 42).should_append
    assert leader.produce(PID, 3, 45).error_code is ErrorCode.out_of_order_sequence_number


def test_sequences_wrap_from_int32_max_to_zero():
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    leader = Leader()
    leader.produce(PID, 0, INT32_MAX - 3, count=2)
    assert leader.produce(PID, 0, INT32_MAX - 1, count=3).should_append  # covers MAX-1, MAX, 0
    assert leader.state.producers[PID].last_seq == 0
    assert leader.produce(PID, 0, INT32_MAX - 1, count=3).duplicate_of is not None
    assert leader.produce(PID, 0, 1).should_append


def test_batches_recorded_as_follower_let_the_new_leader_deduplicate_a_retry():
    follower = ProducerStateManager()
    follower.record(PID, 0, 0, 4, first_offset=100, last_offset=104, timestamp=5)
    assert follower.check(PID, 0, 0, 4).duplicate_of == BatchMetadata(0, 4, 100, 104, 5)
    assert follower.check(PID, 0, 5, 9).should_append


def test_a_record_set_chains_sequences_across_its_batches():
    state = ProducerStateManager()
    state.record(PID, 0, 0, 1, 0, 1, 1000)
    assert state.check_batches([(PID, 0, 2, 3), (PID, 0, 4, 5), (-1, -1, -1, -1), (8, 0, 0, 0)]).should_append
    assert state.check_batches([(PID, 0, 2, 3), (PID, 0, 5, 6)]).error_code is ErrorCode.out_of_order_sequence_number
    assert state.check_batches([(PID, 0, 2, 3), (PID, 1, 2, 3)]).error_code is ErrorCode.out_of_order_sequence_number


def test_a_duplicate_batch_in_a_record_set_answers_for_the_whole_set():
    state = ProducerStateManager()
    state.record(PID, 0, 0, 1, 0, 1, 1000)
    assert state.check_batches([(PID, 0, 2, 3), (PID, 0, 0, 1)]).duplicate_of == BatchMetadata(0, 1, 0, 1, 1000)


def test_rebuilding_from_the_logs_headers_after_a_restart_equals_the_live_state():
    leader = Leader()
    for first_seq in range(0, 16, 2):
        leader.produce(PID, 0, first_seq, timestamp=first_seq)
        leader.produce(8, 2, first_seq, count=1)
    leader.produce(8, 3, 0)
    leader.headers.append(header(leader.log_end_offset, -1, -1, -1, 3))  # not idempotent: no state
    restarted = ProducerStateManager()
    restarted.rebuild((h, None) for h in leader.headers)
    assert restarted.producers == leader.state.producers
    assert restarted.check(PID, 0, 6, 7) == leader.state.check(PID, 0, 6, 7)


def test_a_transaction_marker_in_the_log_moves_the_producer_to_its_epoch():
    state = ProducerStateManager()
    state.rebuild([(header(0, PID, 0, 0, 2), None), (header(2, PID, 1, -1, 1, attributes=CONTROL_FLAG), None)])
    assert state.producers[PID].producer_epoch == 1 and not state.producers[PID].batches
    assert state.check(PID, 1, 2, 3).error_code is ErrorCode.out_of_order_sequence_number
    assert state.check(PID, 1, 0, 1).should_append


def test_truncation_forgets_the_batches_at_and_above_the_offset_so_they_can_be_appended_again():
    leader = Leader()
    for first_seq in (0, 2, 4):
        leader.produce(PID, 0, first_seq)
    leader.state.truncate_to(2)
    assert [b.last_offset for b in leader.state.producers[PID].batches] == [1]
    assert leader.state.check(PID, 0, 2, 3).should_append
    rebuilt = ProducerStateManager()
    rebuilt.rebuild((h, None) for h in leader.headers if h.last_offset < 2)
    assert rebuilt.producers == leader.state.producers


def test_truncation_below_all_of_a_producers_batches_forgets_the_producer():
    leader = Leader()
    leader.produce(8, 0, 0)
    leader.produce(PID, 0, 0)
    leader.state.truncate_to(2)
    assert list(leader.state.producers) == [8]


def test_producers_idle_past_the_expiration_are_forgotten():
    state = ProducerStateManager()
    state.record(PID, 0, 0, 0, 0, 0, timestamp=1_000)
    state.record(8, 0, 0, 0, 1, 1, timestamp=5_000)
    state.remove_expired(now_ms=11_000, expiration_ms=10_000)
    assert list(state.producers) == [8]


def test_batches_behind_one_refused_for_lack_of_replicas_wait_for_it_instead_of_being_out_of_order():
    # librdkafka answers OUT_OF_ORDER_SEQUENCE_NUMBER with an epoch bump that re-sends unacknowledged batches
    # under new sequences; a refused retry the leader already held would then be stored twice.
    leader = Leader()
    leader.produce(PID, 0, 0)                      # sequences 0..1
    leader.state.refused_for_isr(PID, 0, 2)        # the batch at 2 found the ISR too small
    decision = leader.produce(PID, 0, 4)           # the next in flight arrives after the ISR grew back
    assert decision.error_code is ErrorCode.not_enough_replicas
    assert "sequence 2" in decision.message
    assert leader.produce(PID, 0, 2).should_append  # the client retries in order
    assert leader.produce(PID, 0, 4).should_append
    assert leader.produce(PID, 0, 7).error_code is ErrorCode.out_of_order_sequence_number  # a real gap again


def test_a_refused_retry_the_leader_already_holds_still_makes_the_next_batches_wait():
    leader = Leader()
    leader.produce(PID, 0, 0)
    leader.produce(PID, 0, 2)                      # held from replication, acknowledgement lost
    leader.state.refused_for_isr(PID, 0, 2)        # its retry: NOT_ENOUGH_REPLICAS
    leader.state.refused_for_isr(PID, 0, 4)        # and the next batch's too
    assert leader.produce(PID, 0, 6).error_code is ErrorCode.not_enough_replicas
    assert leader.produce(PID, 0, 2).duplicate_of is not None


def test_refusals_are_forgotten_with_a_leadership_change_or_another_epoch():
    leader = Leader()
    leader.produce(PID, 0, 0)
    leader.state.refused_for_isr(PID, 0, 2)
    assert leader.produce(PID, 1, 3).error_code is ErrorCode.out_of_order_sequence_number
    leader.state.forget_refusals()
    assert leader.produce(PID, 0, 4).error_code is ErrorCode.out_of_order_sequence_number
