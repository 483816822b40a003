"""AlterPartitionReassignments (API 45) and ListPartitionReassignments (API 46): KIP-455's partition reassignment.

As in Kafka 2.8's ZooKeeper mode only the active controller answers: another broker answers NOT_CONTROLLER at the
top level, and admin clients send both requests to the controller named in Metadata. The alter answer comes once
each reassignment is started, not when the data has moved: ListPartitionReassignments (or the topic znode's
adding_replicas / removing_replicas) shows the partitions still moving.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import AdminAccess
from broker.clientplane.handlers.common import NO_THROTTLE, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from controller.reassignment import Refused

NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."


async def handle_alter_partition_reassignments(admin: AdminAccess, request: Request):
    module = response_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, request.header.api_version)
    asked = {(topic.name, p.partition_index): None if p.replicas is None else [int(r) for r in p.replicas]
             for topic in request.body.topics for p in topic.partitions}
    results = await admin.alter_partition_reassignments(asked)
    if results is None:
        return build(module.AlterPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.not_controller, error_message=NOT_CONTROLLER_MESSAGE, responses=())
    by_topic: dict[str, list] = {}
    for (topic, partition), result in sorted(results.items()):
        error, message = (result.error, result.message) if isinstance(result, Refused) else (ErrorCode.none, None)
        by_topic.setdefault(topic, []).append(build(
            module.ReassignablePartitionResponse, partition_index=partition, error_code=error, error_message=message))
    return build(module.AlterPartitionReassignmentsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 error_message=None, responses=tuple(
                     build(module.ReassignableTopicResponse, name=topic, partitions=tuple(partitions))
                     for topic, partitions in by_topic.items()))


async def handle_list_partition_reassignments(admin: AdminAccess, request: Request):
    module = response_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, request.header.api_version)
    topics = request.body.topics
    asked = None if topics is None else [(t.name, int(p)) for t in topics for p in t.partition_indexes]
    ongoing = await admin.list_partition_reassignments(asked)
    if ongoing is None:
        return build(module.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.not_controller, error_message=NOT_CONTROLLER_MESSAGE, topics=())
    by_topic: dict[str, list] = {}
    for (topic, partition), assignment in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append(build(
            module.OngoingPartitionReassignment, partition_index=partition, replicas=assignment.replicas,
            adding_replicas=assignment.adding, removing_replicas=assignment.removing))
    return build(module.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 error_message=None, topics=tuple(
                     build(module.OngoingTopicReassignment, name=topic, partitions=tuple(partitions))
                     for topic, partitions in by_topic.items()))
