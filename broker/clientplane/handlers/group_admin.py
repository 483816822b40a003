"""DeleteGroups (API 42) and OffsetDelete (API 47): an admin removing a consumer group, or some of its
committed offsets, at the group's coordinator (clients find it with FindCoordinator, as for any group request).
The rules are the GroupCoordinator's; this module only reads the request and shapes the answer."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import GroupAccess
from broker.clientplane.handlers.common import NO_THROTTLE, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey


async def handle_delete_groups(groups: GroupAccess, request: Request):
    module = response_module(ApiKey.DELETE_GROUPS, request.header.api_version)
    names = list(request.body.groups_names)
    results = groups.coordinator.handle_delete_groups(names)
    return build(module.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(
        build(module.DeletableGroupResult, group_id=name, error_code=results[name]) for name in dict.fromkeys(names)))


async def handle_offset_delete(groups: GroupAccess, request: Request):
    body = request.body
    module = response_module(ApiKey.OFFSET_DELETE, request.header.api_version)
    known = groups.metadata_cache.partitions
    results: dict[tuple[str, int], ErrorCode] = {}
    wanted: list[tuple[str, int]] = []
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            # Kafka's KafkaApis answers a partition the metadata does not know before asking the coordinator
            if tp in known:
                wanted.append(tp)
            else:
                results[tp] = ErrorCode.unknown_topic_or_partition
    group_error, coordinator_results = groups.coordinator.handle_delete_offsets(body.group_id, wanted)
    if group_error != ErrorCode.none:
        # the group's error alone, without partitions (OffsetDeleteRequest.getErrorResponse)
        return build(module.OffsetDeleteResponse, error_code=group_error, throttle_time=NO_THROTTLE, topics=())
    results.update(coordinator_results)
    by_topic: dict[str, list] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append(
            build(module.OffsetDeleteResponsePartition, partition_index=partition, error_code=error))
    return build(module.OffsetDeleteResponse, error_code=ErrorCode.none, throttle_time=NO_THROTTLE, topics=tuple(
        build(module.OffsetDeleteResponseTopic, name=name, partitions=tuple(partitions))
        for name, partitions in by_topic.items()))
