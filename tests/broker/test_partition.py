"""Partition's replication rules (Kafka's Partition.scala / Replica.scala), driven directly through the
log port: every test runs once over the file-backed Log and once over the in-memory log.

Every "now" is passed in; no sockets, no threads. Numbers refer to kafka-internals.md §3.2–3.7.
"""

from __future__ import annotations

import sys

import pytest
from kio.schema.errors import ErrorCode

from broker.log.checkpoint import EpochEntry
from broker.log.record_batch import parse_header
from broker.replication.partition import (
    NO_EPOCH,
    FetchIsolation,
    FollowerState,
    IsrProposal,
    Partition,
    PartitionError,
)
from broker.replication.producer_state import BatchMetadata
from broker.replication.replica_log import ReplicaLog
from tests.broker.support import (
    FOLLOWER,
    LAG_MS,
    LEADER,
    OTHER,
    RECORD_TIME,
    T0,
    TOPIC,
    PARTITION,
    batch,
    fill,
    leadership,
    new_partition,
    offsets_of,
)
from tests.broker.memory_log import InMemoryLog
from tests.broker.support import open_log as open_file_log

BIG = 1 << 20


def open_log(tmp_path, **config):
    return open_file_log(tmp_path, **config)


def test_both_logs_implement_the_port(tmp_path):
    assert isinstance(open_file_log(tmp_path), ReplicaLog) and isinstance(InMemoryLog(TOPIC, PARTITION), ReplicaLog)


@pytest.fixture(autouse=True, params=["file_log", "memory_log"])
def log_kind(request, monkeypatch):
    """The same rules over both implementations of the ReplicaLog port."""
    if request.param == "memory_log":
        monkeypatch.setattr(sys.modules[__name__], "open_log", lambda tmp_path, **config: InMemoryLog(TOPIC, PARTITION))
    return request.param



def leader_partition(tmp_path, *, history: int = 0, isr=(LEADER, FOLLOWER), replicas=None, leader_epoch: int = 1,
                     high_watermark: int = 0, now_ms: int = T0) -> Partition:
    """Broker 1 leads ``orders-0`` whose log already holds ``history`` records from epoch 0."""
    log = open_log(tmp_path)
    fill(log, history)
    partition = new_partition(log, high_watermark=high_watermark)
    partition.make_leader(leadership(leader_epoch=leader_epoch, isr=isr, replicas=replicas), now_ms)
    return partition


def fetch(partition: Partition, follower: int, offset: int, now_ms: int) -> bool:
    """A follower fetch from ``offset``, with the leader's LEO sampled before the read."""
    return partition.update_follower_fetch_state(follower, offset, 0, partition.log_end_offset, now_ms)


def produce(partition: Partition, count: int = 1, *, acks: int = 1, min_insync: int = 1, now_ms: int = T0):
    return partition.append_records_to_leader(batch(count), acks, min_insync, now_ms)


def read(partition: Partition, offset: int = 0, isolation=FetchIsolation.HIGH_WATERMARK, epoch=None):
    return partition.read_records(offset, BIG, isolation=isolation, current_leader_epoch=epoch)


def read_offsets(partition: Partition, offset: int = 0, isolation=FetchIsolation.HIGH_WATERMARK):
    result = read(partition, offset, isolation)
    return [] if result.region is None else offsets_of(result.region.read_bytes())


# --- becoming leader (§3.2 makeLeader) ---------------------------------------------------------------------


def test_becoming_leader_starts_the_new_epoch_at_the_log_end_offset(tmp_path):
    partition = leader_partition(tmp_path, history=5, leader_epoch=3)
    assert partition.leader_epoch_start_offset == 5
    assert partition.log.leader_epoch_cache.entries[-1] == EpochEntry(3, 5)


def test_a_new_leader_knows_no_follower_log_end_offset_until_it_fetches_in_the_new_epoch(tmp_path):
    partition = leader_partition(tmp_path, history=5, isr=(LEADER, FOLLOWER, OTHER))
    fetch(partition, FOLLOWER, 5, T0)
    partition.make_follower(leadership(leader=FOLLOWER, leader_epoch=2, isr=(FOLLOWER, OTHER, LEADER)))
    partition.make_leader(leadership(leader_epoch=3, isr=(LEADER, FOLLOWER, OTHER)), T0 + 1)
    assert {f.broker_id: f.log_end_offset for f in partition.followers.values()} == {FOLLOWER: -1, OTHER: -1}


def test_the_high_watermark_waits_until_every_isr_follower_has_fetched_in_the_new_epoch(tmp_path):
    partition = leader_partition(tmp_path, history=5, isr=(LEADER, FOLLOWER, OTHER))
    assert partition.high_watermark == 0
    assert fetch(partition, FOLLOWER, 5, T0 + 1) is False
    assert partition.high_watermark == 0  # OTHER is in the ISR and has not fetched yet
    assert fetch(partition, OTHER, 5, T0 + 2) is True
    assert partition.high_watermark == 5


def test_a_leader_reelected_in_a_newer_epoch_keeps_what_it_knows_of_its_followers(tmp_path):
    partition = leader_partition(tmp_path, history=5)
    fetch(partition, FOLLOWER, 5, T0)
    partition.make_leader(leadership(leader_epoch=2), T0 + 1)
    assert partition.followers[FOLLOWER].log_end_offset == 5
    assert partition.leader_epoch_start_offset == 5


def test_becoming_leader_counts_isr_followers_as_caught_up_now_and_the_others_never(tmp_path):
    partition = leader_partition(tmp_path, history=4, isr=(LEADER, FOLLOWER), replicas=(LEADER, FOLLOWER, OTHER))
    in_sync, out_of_sync = partition.followers[FOLLOWER], partition.followers[OTHER]
    assert (in_sync.last_caught_up_time_ms, out_of_sync.last_caught_up_time_ms) == (T0, 0)
    for follower in (in_sync, out_of_sync):
        assert (follower.last_fetch_leader_log_end_offset, follower.last_fetch_time_ms) == (4, T0)


def test_a_sole_replica_leader_moves_the_high_watermark_to_its_log_end_offset_at_once(tmp_path):
    partition = leader_partition(tmp_path, history=3, isr=(LEADER,))
    assert partition.high_watermark == 3


# --- leader high watermark (§3.2 maybeIncrementLeaderHW) ---------------------------------------------------


def test_the_high_watermark_is_the_smallest_log_end_offset_in_the_isr(tmp_path):
    partition = leader_partition(tmp_path, history=10, isr=(LEADER, FOLLOWER, OTHER))
    fetch(partition, FOLLOWER, 10, T0 + 1)
    fetch(partition, OTHER, 6, T0 + 1)
    assert partition.high_watermark == 6


def test_the_high_watermark_never_moves_backwards(tmp_path):
    partition = leader_partition(tmp_path, history=10, high_watermark=8)
    assert fetch(partition, FOLLOWER, 4, T0 + 1) is False
    assert partition.high_watermark == 8


def test_a_lagging_follower_outside_the_isr_does_not_hold_the_high_watermark_back(tmp_path):
    partition = leader_partition(tmp_path, history=10, isr=(LEADER, FOLLOWER), replicas=(LEADER, FOLLOWER, OTHER))
    fetch(partition, OTHER, 2, T0 + 1)
    fetch(partition, FOLLOWER, 10, T0 + 1)
    assert partition.high_watermark == 10


def test_a_caught_up_follower_outside_the_isr_holds_the_high_watermark_at_its_log_end_offset(tmp_path):
    partition = leader_partition(tmp_path, history=10, isr=(LEADER, FOLLOWER), replicas=(LEADER, FOLLOWER, OTHER))
    fetch(partition, FOLLOWER, 10, T0)
    fetch(partition, OTHER, 10, T0 + 100)  # at the leader's LEO: caught up now
    produce(partition, 5, now_ms=T0 + 150)
    fetch(partition, FOLLOWER, 15, T0 + 200)
    assert partition.high_watermark == 10


def test_a_follower_outside_the_isr_stops_counting_once_it_has_lagged_for_the_lag_time(tmp_path):
    partition = leader_partition(tmp_path, history=10, isr=(LEADER, FOLLOWER), replicas=(LEADER, FOLLOWER, OTHER))
    fetch(partition, FOLLOWER, 10, T0)
    fetch(partition, OTHER, 10, T0 + 100)
    produce(partition, 5, now_ms=T0 + 150)
    fetch(partition, FOLLOWER, 15, T0 + 100 + LAG_MS + 1)
    assert partition.high_watermark == 15


def test_only_the_leader_computes_a_high_watermark(tmp_path):
    partition = leader_partition(tmp_path, history=5, isr=(LEADER,))
    partition.make_follower(leadership(leader=FOLLOWER, leader_epoch=2, isr=(FOLLOWER, LEADER)))
    partition.log.append_as_follower(batch(base_offset=5, leader_epoch=2))
    assert partition.maybe_increment_high_watermark(T0 + 1) is False
    assert partition.high_watermark == 5


# --- follower fetch state (§3.2 Replica.updateFetchState) --------------------------------------------------


def test_a_fetch_at_the_leader_log_end_offset_marks_the_follower_caught_up_now():
    follower = FollowerState(FOLLOWER, last_caught_up_time_ms=T0, last_fetch_leader_log_end_offset=5,
                             last_fetch_time_ms=T0 + 100)
    follower.update_fetch_state(fetch_offset=8, log_start_offset=0, leader_log_end_offset=8, now_ms=T0 + 500)
    assert follower.last_caught_up_time_ms == T0 + 500


def test_a_fetch_at_the_previous_fetchs_leader_log_end_offset_marks_it_caught_up_as_of_the_previous_fetch():
    follower = FollowerState(FOLLOWER, last_caught_up_time_ms=T0, last_fetch_leader_log_end_offset=5,
                             last_fetch_time_ms=T0 + 100)
    follower.update_fetch_state(fetch_offset=5, log_start_offset=0, leader_log_end_offset=8, now_ms=T0 + 500)
    assert follower.last_caught_up_time_ms == T0 + 100


def test_a_fetch_behind_both_leader_log_end_offsets_leaves_the_caught_up_time_alone():
    follower = FollowerState(FOLLOWER, last_caught_up_time_ms=T0, last_fetch_leader_log_end_offset=5,
                             last_fetch_time_ms=T0 + 100)
    follower.update_fetch_state(fetch_offset=4, log_start_offset=0, leader_log_end_offset=8, now_ms=T0 + 500)
    assert follower.last_caught_up_time_ms == T0


def test_the_caught_up_time_never_moves_backwards():
    follower = FollowerState(FOLLOWER, last_caught_up_time_ms=T0 + 900, last_fetch_leader_log_end_offset=5,
                             last_fetch_time_ms=T0 + 100)
    follower.update_fetch_state(fetch_offset=5, log_start_offset=0, leader_log_end_offset=8, now_ms=T0 + 1000)
    assert follower.last_caught_up_time_ms == T0 + 900


def test_every_fetch_records_the_follower_offsets_and_the_leader_log_end_offset_it_saw():
    follower = FollowerState(FOLLOWER)
    follower.update_fetch_state(fetch_offset=4, log_start_offset=2, leader_log_end_offset=8, now_ms=T0 + 500)
    assert (follower.log_end_offset, follower.log_start_offset) == (4, 2)
    assert (follower.last_fetch_leader_log_end_offset, follower.last_fetch_time_ms) == (8, T0 + 500)


def test_a_fetch_from_a_broker_that_is_not_a_replica_is_refused(tmp_path):
    partition = leader_partition(tmp_path)
    with pytest.raises(PartitionError) as refused:
        fetch(partition, 9, 0, T0)
    assert refused.value.error_code == ErrorCode.not_leader_or_follower


# --- ISR expand (§3.5) -------------------------------------------------------------------------------------


def test_a_follower_that_reached_the_high_watermark_and_the_epoch_start_is_proposed_for_the_isr(tmp_path):
    partition = leader_partition(tmp_path, history=5, isr=(LEADER,), replicas=(LEADER, FOLLOWER))
    fetch(partition, FOLLOWER, 5, T0 + 1)
    proposal = partition.isr_to_expand(FOLLOWER)
    assert proposal == IsrProposal("orders", 0, leader=LEADER, leader_epoch=1, isr=(LEADER, FOLLOWER),
                                   zk_version=0, controller_epoch=1)
    assert partition.pending_isr == (LEADER, FOLLOWER)
    assert partition.isr == (LEADER,)  # only ZooKeeper's confirmation changes the ISR


def test_a_follower_below_the_high_watermark_is_not_proposed_for_the_isr(tmp_path):
    partition = leader_partition(tmp_path, history=5, isr=(LEADER,), replicas=(LEADER, FOLLOWER))
    fetch(partition, FOLLOWER, 4, T0 + 1)
    assert partition.isr_to_expand(FOLLOWER) is None
    assert partition.pending_isr is None


def test_a_follower_at_the_high_watermark_but_before_the_leader_epoch_start_is_not_proposed(tmp_path):
    # A new leader with a stale HW (4) and an ISR follower that has not fetched yet: HW stays below the
    # epoch start (10), so "LEO >= HW" alone would let OTHER in without the previous leader's tail.
    partition = leader_partition(tmp_path, history=10, high_watermark=4, isr=(LEADER, FOLLOWER),
                                 replicas=(LEADER, FOLLOWER, OTHER))
    fetch(partition, OTHER, 6, T0 + 1)
    assert partition.high_watermark == 4 and partition.followers[OTHER].log_end_offset == 6
    assert partition.isr_to_expand(OTHER) is None
    fetch(partition, OTHER, 10, T0 + 2)
    assert partition.isr_to_expand(OTHER).isr == (LEADER, FOLLOWER, OTHER)


def test_a_follower_already_in_the_isr_is_not_proposed_again(tmp_path):
    partition = leader_partition(tmp_path, history=5)
    fetch(partition, FOLLOWER, 5, T0 + 1)
    assert partition.isr_to_expand(FOLLOWER) is None


# --- ISR shrink (§3.4) -------------------------------------------------------------------------------------


def test_an_isr_follower_not_caught_up_for_longer_than_the_lag_time_is_proposed_for_removal(tmp_path):
    partition = leader_partition(tmp_path, history=5, isr=(LEADER, FOLLOWER, OTHER))
    fetch(partition, OTHER, 5, T0 + LAG_MS)
    assert partition.isr_to_shrink(T0 + LAG_MS) is None  # exactly the lag time is still in sync
    proposal = partition.isr_to_shrink(T0 + LAG_MS + 1)
    assert proposal.isr == (LEADER, OTHER)
    assert partition.pending_isr == (LEADER, OTHER) and partition.isr == (LEADER, FOLLOWER, OTHER)


def test_an_isr_follower_at_the_leader_log_end_offset_is_never_out_of_sync(tmp_path):
    partition = leader_partition(tmp_path, history=5)
    fetch(partition, FOLLOWER, 5, T0)
    assert partition.isr_to_shrink(T0 + 100 * LAG_MS) is None


def test_a_follower_that_fetches_steadily_but_never_reaches_the_log_end_is_removed(tmp_path):
    partition = leader_partition(tmp_path, history=5)
    now = T0
    for _ in range(4):  # each fetch lags behind what the leader had at the previous one
        produce(partition, 5, now_ms=now)
        fetch(partition, FOLLOWER, partition.followers[FOLLOWER].last_fetch_leader_log_end_offset - 1, now)
        now += LAG_MS // 2
    assert partition.isr_to_shrink(now).isr == (LEADER,)


def test_a_pending_isr_change_blocks_a_second_proposal(tmp_path):
    partition = leader_partition(tmp_path, history=5, isr=(LEADER, FOLLOWER), replicas=(LEADER, FOLLOWER, OTHER))
    fetch(partition, OTHER, 5, T0 + 1)
    assert partition.isr_to_expand(OTHER) is not None
    assert partition.isr_to_shrink(T0 + LAG_MS + 1) is None  # FOLLOWER is out of sync, but a change is in flight
    assert partition.isr_to_expand(OTHER) is None


def test_a_committed_isr_change_becomes_the_isr_with_the_new_zk_version(tmp_path):
    partition = leader_partition(tmp_path, history=5, isr=(LEADER,), replicas=(LEADER, FOLLOWER))
    fetch(partition, FOLLOWER, 5, T0 + 1)
    proposal = partition.isr_to_expand(FOLLOWER)
    partition.isr_change_committed(proposal, new_zk_version=1, now_ms=T0 + 2)
    assert (partition.isr, partition.zk_version, partition.pending_isr) == ((LEADER, FOLLOWER), 1, None)


def test_committing_a_shrink_releases_the_high_watermark_the_removed_follower_held_back(tmp_path):
    partition = leader_partition(tmp_path, history=5, isr=(LEADER, FOLLOWER, OTHER))
    fetch(partition, FOLLOWER, 5, T0)
    assert partition.high_watermark == 0  # OTHER never fetched
    proposal = partition.isr_to_shrink(T0 + LAG_MS + 1)
    assert partition.isr_change_committed(proposal, new_zk_version=1, now_ms=T0 + LAG_MS + 1) is True
    assert partition.high_watermark == 5


def test_a_failed_isr_change_keeps_the_old_isr_and_allows_a_new_proposal(tmp_path):
    partition = leader_partition(tmp_path, history=5)
    proposal = partition.isr_to_shrink(T0 + LAG_MS + 1)
    partition.isr_change_failed(proposal)
    assert (partition.isr, partition.zk_version, partition.pending_isr) == ((LEADER, FOLLOWER), 0, None)
    assert partition.isr_to_shrink(T0 + LAG_MS + 2) == proposal


def test_a_confirmation_arriving_after_a_new_leader_and_isr_is_ignored(tmp_path):
    partition = leader_partition(tmp_path, history=5)
    proposal = partition.isr_to_shrink(T0 + LAG_MS + 1)
    partition.make_leader(leadership(leader_epoch=2, isr=(LEADER, FOLLOWER), zk_version=7), T0 + LAG_MS + 2)
    assert partition.pending_isr is None
    assert partition.isr_change_committed(proposal, new_zk_version=8, now_ms=T0 + LAG_MS + 3) is False
    assert (partition.isr, partition.zk_version) == ((LEADER, FOLLOWER), 7)


# --- produce, acks and min.insync.replicas (§3.7) ----------------------------------------------------------


def test_acks_all_with_fewer_in_sync_replicas_than_the_minimum_is_refused_and_appends_nothing(tmp_path):
    partition = leader_partition(tmp_path, history=3, isr=(LEADER,), replicas=(LEADER, FOLLOWER))
    with pytest.raises(PartitionError) as refused:
        produce(partition, acks=-1, min_insync=2)
    assert refused.value.error_code == ErrorCode.not_enough_replicas
    assert partition.log_end_offset == 3


def test_acks_one_is_appended_whatever_the_isr_size(tmp_path):
    partition = leader_partition(tmp_path, history=3, isr=(LEADER,), replicas=(LEADER, FOLLOWER))
    info = produce(partition, 2, acks=1, min_insync=2)
    assert (info.first_offset, info.last_offset) == (3, 4)


def test_acks_all_is_appended_when_the_isr_is_exactly_the_minimum(tmp_path):
    partition = leader_partition(tmp_path, history=3)
    info = produce(partition, acks=-1, min_insync=2)
    assert (info.first_offset, partition.log_end_offset) == (3, 4)


def test_appending_to_a_follower_replica_is_refused(tmp_path):
    partition = new_partition(open_log(tmp_path))
    partition.make_follower(leadership(leader=FOLLOWER, isr=(FOLLOWER, LEADER)))
    with pytest.raises(PartitionError) as refused:
        produce(partition)
    assert refused.value.error_code == ErrorCode.not_leader_or_follower
    assert partition.log_end_offset == 0


def test_an_acks_all_batch_is_done_once_the_high_watermark_passes_it(tmp_path):
    partition = leader_partition(tmp_path)
    fetch(partition, FOLLOWER, 0, T0)
    required = produce(partition, 3, acks=-1, min_insync=2).last_offset + 1
    assert partition.check_enough_replicas_reach_offset(required, 2) == (False, ErrorCode.none)
    fetch(partition, FOLLOWER, 2, T0 + 1)
    assert partition.check_enough_replicas_reach_offset(required, 2) == (False, ErrorCode.none)
    fetch(partition, FOLLOWER, 3, T0 + 2)
    assert partition.check_enough_replicas_reach_offset(required, 2) == (True, ErrorCode.none)


def test_an_acks_all_batch_committed_after_the_isr_shrank_below_the_minimum_is_not_enough_after_append(tmp_path):
    partition = leader_partition(tmp_path)
    required = produce(partition, acks=-1, min_insync=2).last_offset + 1
    proposal = partition.isr_to_shrink(T0 + LAG_MS + 1)
    partition.isr_change_committed(proposal, new_zk_version=1, now_ms=T0 + LAG_MS + 1)
    assert partition.high_watermark == required
    assert partition.check_enough_replicas_reach_offset(required, 2) == \
        (True, ErrorCode.not_enough_replicas_after_append)


def test_an_acks_all_batch_on_a_replica_that_became_follower_is_not_leader_or_follower(tmp_path):
    partition = leader_partition(tmp_path)
    required = produce(partition, acks=-1, min_insync=2).last_offset + 1
    partition.make_follower(leadership(leader=FOLLOWER, leader_epoch=2, isr=(FOLLOWER, LEADER)))
    assert partition.check_enough_replicas_reach_offset(required, 2) == (True, ErrorCode.not_leader_or_follower)


# --- reads ---------------------------------------------------------------------------------------------------


def committed_two_of_three(tmp_path) -> Partition:
    partition = leader_partition(tmp_path)
    fetch(partition, FOLLOWER, 0, T0)
    for _ in range(3):
        produce(partition)
    fetch(partition, FOLLOWER, 2, T0 + 1)
    assert (partition.high_watermark, partition.log_end_offset) == (2, 3)
    return partition


def test_a_consumer_reads_only_up_to_the_high_watermark(tmp_path):
    partition = committed_two_of_three(tmp_path)
    assert read_offsets(partition) == [(0, 0), (1, 1)]
    assert read(partition, 2).region is None


def test_a_follower_reads_up_to_the_log_end_offset(tmp_path):
    partition = committed_two_of_three(tmp_path)
    assert read_offsets(partition, isolation=FetchIsolation.LOG_END) == [(0, 0), (1, 1), (2, 2)]


def test_a_read_carries_the_high_watermark_and_log_offsets(tmp_path):
    result = read(committed_two_of_three(tmp_path))
    assert (result.high_watermark, result.log_start_offset, result.log_end_offset) == (2, 0, 3)


def test_a_read_naming_an_older_leader_epoch_is_fenced(tmp_path):
    partition = leader_partition(tmp_path, leader_epoch=3)
    with pytest.raises(PartitionError) as refused:
        read(partition, epoch=2)
    assert refused.value.error_code == ErrorCode.fenced_leader_epoch


def test_a_read_naming_a_newer_leader_epoch_is_an_unknown_leader_epoch(tmp_path):
    partition = leader_partition(tmp_path, leader_epoch=3)
    with pytest.raises(PartitionError) as refused:
        read(partition, epoch=4)
    assert refused.value.error_code == ErrorCode.unknown_leader_epoch


@pytest.mark.parametrize("epoch", [3, NO_EPOCH, None])
def test_a_read_naming_the_current_epoch_or_none_is_served(tmp_path, epoch):
    partition = leader_partition(tmp_path, history=2, isr=(LEADER,), leader_epoch=3)
    assert offsets_of(read(partition, epoch=epoch).region.read_bytes()) == [(0, 0), (1, 1)]


def test_a_follower_replica_serves_no_reads(tmp_path):
    partition = leader_partition(tmp_path, leader_epoch=3)
    partition.make_follower(leadership(leader=FOLLOWER, leader_epoch=4, isr=(FOLLOWER, LEADER)))
    with pytest.raises(PartitionError) as refused:
        read(partition, epoch=4)
    assert refused.value.error_code == ErrorCode.not_leader_or_follower


def test_a_read_naming_an_older_epoch_at_a_deposed_leader_is_fenced(tmp_path):
    partition = leader_partition(tmp_path, leader_epoch=3)
    partition.make_follower(leadership(leader=FOLLOWER, leader_epoch=4, isr=(FOLLOWER, LEADER)))
    with pytest.raises(PartitionError) as refused:
        read(partition, epoch=3)
    assert refused.value.error_code == ErrorCode.fenced_leader_epoch


# --- follower (§3.3) ---------------------------------------------------------------------------------------


def follower_partition(tmp_path) -> Partition:
    partition = new_partition(open_log(tmp_path), broker_id=FOLLOWER)
    partition.make_follower(leadership(leader=LEADER, isr=(LEADER, FOLLOWER)))
    return partition


def test_a_follower_high_watermark_is_its_own_log_end_offset_when_the_leader_is_ahead(tmp_path):
    partition = follower_partition(tmp_path)
    partition.append_records_to_follower(batch(3, base_offset=0, leader_epoch=1), leader_high_watermark=8,
                                         leader_log_start_offset=0)
    assert (partition.log_end_offset, partition.high_watermark) == (3, 3)


def test_a_follower_high_watermark_is_the_leaders_when_the_follower_is_ahead(tmp_path):
    partition = follower_partition(tmp_path)
    partition.append_records_to_follower(batch(5, base_offset=0, leader_epoch=1), leader_high_watermark=4,
                                         leader_log_start_offset=0)
    assert (partition.log_end_offset, partition.high_watermark) == (5, 4)


def test_a_follower_moves_its_log_start_offset_up_to_the_leaders_but_not_past_its_high_watermark(tmp_path):
    partition = follower_partition(tmp_path)
    partition.append_records_to_follower(batch(5, base_offset=0, leader_epoch=1), leader_high_watermark=3,
                                         leader_log_start_offset=4)
    assert partition.log.log_start_offset == 3


# --- idempotent producers ----------------------------------------------------------------------------------

PID = 7


def idempotent(first_seq: int, count: int = 2, **fields: int) -> bytes:
    return batch(count, producer_id=PID, producer_epoch=0, base_sequence=first_seq, **fields)


def check(partition: Partition, records: bytes):
    return partition.check_producer_batch(parse_header(records, 0))


def test_a_retried_idempotent_batch_is_a_duplicate_answered_with_its_original_offsets(tmp_path):
    partition = leader_partition(tmp_path, history=3, isr=(LEADER,))
    partition.append_records_to_leader(idempotent(0), 1, 1, T0)
    partition.append_records_to_leader(idempotent(2), 1, 1, T0)
    decision = check(partition, idempotent(0))
    assert decision.duplicate_of == BatchMetadata(first_seq=0, last_seq=1, first_offset=3, last_offset=4,
                                                  timestamp=RECORD_TIME + 1)


def test_the_next_idempotent_batch_in_sequence_is_appended(tmp_path):
    partition = leader_partition(tmp_path, isr=(LEADER,))
    partition.append_records_to_leader(idempotent(0), 1, 1, T0)
    assert check(partition, idempotent(2)) is None


def test_an_idempotent_batch_with_a_sequence_gap_is_out_of_order(tmp_path):
    partition = leader_partition(tmp_path, isr=(LEADER,))
    partition.append_records_to_leader(idempotent(0), 1, 1, T0)
    assert check(partition, idempotent(5)).error_code == ErrorCode.out_of_order_sequence_number


def test_a_batch_without_a_producer_id_is_never_checked(tmp_path):
    partition = leader_partition(tmp_path, history=3, isr=(LEADER,))
    assert check(partition, batch()) is None


def test_duplicates_are_still_recognised_after_reopening_the_log(tmp_path):
    partition = leader_partition(tmp_path, history=3, isr=(LEADER,))
    partition.append_records_to_leader(idempotent(0), 1, 1, T0)
    if isinstance(partition.log, InMemoryLog):  # a restart keeps the batches: a new Partition over them
        reopened = new_partition(partition.log)
    else:
        partition.log.close()
        reopened = new_partition(open_log(tmp_path))
    assert check(reopened, idempotent(0)).duplicate_of.first_offset == 3
    assert check(reopened, idempotent(2)) is None


def test_a_follower_that_becomes_leader_recognises_a_retry_of_a_batch_it_replicated(tmp_path):
    partition = follower_partition(tmp_path)
    partition.append_records_to_follower(idempotent(0, base_offset=0, leader_epoch=1), leader_high_watermark=0,
                                         leader_log_start_offset=0)
    partition.make_leader(leadership(leader=FOLLOWER, leader_epoch=2, isr=(FOLLOWER,),
                                     replicas=(LEADER, FOLLOWER)), T0)
    assert check(partition, idempotent(0)).duplicate_of.first_offset == 0
