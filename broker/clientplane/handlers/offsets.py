"""ListOffsets (earliest, latest, by timestamp) and OffsetForLeaderEpoch, answered by partition leaders."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import ReplicaAccess
from broker.clientplane.handlers.common import NO_THROTTLE, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.log.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from broker.replication.partition import NO_EPOCH, Partition, PartitionError

NOT_FOUND = (-1, -1, NO_EPOCH)
READ_COMMITTED = 1  # timestamp, offset, leader epoch


def offset_for_timestamp(partition: Partition, timestamp: int, isolation_level: int = 0) -> tuple[int, int, int]:
    """Consumers only see committed records, so every answer stays below the high watermark; read_committed
    ones (isolation_level 1) see LATEST as the last stable offset (Kafka's fetchOffsetForTimestamp)."""
    high_watermark = partition.high_watermark
    if timestamp == LATEST_TIMESTAMP:
        latest = partition.last_stable_offset if isolation_level == READ_COMMITTED else high_watermark
        return -1, latest, partition.leader_epoch
    if timestamp == EARLIEST_TIMESTAMP:
        start = partition.log.log_start_offset
        epoch = partition.log.leader_epoch_cache.epoch_for_offset(start)
        return -1, start, NO_EPOCH if epoch is None else epoch
    found = partition.log.fetch_offset_by_timestamp(timestamp)
    fetchable = partition.last_stable_offset if isolation_level == READ_COMMITTED else high_watermark
    if found is None or found.offset >= fetchable:
        return NOT_FOUND
    return found.timestamp, found.offset, NO_EPOCH if found.leader_epoch is None else found.leader_epoch


async def handle_list_offsets(replicas: ReplicaAccess, request: Request):
    version = request.header.api_version
    module = response_module(ApiKey.LIST_OFFSETS, version)
    topics = []
    for topic in request.body.topics:
        partitions = []
        for p in topic.partitions:
            error = ErrorCode.none
            try:
                partition = replicas.replica_io.leader_partition((topic.name, p.partition_index))
                partition.check_leader_epoch(getattr(p, "current_leader_epoch", None))
                timestamp, offset, epoch = offset_for_timestamp(partition, p.timestamp,
                                                                getattr(request.body, "isolation_level", 0))
            except PartitionError as exc:
                error, (timestamp, offset, epoch) = exc.error_code, NOT_FOUND
            partitions.append(build(module.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                                    error_code=error, timestamp=timestamp, offset=offset, leader_epoch=epoch))
        topics.append(build(module.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(partitions)))
    return build(module.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_offset_for_leader_epoch(replicas: ReplicaAccess, request: Request):
    """KIP-279: the largest epoch <= the one asked for, and where it ends, from the leader's epoch cache."""
    version = request.header.api_version
    module = response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    topics = []
    for topic in request.body.topics:
        partitions = []
        for p in topic.partitions:
            try:
                partition = replicas.replica_io.leader_partition((topic.topic, p.partition))
                epoch, end_offset = partition.end_offset_for_epoch(getattr(p, "current_leader_epoch", None),
                                                                   p.leader_epoch)
                error = ErrorCode.none
            except PartitionError as exc:
                error, epoch, end_offset = exc.error_code, NO_EPOCH, -1
            partitions.append(build(module.EpochEndOffset, error_code=error, partition=p.partition,
                                    leader_epoch=epoch, end_offset=end_offset))
        topics.append(build(module.OffsetForLeaderTopicResult, topic=topic.topic, partitions=tuple(partitions)))
    return build(module.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))
