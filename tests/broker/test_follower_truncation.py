"""A follower's truncation that moves its high watermark is told as progress, as a new HW from its leader is: the
broker's HW checkpoint collects the HWs again only when ReplicaIO's HW generation moved, which progress bumps, so
the checkpoint (and a restart reading it) has the lowered HW, not the one from before the truncation."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.replication.replica_fetcher import FetcherSettings, PartitionFetchState, ReplicaFetcher
from broker.replication.truncation import TruncationRule
from clusterplane import cluster_pb2 as pb
from tests.broker.support import FOLLOWER, LEADER, TOPIC, fill, leadership, new_partition, open_log
from traces.writer import TraceWriter

SETTINGS = FetcherSettings(broker_id=FOLLOWER, max_wait_ms=500, min_bytes=1, partition_max_bytes=1 << 20,
                           response_max_bytes=10 << 20, backoff_ms=100, socket_timeout_ms=1000,
                           truncation_rule=TruncationRule.KIP_279)


def follower_with_history(tmp_path, *, records: int, high_watermark: int):
    log_ = open_log(tmp_path)
    fill(log_, records)
    partition = new_partition(log_, broker_id=FOLLOWER, high_watermark=high_watermark)
    partition.make_follower(leadership(leader=LEADER, leader_epoch=1))
    return partition


def answer(partition, **fields) -> pb.ReplicaFetchPartitionData:
    return pb.ReplicaFetchPartitionData(topic=TOPIC, partition=partition.partition, **fields)


def leader_answers(tmp_path, partition, data: pb.ReplicaFetchPartitionData) -> list[tuple[int, int]]:
    """What the broker is told of its follower's progress (HW, LEO) when the leader answers ``data``."""
    told = []

    async def run() -> None:
        # nothing listens at the address: the fetcher follows no partition, so it never dials
        fetcher = ReplicaFetcher(LEADER, "127.0.0.1:1", SETTINGS, TraceWriter(tmp_path / "trace.jsonl", FOLLOWER,
                                                                              enabled=False),
                                 lambda p: told.append((p.high_watermark, p.log_end_offset)))
        try:
            state = PartitionFetchState(partition, 1, partition.log_end_offset, truncating=False)
            fetcher._process(state, data)
        finally:
            await fetcher.close()

    asyncio.run(run())
    return told


def test_a_truncation_below_the_high_watermark_is_told_with_the_lowered_high_watermark(tmp_path):
    partition = follower_with_history(tmp_path, records=10, high_watermark=8)
    # the leader's log (an unclean election's) ends at 3, below our HW
    told = leader_answers(tmp_path, partition, answer(partition, error_code=ErrorCode.offset_out_of_range.value,
                                                      log_start_offset=0, log_end_offset=3, high_watermark=3))
    assert (partition.log_end_offset, partition.high_watermark) == (3, 3)
    assert told == [(3, 3)]


def test_a_restart_at_the_leaders_log_start_is_told_with_its_new_high_watermark(tmp_path):
    partition = follower_with_history(tmp_path, records=10, high_watermark=8)
    # the leader deleted its records up to 20: ours are below its log start, all of them go
    told = leader_answers(tmp_path, partition, answer(partition, error_code=ErrorCode.offset_out_of_range.value,
                                                      log_start_offset=20, log_end_offset=25, high_watermark=25))
    assert told == [(20, 20)]


def test_a_truncation_above_the_high_watermark_leaves_it_untold(tmp_path):
    partition = follower_with_history(tmp_path, records=10, high_watermark=4)
    told = leader_answers(tmp_path, partition, answer(partition, error_code=ErrorCode.offset_out_of_range.value,
                                                      log_start_offset=0, log_end_offset=6, high_watermark=4))
    assert (partition.log_end_offset, partition.high_watermark) == (6, 4)
    assert told == []
