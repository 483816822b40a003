"""Incremental fetch sessions on the replica Fetch stream (KIP-227): which partitions a follower's request names,
what the leader's session keeps, which partitions its answer names, and the leader's ReplicaIO driven through a
session (real logs in a tmp dir, "now" passed in, purgatory clocks advanced by hand)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.replication.delayed_ops import FetchParams
from broker.replication.fetch_session import (
    INITIAL_EPOCH,
    FetchPosition,
    FollowerFetchSession,
    LeaderFetchSession,
    SessionRequest,
    next_epoch,
)
from broker.replication.partition import FetchIsolation
from broker.replication.replica_manager import FetchSessionKey
from tests.broker.support import FOLLOWER, LAG_MS, LEADER, T0, TOPIC, TP, batch
from tests.broker.test_replica_io import Answers, leader_broker, produce

A, B, C = (TOPIC, 0), (TOPIC, 1), (TOPIC, 2)
MAX_BYTES = 1 << 20


def at(offset: int, *, start: int = 0, epoch: int = 1, hw: int | None = None) -> FetchPosition:
    return FetchPosition(offset, start, epoch, offset if hw is None else hw, MAX_BYTES)


def opened(wanted: dict) -> FollowerFetchSession:
    """A follower session whose full request for ``wanted`` the leader accepted as session 7."""
    session = FollowerFetchSession()
    session.build(wanted)
    session.answered(ErrorCode.none.value, 7)
    return session


# --- the follower's side --------------------------------------------------------------------------------------

def test_the_first_request_is_full_and_names_every_partition():
    request = FollowerFetchSession().build({A: at(5), B: at(9)})
    assert request.is_full and request.session_id == 0
    assert request.partitions == {A: at(5), B: at(9)} and request.forgotten == []


def test_a_later_request_names_only_the_partitions_whose_position_changed():
    session = opened({A: at(5), B: at(9), C: at(1)})
    request = session.build({A: at(5), B: at(12), C: at(1, hw=0)})
    assert (request.session_id, request.session_epoch) == (7, 1)
    assert request.partitions == {B: at(12), C: at(1, hw=0)} and request.forgotten == []


def test_an_idle_follower_names_nothing():
    session = opened({A: at(5), B: at(9)})
    request = session.build({A: at(5), B: at(9)})
    assert request.partitions == {} and request.forgotten == []


def test_a_partition_that_leaves_the_fetch_is_forgotten_and_one_that_joins_is_named():
    session = opened({A: at(5), B: at(9)})
    request = session.build({A: at(5), C: at(0, epoch=3)})
    assert request.partitions == {C: at(0, epoch=3)} and request.forgotten == [B]


def test_the_epoch_advances_with_each_answer_and_wraps_to_one():
    session = opened({A: at(5)})
    session.build({A: at(5)})
    session.answered(ErrorCode.none.value, 7)
    assert session.epoch == 2
    assert next_epoch(2**31 - 1) == 1 and next_epoch(INITIAL_EPOCH) == 1


def test_a_refused_session_or_a_dropped_stream_starts_over_with_a_full_request():
    session = opened({A: at(5), B: at(9)})
    session.build({A: at(6), B: at(9)})
    session.answered(ErrorCode.invalid_fetch_session_epoch.value, 0)
    assert session.build({A: at(6), B: at(9)}).partitions == {A: at(6), B: at(9)}
    session = opened({A: at(5)})
    session.reset()
    assert session.build({A: at(5)}).is_full


def test_what_was_told_counts_only_once_the_leader_answered():
    session = opened({A: at(5)})
    session.build({A: at(6)})  # never answered: the stream broke, and the next request after a reset is full
    session.reset()
    assert session.build({A: at(6)}).is_full


# --- the leader's side ----------------------------------------------------------------------------------------

def test_a_full_request_opens_the_session_with_every_partition():
    session = LeaderFetchSession(7, FOLLOWER)
    error, added, removed = session.update(SessionRequest(0, INITIAL_EPOCH, {A: at(5), B: at(9)}, []))
    assert error == ErrorCode.none and added == [A, B] and removed == []
    assert session.positions == {A: at(5), B: at(9)} and session.epoch == 1


def test_an_incremental_request_updates_named_partitions_and_drops_forgotten_ones():
    session = LeaderFetchSession(7, FOLLOWER)
    session.update(SessionRequest(0, INITIAL_EPOCH, {A: at(5), B: at(9)}, []))
    error, added, removed = session.update(SessionRequest(7, 1, {A: at(6), C: at(0)}, [B]))
    assert error == ErrorCode.none and added == [C] and removed == [B]
    assert session.positions == {A: at(6), C: at(0)} and session.epoch == 2


def test_a_request_out_of_step_with_the_session_is_refused():
    session = LeaderFetchSession(7, FOLLOWER)
    session.update(SessionRequest(0, INITIAL_EPOCH, {A: at(5)}, []))
    assert session.update(SessionRequest(7, 3, {}, []))[0] == ErrorCode.invalid_fetch_session_epoch
    assert session.update(SessionRequest(8, 1, {}, []))[0] == ErrorCode.fetch_session_id_not_found
    assert session.positions == {A: at(5)}


def test_the_answer_names_only_partitions_with_new_records_hw_log_start_or_an_error(tmp_path):
    broker = leader_broker(tmp_path, history=10, partitions=(0, 1, 2, 3))
    hosted, d = broker.io.hosted, (TOPIC, 3)
    session = LeaderFetchSession(7, FOLLOWER)
    session.update(SessionRequest(0, INITIAL_EPOCH, {
        A: at(10, hw=10), B: at(10, hw=10), C: at(10, hw=10), d: at(10, hw=10, epoch=0)}, []))
    for tp in (A, B, C, d):
        hosted[tp].high_watermark = 10
    assert session.partitions_to_answer(hosted, LEADER) == [d]  # an older epoch: it is told FENCED
    produce(broker, tp=B)  # records past the follower's offset
    hosted[C].high_watermark = 9  # (a stand-in for any other HW than the follower's)
    assert session.partitions_to_answer(hosted, LEADER) == [B, C, d]
    assert session.has_data_or_error(hosted, LEADER, [A, C]) is False
    assert session.has_data_or_error(hosted, LEADER, [B]) is True


# --- ReplicaIO through a session ------------------------------------------------------------------------------

def follower_params(named: dict, max_wait_ms: int = 500) -> FetchParams:
    from broker.replication.delayed_ops import FetchPartitionRequest
    return FetchParams(FOLLOWER, max_wait_ms, 1, MAX_BYTES, FetchIsolation.LOG_END,
                       [FetchPartitionRequest(tp[0], tp[1], p.fetch_offset, p.partition_max_bytes,
                                              current_leader_epoch=p.current_leader_epoch,
                                              log_start_offset=p.log_start_offset) for tp, p in named.items()])


def session_fetch(broker, session, request: SessionRequest, now_ms: int, max_wait_ms: int = 500) -> Answers:
    assert broker.io.update_session(session, request) == ErrorCode.none
    answers = Answers()
    broker.io.session_fetch(session, follower_params(request.partitions, max_wait_ms), now_ms, answers)
    return answers


def test_an_idle_fetch_in_a_session_parks_on_one_key_and_an_append_answers_it_with_that_partition(tmp_path):
    broker = leader_broker(tmp_path, history=10, isr=(LEADER, FOLLOWER), partitions=(0, 1, 2))
    session = LeaderFetchSession(7, FOLLOWER)
    first = session_fetch(broker, session, SessionRequest(0, 0, {tp: at(10, hw=0) for tp in (A, B, C)}, []), T0)
    assert not first.answered  # a new HW alone waits for records or max_wait_ms, as min_bytes says
    broker.io.fetch_purgatory.advance_clock(T0 + 500)
    assert set(first.only) == {A, B, C}  # the follower learns the HW, now 10
    idle = session_fetch(broker, session, SessionRequest(7, 1, {tp: at(10) for tp in (A, B, C)}, []), T0 + 1)
    assert not idle.answered
    # one watch for the session, not one per partition
    assert broker.io.fetch_purgatory.watch_keys() == [FetchSessionKey(7)]
    assert broker.io.fetch_purgatory.num_delayed == 1
    produce(broker, tp=B, now_ms=T0 + 2)
    assert list(idle.only) == [B] and idle.only[B].read.region is not None


def test_a_parked_session_fetch_expires_with_an_empty_answer(tmp_path):
    broker = leader_broker(tmp_path, history=3, isr=(LEADER, FOLLOWER), partitions=(0, 1))
    session = LeaderFetchSession(7, FOLLOWER)
    session_fetch(broker, session, SessionRequest(0, 0, {A: at(3), B: at(3)}, []), T0)
    idle = session_fetch(broker, session, SessionRequest(7, 1, {}, []), T0 + 10)
    broker.io.fetch_purgatory.advance_clock(T0 + 10 + 500)
    assert idle.only == {}


def test_a_named_partition_moves_the_leaders_view_of_the_follower_and_the_high_watermark(tmp_path):
    broker = leader_broker(tmp_path, history=0, isr=(LEADER, FOLLOWER), partitions=(0, 1))
    session = LeaderFetchSession(7, FOLLOWER)
    session_fetch(broker, session, SessionRequest(0, 0, {A: at(0), B: at(0)}, []), T0)
    acks = Answers()
    broker.io.append_records({A: batch()}, -1, 1000, T0 + 1, acks)
    assert not acks.answered
    session_fetch(broker, session, SessionRequest(7, 1, {A: at(1, hw=0)}, []), T0 + 2)
    assert acks.only[A].error == ErrorCode.none
    assert broker.io.hosted[A].followers[FOLLOWER].log_end_offset == 1


def test_a_follower_at_the_leo_in_a_live_session_counts_as_caught_up_until_its_last_fetch(tmp_path):
    # Its idle fetches name nothing; when the leader appends, the follower was caught up at its last fetch.
    broker = leader_broker(tmp_path, history=1, isr=(LEADER, FOLLOWER), partitions=(0,))
    session = LeaderFetchSession(7, FOLLOWER)
    session_fetch(broker, session, SessionRequest(0, 0, {A: at(1)}, []), T0, max_wait_ms=0)
    session_fetch(broker, session, SessionRequest(7, 1, {}, []), T0 + LAG_MS, max_wait_ms=0)
    produce(broker, tp=A, now_ms=T0 + LAG_MS + 1)
    broker.io.shrink_isrs(T0 + LAG_MS + 2)
    assert broker.proposals == []
    broker.io.shrink_isrs(T0 + 2 * LAG_MS + 1)  # no fetch since: it has fallen out
    assert [p.isr for p in broker.proposals] == [(LEADER,)]


def test_a_closed_session_stops_watching_its_partitions_and_answers_its_parked_fetch(tmp_path):
    broker = leader_broker(tmp_path, history=1, isr=(LEADER, FOLLOWER), partitions=(0,))
    session = LeaderFetchSession(7, FOLLOWER)
    session_fetch(broker, session, SessionRequest(0, 0, {A: at(1)}, []), T0)
    parked = session_fetch(broker, session, SessionRequest(7, 1, {}, []), T0 + 1)
    broker.io.close_session(session)
    assert parked.only == {} and broker.io.fetch_purgatory.watch_keys() == []
    produce(broker, tp=A)  # nothing watches A for the session any more
    assert TP in broker.io.hosted


def test_an_isr_expansion_that_could_not_be_proposed_is_retried_on_a_fetch_that_names_nothing(tmp_path):
    broker = leader_broker(tmp_path, history=1, isr=(LEADER,), replicas=(LEADER, FOLLOWER), partitions=(0,))
    broker.io.hosted[A].high_watermark = 1
    session = LeaderFetchSession(7, FOLLOWER)
    session_fetch(broker, session, SessionRequest(0, 0, {A: at(1)}, []), T0, max_wait_ms=0)
    assert [p.isr for p in broker.proposals] == [(LEADER, FOLLOWER)]
    broker.io.hosted[A].isr_change_failed(broker.proposals[0])  # e.g. ZooKeeper refused the write
    session_fetch(broker, session, SessionRequest(7, 1, {}, []), T0 + 500, max_wait_ms=0)
    assert [p.isr for p in broker.proposals] == [(LEADER, FOLLOWER)] * 2


def test_between_full_checks_a_session_fetch_looks_only_at_named_and_woken_partitions(tmp_path):
    broker = leader_broker(tmp_path, history=1, isr=(LEADER, FOLLOWER), partitions=(0, 1))
    hosted = broker.io.hosted
    for tp in (A, B):
        hosted[tp].high_watermark = 1
    session = LeaderFetchSession(7, FOLLOWER)
    session_fetch(broker, session, SessionRequest(0, 0, {A: at(1), B: at(1)}, []), T0, max_wait_ms=0)
    hosted[B].high_watermark = 0  # a change no wake reports
    answers = [session_fetch(broker, session, SessionRequest(7, epoch, {}, []), T0 + epoch, max_wait_ms=0).only
               for epoch in range(1, 11)]
    assert answers[:9] == [{}] * 9 and list(answers[9]) == [B]  # ten fetches on, one looks at every partition
    broker.io.wake(A, True)  # e.g. a role change: looked at on the next fetch
    hosted[A].leader_epoch = 2
    assert list(session_fetch(broker, session, SessionRequest(7, 11, {}, []), T0 + 20, max_wait_ms=0).only) == [A]


def test_the_isr_expiry_looks_only_at_partitions_where_an_isr_follower_may_be_behind(tmp_path):
    broker = leader_broker(tmp_path, history=1, isr=(LEADER, FOLLOWER), replicas=(LEADER, FOLLOWER), partitions=(0, 1))
    session = LeaderFetchSession(7, FOLLOWER)
    session_fetch(broker, session, SessionRequest(0, 0, {A: at(1), B: at(1)}, []), T0, max_wait_ms=0)
    broker.io.shrink_isrs(T0 + 1)
    assert broker.io._maybe_lagging == set()  # both caught up: later sweeps look at nothing
    produce(broker, tp=B, now_ms=T0 + 2)
    assert broker.io._maybe_lagging == {B}
    broker.io.shrink_isrs(T0 + 2 + LAG_MS + 1)  # the follower never fetched B's new record
    assert [(p.partition, p.isr) for p in broker.proposals] == [(1, (LEADER,))]
