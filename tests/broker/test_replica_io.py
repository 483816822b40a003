"""ReplicaIO with DelayedProduce and DelayedFetch (kafka-internals.md §3.7, §4.3, §4.4), driven directly:
real logs in a tmp dir, "now" passed in, purgatory clocks advanced by hand."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.log import segment as segment_module
from broker.replication.delayed_ops import FetchParams, FetchPartitionRequest
from broker.clientplane.handlers.produce import check_idempotence
from broker.replication.partition import FetchIsolation, IsrProposal, Partition
from broker.replication.replica_manager import ReplicaIO, ReplicaManager
from tests.broker.support import (
    FOLLOWER,
    LAG_MS,
    LEADER,
    OTHER,
    PARTITION,
    T0,
    TOPIC,
    TP,
    batch,
    fill,
    leadership,
    new_partition,
    offsets_of,
    open_log,
)

BIG = 1 << 20
BATCH_SIZE = len(batch())
MAX_WAIT_MS = 500


class Answers:
    """A ``respond`` callback that keeps every answer it is given."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, results: dict) -> None:
        self.calls.append(dict(results))

    @property
    def answered(self) -> bool:
        return bool(self.calls)

    @property
    def only(self) -> dict:
        assert len(self.calls) == 1, f"answered {len(self.calls)} times"
        return self.calls[0]


@dataclass
class Broker:
    io: ReplicaIO
    known_in_metadata: set = field(default_factory=set)
    proposals: list[IsrProposal] = field(default_factory=list)

    def partition(self, tp=TP) -> Partition:
        return self.io.hosted[tp]


def leader_broker(tmp_path, *, isr=(LEADER,), replicas=None, history: int = 0, min_insync: int = 1,
                  partitions=(PARTITION,)) -> Broker:
    """Broker 1, leader of the given ``orders`` partitions, each with ``history`` records."""
    broker = Broker(io=None)
    broker.io = ReplicaIO(ReplicaManager(LEADER), known_in_metadata=lambda tp: tp in broker.known_in_metadata,
                          min_insync_replicas=lambda partition: min_insync, on_isr_proposal=broker.proposals.append)
    for index in partitions:
        log = open_log(tmp_path, partition=index)
        fill(log, history)
        partition = new_partition(log)
        partition.make_leader(leadership(isr=isr, replicas=replicas), T0)
        broker.io.attach(partition)
    return broker


def produce(broker: Broker, records: bytes | None = None, *, acks: int = 1, timeout_ms: int = 1000,
            now_ms: int = T0, tp=TP, check=None) -> Answers:
    answers = Answers()
    broker.io.append_records({tp: records or batch()}, acks, timeout_ms, now_ms, answers, check=check)
    return answers


def fetch(broker: Broker, offsets: dict, *, replica_id: int = -1, now_ms: int = T0, max_wait_ms: int = MAX_WAIT_MS,
          min_bytes: int = 1, max_bytes: int = BIG, partition_max_bytes: int = BIG, epoch: int | None = None
          ) -> Answers:
    isolation = FetchIsolation.LOG_END if replica_id >= 0 else FetchIsolation.HIGH_WATERMARK
    requests = [FetchPartitionRequest(topic, index, offset, partition_max_bytes, current_leader_epoch=epoch)
                for (topic, index), offset in offsets.items()]
    answers = Answers()
    broker.io.fetch_messages(FetchParams(replica_id, max_wait_ms, min_bytes, max_bytes, isolation, requests),
                             now_ms, answers)
    return answers


def consumer_fetch(broker: Broker, offset: int, **options) -> Answers:
    return fetch(broker, {TP: offset}, **options)


def follower_fetch(broker: Broker, offset: int, now_ms: int, **options) -> Answers:
    return fetch(broker, {TP: offset}, replica_id=FOLLOWER, now_ms=now_ms, **{"max_wait_ms": 0, **options})


def fetched_offsets(result) -> list[tuple[int, int]]:
    assert result.error == ErrorCode.none, result.error_message
    region = result.read.region
    return [] if region is None else offsets_of(region.read_bytes())


# --- produce (§3.7, §4.3) ------------------------------------------------------------------------------------


def test_acks_one_answers_at_once_with_the_assigned_offsets(tmp_path):
    broker = leader_broker(tmp_path, history=3, isr=(LEADER, FOLLOWER))
    status = produce(broker, batch(2), acks=1).only[TP]
    assert (status.error, status.base_offset, status.required_offset) == (ErrorCode.none, 3, 5)
    assert status.acks_pending is False


def test_acks_zero_appends_and_answers_at_once(tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER, FOLLOWER))
    assert produce(broker, acks=0).only[TP].error == ErrorCode.none
    assert broker.partition().log_end_offset == 1


def test_acks_all_on_a_single_replica_answers_at_once(tmp_path):
    broker = leader_broker(tmp_path, history=3)
    status = produce(broker, acks=-1).only[TP]
    assert (status.error, status.base_offset) == (ErrorCode.none, 3)
    assert broker.io.produce_purgatory.num_delayed == 0


def test_acks_all_with_a_follower_waits_for_the_follower_fetch_that_moves_the_high_watermark(tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER, FOLLOWER), min_insync=2)
    answers = produce(broker, batch(2), acks=-1)
    assert not answers.answered
    follower_fetch(broker, 0, T0 + 1)
    assert not answers.answered  # the follower has not got the batch yet
    follower_fetch(broker, 2, T0 + 2)
    status = answers.only[TP]
    assert (status.error, status.base_offset) == (ErrorCode.none, 0)


def test_acks_all_expires_with_request_timed_out_once_the_purgatory_clock_passes_the_timeout(tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER, FOLLOWER))
    answers = produce(broker, acks=-1, timeout_ms=1000, now_ms=T0)
    broker.io.produce_purgatory.advance_clock(T0 + 999)
    assert not answers.answered
    broker.io.produce_purgatory.advance_clock(T0 + 1000)
    assert answers.only[TP].error == ErrorCode.request_timed_out
    assert broker.partition().log_end_offset == 1  # a timeout does not take the batch back


def test_an_expired_acks_all_produce_is_not_answered_again_when_the_high_watermark_moves(tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER, FOLLOWER))
    answers = produce(broker, acks=-1, timeout_ms=1000)
    broker.io.produce_purgatory.advance_clock(T0 + 1000)
    follower_fetch(broker, 0, T0 + 1001)
    follower_fetch(broker, 1, T0 + 1002)
    assert broker.partition().high_watermark == 1
    assert answers.only[TP].error == ErrorCode.request_timed_out


def test_invalid_acks_answers_invalid_required_acks_and_appends_nothing(tmp_path):
    broker = leader_broker(tmp_path)
    assert produce(broker, acks=2).only[TP].error == ErrorCode.invalid_required_acks
    assert broker.partition().log_end_offset == 0


def test_acks_all_with_an_isr_below_min_insync_replicas_answers_not_enough_replicas_at_once(tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER,), replicas=(LEADER, FOLLOWER), min_insync=2)
    assert produce(broker, acks=-1).only[TP].error == ErrorCode.not_enough_replicas
    assert broker.partition().log_end_offset == 0


def test_an_idempotent_batch_behind_one_refused_for_lack_of_replicas_is_refused_the_same_way(tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER,), replicas=(LEADER, FOLLOWER), min_insync=2)
    first = batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    second = batch(1, producer_id=7, producer_epoch=0, base_sequence=2)
    assert produce(broker, first, acks=-1, check=check_idempotence).only[TP].error == ErrorCode.not_enough_replicas
    broker.partition().isr = (LEADER, FOLLOWER)  # the follower rejoined before the pipelined batch arrived
    answer = produce(broker, second, acks=-1, check=check_idempotence).only[TP]
    assert answer.error == ErrorCode.not_enough_replicas  # not OUT_OF_ORDER_SEQUENCE_NUMBER
    assert broker.partition().log_end_offset == 0
    produce(broker, first, acks=-1, check=check_idempotence)
    produce(broker, second, acks=-1, check=check_idempotence)
    assert broker.partition().log_end_offset == 3


def test_produce_to_an_unknown_partition_is_unknown_topic_or_partition(tmp_path):
    broker = leader_broker(tmp_path)
    assert produce(broker, tp=("payments", 0)).only[("payments", 0)].error == ErrorCode.unknown_topic_or_partition


def test_produce_to_a_partition_known_in_metadata_but_not_hosted_here_is_not_leader_or_follower(tmp_path):
    broker = leader_broker(tmp_path)
    broker.known_in_metadata.add(("payments", 0))
    assert produce(broker, tp=("payments", 0)).only[("payments", 0)].error == ErrorCode.not_leader_or_follower


def test_produce_to_a_hosted_follower_replica_is_not_leader_or_follower(tmp_path):
    broker = leader_broker(tmp_path)
    broker.partition().make_follower(leadership(leader=FOLLOWER, leader_epoch=2, isr=(FOLLOWER, LEADER)))
    assert produce(broker).only[TP].error == ErrorCode.not_leader_or_follower


def test_a_parked_acks_all_produce_answers_not_leader_or_follower_when_the_broker_becomes_follower(tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER, FOLLOWER))
    answers = produce(broker, acks=-1)
    broker.partition().make_follower(leadership(leader=FOLLOWER, leader_epoch=2, isr=(FOLLOWER, LEADER)))
    broker.io.wake(TP, True)  # what the server does after every LeaderAndIsr
    assert answers.only[TP].error == ErrorCode.not_leader_or_follower



def test_an_append_that_moves_the_high_watermark_completes_a_parked_acks_all_produce(tmp_path):
    broker = leader_broker(tmp_path, history=10, isr=(LEADER, FOLLOWER), replicas=(LEADER, FOLLOWER, OTHER))
    follower_fetch(broker, 10, T0)
    fetch(broker, {TP: 10}, replica_id=OTHER, now_ms=T0 + 100, max_wait_ms=0)  # caught up, outside the ISR
    answers = produce(broker, acks=-1, now_ms=T0 + 150, timeout_ms=10 * LAG_MS)
    follower_fetch(broker, 11, T0 + 200)
    assert not answers.answered  # OTHER, caught up a moment ago, still holds the high watermark at 10
    produce(broker, acks=1, now_ms=T0 + 100 + LAG_MS + 1)  # OTHER no longer counts: the HW moves to 11
    assert answers.only[TP].error == ErrorCode.none


def test_the_isr_expiration_task_proposes_dropping_followers_that_fell_behind(tmp_path):
    broker = leader_broker(tmp_path, history=2, isr=(LEADER, FOLLOWER))
    broker.io.shrink_isrs(T0 + LAG_MS)
    assert broker.proposals == []
    broker.io.shrink_isrs(T0 + LAG_MS + 1)
    assert [p.isr for p in broker.proposals] == [(LEADER,)]

def test_a_retried_acks_all_batch_is_answered_only_once_the_original_is_committed(tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER, FOLLOWER), min_insync=2)
    records = batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    produce(broker, records, acks=-1, check=check_idempotence)
    broker.io.produce_purgatory.advance_clock(T0 + 1000)  # the first attempt times out; the producer retries
    retry = produce(broker, records, acks=-1, now_ms=T0 + 1100, check=check_idempotence)
    assert broker.partition().log_end_offset == 2  # recognised as a duplicate, not appended twice
    assert not retry.answered  # offsets 0..1 are still uncommitted: the follower may not have them
    follower_fetch(broker, 0, T0 + 1200)
    follower_fetch(broker, 2, T0 + 1201)
    status = retry.only[TP]
    assert (status.error, status.base_offset) == (ErrorCode.none, 0)


# --- fetch (§4.4) ------------------------------------------------------------------------------------------


def test_a_consumer_fetch_at_the_high_watermark_parks_until_an_append_moves_it(tmp_path):
    broker = leader_broker(tmp_path, history=2)
    answers = consumer_fetch(broker, 2)
    assert not answers.answered
    produce(broker)
    assert fetched_offsets(answers.only[TP]) == [(2, 2)]


def test_with_a_follower_an_append_alone_does_not_complete_a_consumer_fetch_at_the_high_watermark(tmp_path):
    broker = leader_broker(tmp_path, history=2, isr=(LEADER, FOLLOWER))
    follower_fetch(broker, 2, T0)
    answers = consumer_fetch(broker, 2)
    produce(broker)
    assert not answers.answered  # offset 2 is not committed yet
    follower_fetch(broker, 3, T0 + 1)
    assert fetched_offsets(answers.only[TP]) == [(2, 2)]


def test_a_follower_fetch_at_the_log_end_offset_parks_until_an_append(tmp_path):
    broker = leader_broker(tmp_path, history=2, isr=(LEADER, FOLLOWER))
    answers = follower_fetch(broker, 2, T0, max_wait_ms=MAX_WAIT_MS)
    assert not answers.answered
    produce(broker)  # the high watermark stays at 2; the follower is woken anyway
    assert fetched_offsets(answers.only[TP]) == [(2, 2)]


def test_a_follower_fetch_that_moves_the_high_watermark_proposes_the_follower_for_the_isr(tmp_path):
    broker = leader_broker(tmp_path, history=2, isr=(LEADER,), replicas=(LEADER, FOLLOWER))
    follower_fetch(broker, 2, T0)
    assert [p.isr for p in broker.proposals] == [(LEADER, FOLLOWER)]


def test_a_follower_fetch_naming_an_old_epoch_is_fenced_and_does_not_count_as_progress(tmp_path):
    broker = leader_broker(tmp_path, history=2, isr=(LEADER, FOLLOWER))
    answers = follower_fetch(broker, 2, T0, epoch=0)
    assert answers.only[TP].error == ErrorCode.fenced_leader_epoch
    assert broker.partition().followers[FOLLOWER].log_end_offset == -1
    assert broker.partition().high_watermark == 0


def test_a_fetch_waits_until_min_bytes_are_readable(tmp_path):
    broker = leader_broker(tmp_path)
    answers = consumer_fetch(broker, 0, min_bytes=2 * BATCH_SIZE)
    produce(broker)
    assert not answers.answered
    produce(broker)
    assert fetched_offsets(answers.only[TP]) == [(0, 0), (1, 1)]


def test_a_parked_fetch_answers_with_what_there_is_once_max_wait_passes(tmp_path):
    broker = leader_broker(tmp_path)
    answers = consumer_fetch(broker, 0, min_bytes=2 * BATCH_SIZE, now_ms=T0)
    produce(broker)
    broker.io.fetch_purgatory.advance_clock(T0 + MAX_WAIT_MS - 1)
    assert not answers.answered
    broker.io.fetch_purgatory.advance_clock(T0 + MAX_WAIT_MS)
    assert fetched_offsets(answers.only[TP]) == [(0, 0)]


def test_a_fetch_with_no_max_wait_answers_at_once_even_when_empty(tmp_path):
    broker = leader_broker(tmp_path)
    assert fetched_offsets(consumer_fetch(broker, 0, max_wait_ms=0).only[TP]) == []


def test_the_first_partition_gets_one_whole_batch_even_beyond_max_bytes(tmp_path):
    broker = leader_broker(tmp_path, history=3, partitions=(0, 1))
    answers = fetch(broker, {(TOPIC, 0): 0, (TOPIC, 1): 0}, max_bytes=10, partition_max_bytes=10)
    results = answers.only
    assert fetched_offsets(results[(TOPIC, 0)]) == [(0, 0)]
    assert fetched_offsets(results[(TOPIC, 1)]) == []


def test_fetch_max_bytes_is_shared_by_the_partitions_in_request_order(tmp_path):
    broker = leader_broker(tmp_path, history=3, partitions=(0, 1))
    answers = fetch(broker, {(TOPIC, 0): 0, (TOPIC, 1): 0}, max_bytes=BATCH_SIZE * 5 // 2)
    results = answers.only
    assert fetched_offsets(results[(TOPIC, 0)]) == [(0, 0), (1, 1)]
    assert fetched_offsets(results[(TOPIC, 1)]) == []


def test_a_fetch_beyond_the_log_end_offset_is_offset_out_of_range(tmp_path):
    broker = leader_broker(tmp_path, history=2)
    assert consumer_fetch(broker, 3).only[TP].error == ErrorCode.offset_out_of_range


def test_a_fetch_of_an_unknown_partition_answers_at_once_with_unknown_topic_or_partition(tmp_path):
    broker = leader_broker(tmp_path)
    answers = fetch(broker, {("payments", 0): 0})
    assert answers.only[("payments", 0)].error == ErrorCode.unknown_topic_or_partition


def test_a_fetch_of_a_partition_known_in_metadata_but_not_hosted_here_is_not_leader_or_follower(tmp_path):
    broker = leader_broker(tmp_path)
    broker.known_in_metadata.add(("payments", 0))
    answers = fetch(broker, {("payments", 0): 0})
    assert answers.only[("payments", 0)].error == ErrorCode.not_leader_or_follower


# --- detach --------------------------------------------------------------------------------------------------


def test_detaching_a_partition_answers_its_parked_fetch_with_not_leader_when_the_cluster_still_knows_it(tmp_path):
    broker = leader_broker(tmp_path)
    answers = consumer_fetch(broker, 0)
    broker.known_in_metadata.add(TP)
    broker.io.detach(TP)
    assert answers.only[TP].error == ErrorCode.not_leader_or_follower
    assert broker.io.fetch_purgatory.num_delayed == 0


def test_detaching_a_deleted_partition_answers_its_parked_fetch_with_unknown_topic_or_partition(tmp_path):
    broker = leader_broker(tmp_path)
    answers = consumer_fetch(broker, 0)
    partition = broker.partition()
    assert broker.io.detach(TP) is partition
    assert answers.only[TP].error == ErrorCode.unknown_topic_or_partition


def test_detaching_a_deleted_partition_answers_its_parked_acks_all_produce_with_unknown_topic_or_partition(tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER, FOLLOWER))
    answers = produce(broker, acks=-1)
    broker.io.detach(TP)
    assert answers.only[TP].error == ErrorCode.unknown_topic_or_partition
    assert broker.io.produce_purgatory.num_delayed == 0


def test_detaching_a_partition_answers_its_parked_acks_all_produce_with_not_leader_when_the_cluster_knows_it(
        tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER, FOLLOWER))
    answers = produce(broker, acks=-1)
    broker.known_in_metadata.add(TP)
    broker.io.detach(TP)
    assert answers.only[TP].error == ErrorCode.not_leader_or_follower


# --- offline log directory (KIP-112) -------------------------------------------------------------------------


def test_a_produce_whose_append_fails_on_the_disk_is_answered_kafka_storage_error_and_never_acknowledged(tmp_path):
    broker = leader_broker(tmp_path, history=2)
    log = broker.partition().log
    log.log_dir_failure_channel.maybe_add_offline_log_dir(log.directory.parent, "disk gone", OSError(5, "EIO"))
    status = produce(broker, acks=-1).only[TP]
    assert (status.error, status.base_offset) == (ErrorCode.kafka_storage_error, -1)
    assert "offline" in status.error_message
    assert broker.partition().log_end_offset == 2


def test_offline_replicas_answer_kafka_storage_error_and_release_parked_produces_and_fetches(tmp_path):
    broker = leader_broker(tmp_path, isr=(LEADER, FOLLOWER), min_insync=2)
    parked_produce = produce(broker, acks=-1)
    parked_fetch = consumer_fetch(broker, 0)
    assert not parked_produce.answered and not parked_fetch.answered
    broker.io.mark_offline([TP])
    assert parked_produce.only[TP].error == ErrorCode.kafka_storage_error
    assert parked_fetch.only[TP].error == ErrorCode.kafka_storage_error
    assert produce(broker).only[TP].error == ErrorCode.kafka_storage_error
    assert follower_fetch(broker, 0, T0 + 1).only[TP].error == ErrorCode.kafka_storage_error
    assert broker.io.produce_purgatory.num_delayed == 0 and broker.io.fetch_purgatory.num_delayed == 0


def test_an_idempotent_batch_behind_one_that_hit_a_full_disk_is_kafka_storage_error_not_out_of_order(
        tmp_path, monkeypatch):
    """Seed 1051: the producer's batch at sequence 2 hits ENOSPC; its batch at sequence 3, already in flight,
    arrives before the replicas are marked offline. Kafka's Log.append refuses the offline directory before it
    looks at sequences (KAFKA_STORAGE_ERROR, retriable). OUT_OF_ORDER_SEQUENCE_NUMBER made librdkafka bump its
    epoch and re-send, under new sequences, a batch of another partition this log dir's leader had already
    appended and replicated: a duplicate at the new leader."""
    broker = leader_broker(tmp_path)
    pid, epoch = 7, 0
    for sequence in (0, 1):
        appended = produce(broker, batch(producer_id=pid, producer_epoch=epoch, base_sequence=sequence),
                           check=check_idempotence).only[TP]
        assert (appended.error, appended.base_offset) == (ErrorCode.none, sequence)

    def full_disk(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segment_module.os, "pwrite", full_disk)
    failed = produce(broker, batch(producer_id=pid, producer_epoch=epoch, base_sequence=2),
                     check=check_idempotence).only[TP]
    assert failed.error == ErrorCode.kafka_storage_error
    monkeypatch.undo()

    behind = produce(broker, batch(producer_id=pid, producer_epoch=epoch, base_sequence=3),
                     check=check_idempotence).only[TP]
    assert (behind.error, behind.base_offset) == (ErrorCode.kafka_storage_error, -1), behind.error_message
    retried = produce(broker, batch(producer_id=pid, producer_epoch=epoch, base_sequence=1),
                      check=check_idempotence).only[TP]
    assert retried.error == ErrorCode.kafka_storage_error
    assert broker.partition().log_end_offset == 2
