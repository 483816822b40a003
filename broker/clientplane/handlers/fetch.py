"""Fetch for consumers: long-poll through the fetch purgatory, read up to the high watermark (read_uncommitted)
or the last stable offset (read_committed, with the aborted transactions of the range read), records sent from
the segment files with sendfile. No fetch sessions: every answer says session_id 0."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import ReplicaAccess
from broker.clientplane.handlers.common import NO_THROTTLE, answer_once, millis, response_module
from broker.clientplane.network import Delayed
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.clientplane.protocol.zero_copy import ZeroCopyResponse
from broker.replication.delayed_ops import FetchParams, FetchPartitionRequest, FetchPartitionResult
from broker.replication.partition import FetchIsolation

CONSUMER_REPLICA_ID = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
NO_PREFERRED_READ_REPLICA = -1


async def handle_fetch(replicas: ReplicaAccess, request: Request):
    body = request.body
    version = request.header.api_version
    partitions = [
        FetchPartitionRequest(topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                              current_leader_epoch=getattr(p, "current_leader_epoch", None))
        for topic in body.topics for p in topic.partitions
    ]
    # Replication runs on the cluster plane; on this listener every fetcher is a consumer and reads
    # records below the high watermark, read_committed ones (isolation_level 1, v4+) below the LSO.
    isolation = (FetchIsolation.TXN_COMMITTED if getattr(body, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED
                 else FetchIsolation.HIGH_WATERMARK)
    params = FetchParams(replica_id=CONSUMER_REPLICA_ID, max_wait_ms=millis(body.max_wait),
                         min_bytes=body.min_bytes, max_bytes=getattr(body, "max_bytes", 0x7FFFFFFF),
                         isolation=isolation, partitions=partitions)
    future, respond = answer_once(asyncio.get_running_loop())

    replicas.replica_io.fetch_messages(params, replicas.now_ms(), respond)

    def finish(results: dict) -> ZeroCopyResponse:
        return _response(version, body, results)

    if future.done():
        return finish(future.result())
    return Delayed(future, finish)


def _response(version: int, body, results: dict[tuple[str, int], FetchPartitionResult]) -> ZeroCopyResponse:
    module = response_module(ApiKey.FETCH, version)
    answer = ZeroCopyResponse(None)
    topics = []
    for topic in body.topics:
        partitions = []
        for p in topic.partitions:
            result = results[(topic.topic, p.partition)]
            read = result.read
            aborted: tuple = ()
            if result.error != ErrorCode.none or read is None:
                high_watermark = read.high_watermark if read else -1
                log_start = read.log_start_offset if read else -1
                last_stable = high_watermark
                records = b""
            else:
                high_watermark, log_start = read.high_watermark, read.log_start_offset
                last_stable = read.last_stable_offset if read.last_stable_offset >= 0 else high_watermark
                records = answer.placeholder(read.region) if read.region is not None else b""
                if read.aborted_transactions and hasattr(module, "AbortedTransaction"):
                    aborted = tuple(build(module.AbortedTransaction, producer_id=producer_id, first_offset=first)
                                    for producer_id, first in read.aborted_transactions)
            partitions.append(build(
                module.PartitionData, partition_index=p.partition, error_code=result.error,
                high_watermark=high_watermark, last_stable_offset=last_stable, log_start_offset=log_start,
                aborted_transactions=aborted, preferred_read_replica=NO_PREFERRED_READ_REPLICA, records=records))
        topics.append(build(module.FetchableTopicResponse, topic=topic.topic, partitions=tuple(partitions)))
    answer.response = build(module.FetchResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                            session_id=0, responses=tuple(topics))
    return answer
