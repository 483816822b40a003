"""DeleteRecords (API 21): an admin moves the log start offset of partitions forward, at their leaders (Kafka's
KafkaApis.handleDeleteRecordsRequest). The rules are ReplicaIO's and Partition's; this module only reads the
request and shapes the answer, which may wait in the delete-records purgatory for the low watermark."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import ReplicaAccess
from broker.clientplane.handlers.common import NO_THROTTLE, answer_once, millis, response_module
from broker.clientplane.network import Delayed
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.group.manager import OFFSETS_TOPIC
from broker.replication.delayed_ops import DeleteRecordsPartitionStatus


async def handle_delete_records(replicas: ReplicaAccess, request: Request):
    body = request.body
    version = request.header.api_version
    offsets: dict[tuple[str, int], int] = {}
    refused: dict[tuple[str, int], DeleteRecordsPartitionStatus] = {}
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            hosted = replicas.replica_io.hosted.get(tp)
            config = getattr(hosted.log, "config", None) if hosted is not None and hosted.is_leader else None
            if topic.name == OFFSETS_TOPIC or (config is not None and not config.delete):
                # Partition.deleteRecordsOnLeader refuses a log whose cleanup.policy lacks delete: compaction, not
                # an admin, decides what a compacted log keeps (__consumer_offsets is one)
                refused[tp] = DeleteRecordsPartitionStatus(
                    ErrorCode.policy_violation,
                    error_message=f"Records of partition {topic.name}-{p.partition_index} can not be deleted due "
                                  "to the configured policy")
            else:
                offsets[tp] = p.offset
    future, respond = answer_once(asyncio.get_running_loop())
    replicas.replica_io.delete_records(offsets, millis(body.timeout), replicas.now_ms(), respond)

    def finish(statuses: dict):
        return _response(version, body, {**refused, **statuses})

    if future.done():
        return finish(future.result())
    return Delayed(future, finish)


def _response(version: int, body, statuses: dict[tuple[str, int], DeleteRecordsPartitionStatus]):
    module = response_module(ApiKey.DELETE_RECORDS, version)
    topics: dict[str, list] = {}
    for topic in body.topics:
        partitions = topics.setdefault(topic.name, [])
        for p in topic.partitions:
            status = statuses[(topic.name, p.partition_index)]
            partitions.append(build(module.DeleteRecordsPartitionResult, partition_index=p.partition_index,
                                    # a timed-out partition keeps the low watermark known when it arrived
                                    low_watermark=status.low_watermark,
                                    error_code=status.error))
    return build(module.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(
        build(module.DeleteRecordsTopicResult, name=name, partitions=tuple(partitions))
        for name, partitions in topics.items()))
