"""DeleteRecords at the leader (Kafka 2.8's Partition.deleteRecordsOnLeader, lowWatermarkIfLeader,
ReplicaManager.deleteRecords and DelayedDeleteRecords), driven directly: real logs in a tmp dir, "now" passed in,
the purgatory's clock advanced by hand."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from broker.replication.delayed_ops import FetchParams, FetchPartitionRequest
from broker.replication.partition import FetchIsolation, PartitionError
from broker.replication.replica_manager import ReplicaIO, ReplicaManager
from tests.broker.support import FOLLOWER, LEADER, OTHER, T0, TP, fill, leadership, new_partition, open_log
from tests.broker.test_replica_io import Answers

BIG = 1 << 20


class Cluster:
    """Broker 1 leading ``orders-0`` with ``history`` records, all committed; brokers 2 and 3 follow."""

    def __init__(self, tmp_path, *, history: int = 10, isr=(LEADER, FOLLOWER, OTHER), alive=(LEADER, FOLLOWER, OTHER)):
        self.alive = set(alive)
        self.known: set = set()
        self.io = ReplicaIO(ReplicaManager(LEADER), known_in_metadata=lambda tp: tp in self.known,
                            min_insync_replicas=lambda partition: 1,
                            is_broker_alive=lambda broker_id: broker_id in self.alive)
        self.moved: list = []
        self.io.on_log_start_moved = self.moved.append
        log = open_log(tmp_path)
        fill(log, history)
        self.partition = new_partition(log)
        self.partition.make_leader(leadership(isr=isr, replicas=(LEADER, FOLLOWER, OTHER)), T0)
        self.io.attach(self.partition)
        for follower in (FOLLOWER, OTHER):
            self.follower_fetch(follower, history, log_start_offset=0)
        assert self.partition.high_watermark == history

    def follower_fetch(self, follower: int, offset: int, *, log_start_offset: int, now_ms: int = T0 + 1) -> None:
        request = FetchPartitionRequest(*TP, offset, BIG, log_start_offset=log_start_offset)
        self.io.fetch_messages(FetchParams(follower, 0, 1, BIG, FetchIsolation.LOG_END, [request]), now_ms, Answers())

    def delete_records(self, offset: int, *, timeout_ms: int = 1000, tp=TP) -> Answers:
        answers = Answers()
        self.io.delete_records({tp: offset}, timeout_ms, T0 + 2, answers)
        return answers


# --- Partition -----------------------------------------------------------------------------------------------


def test_the_leader_moves_its_log_start_and_minus_one_means_the_high_watermark(tmp_path):
    cluster = Cluster(tmp_path)
    assert cluster.partition.delete_records_on_leader(4) == 4
    assert cluster.partition.log.log_start_offset == 4
    assert cluster.partition.delete_records_on_leader(-1) == 10
    assert cluster.partition.log.log_start_offset == 10


def test_an_offset_beyond_the_high_watermark_or_negative_is_out_of_range_and_changes_nothing(tmp_path):
    cluster = Cluster(tmp_path)
    fill(cluster.partition.log, 5)  # appended, not committed: the LEO is 15, the HW 10
    for offset in (11, -2):
        with pytest.raises(PartitionError) as refused:
            cluster.partition.delete_records_on_leader(offset)
        assert refused.value.error_code == ErrorCode.offset_out_of_range
    assert cluster.partition.log.log_start_offset == 0


def test_a_follower_replica_refuses_with_not_leader_or_follower(tmp_path):
    cluster = Cluster(tmp_path)
    cluster.partition.make_follower(leadership(leader=FOLLOWER, leader_epoch=2))
    with pytest.raises(PartitionError) as refused:
        cluster.partition.delete_records_on_leader(3)
    assert refused.value.error_code == ErrorCode.not_leader_or_follower


def test_the_low_watermark_is_the_smallest_log_start_of_the_live_replicas_in_the_isr_or_not(tmp_path):
    cluster = Cluster(tmp_path, isr=(LEADER, FOLLOWER))  # broker 3 is out of the ISR but alive: it still counts
    cluster.partition.delete_records_on_leader(6)
    alive = cluster.alive.__contains__
    assert cluster.partition.low_watermark(alive) == 0
    cluster.follower_fetch(FOLLOWER, 10, log_start_offset=6)
    assert cluster.partition.low_watermark(alive) == 0  # broker 3 has not moved
    cluster.alive.discard(OTHER)
    assert cluster.partition.low_watermark(alive) == 6  # a dead broker's replica does not hold it back


# --- ReplicaIO and DelayedDeleteRecords -----------------------------------------------------------------------


def test_delete_records_waits_until_every_live_replica_has_moved_its_log_start(tmp_path):
    cluster = Cluster(tmp_path)
    answers = cluster.delete_records(7)
    assert cluster.moved == [cluster.partition]  # segments below go, checkpoint written, traced
    assert not answers.answered
    cluster.follower_fetch(FOLLOWER, 10, log_start_offset=7)
    assert not answers.answered
    cluster.follower_fetch(OTHER, 10, log_start_offset=7)
    status = answers.only[TP]
    assert (status.error, status.low_watermark) == (ErrorCode.none, 7)


def test_delete_records_times_out_with_the_low_watermark_it_started_with(tmp_path):
    cluster = Cluster(tmp_path)
    answers = cluster.delete_records(7, timeout_ms=1000)
    cluster.follower_fetch(FOLLOWER, 10, log_start_offset=7)
    cluster.io.delete_records_purgatory.advance_clock(T0 + 2 + 1000)
    status = answers.only[TP]
    assert (status.error, status.low_watermark) == (ErrorCode.request_timed_out, 0)
    assert cluster.partition.log.log_start_offset == 7  # the leader's move is not taken back


def test_a_single_live_replica_answers_at_once(tmp_path):
    cluster = Cluster(tmp_path, isr=(LEADER,), alive=(LEADER,))
    status = cluster.delete_records(-1).only[TP]
    assert (status.error, status.low_watermark) == (ErrorCode.none, 10)


def test_an_offset_below_the_log_start_moves_nothing_and_answers_the_low_watermark(tmp_path):
    cluster = Cluster(tmp_path, isr=(LEADER,), alive=(LEADER,))
    cluster.delete_records(6)
    status = cluster.delete_records(3).only[TP]
    assert (status.error, status.low_watermark) == (ErrorCode.none, 6)
    assert cluster.moved == [cluster.partition]  # only the first request moved the start


def test_errors_answer_at_once_and_move_nothing(tmp_path):
    cluster = Cluster(tmp_path)
    assert cluster.delete_records(11).only[TP].error == ErrorCode.offset_out_of_range
    unknown = ("nope", 0)
    assert cluster.delete_records(1, tp=unknown).only[unknown].error == ErrorCode.unknown_topic_or_partition
    cluster.known.add(("orders", 1))
    assert cluster.delete_records(1, tp=("orders", 1)).only[("orders", 1)].error == ErrorCode.not_leader_or_follower
    assert cluster.partition.log.log_start_offset == 0 and cluster.moved == []


def test_a_waiting_delete_records_answers_not_leader_when_leadership_moves(tmp_path):
    cluster = Cluster(tmp_path)
    answers = cluster.delete_records(5)
    cluster.partition.make_follower(leadership(leader=FOLLOWER, leader_epoch=2))
    cluster.io.wake(TP, True)
    assert answers.only[TP].error == ErrorCode.not_leader_or_follower


def test_a_zero_timeout_answers_request_timed_out_at_the_next_tick_unless_already_done(tmp_path):
    cluster = Cluster(tmp_path)
    answers = cluster.delete_records(7, timeout_ms=0)
    cluster.io.delete_records_purgatory.advance_clock(T0 + 3)
    assert (answers.only[TP].error, answers.only[TP].low_watermark) == (ErrorCode.request_timed_out, 0)
    single = Cluster(tmp_path / "single", isr=(LEADER,), alive=(LEADER,))
    assert single.delete_records(7, timeout_ms=0).only[TP].error == ErrorCode.none
