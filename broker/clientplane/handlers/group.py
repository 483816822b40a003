"""Consumer group APIs: FindCoordinator (creating the internal __consumer_offsets topic on first use),
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch, DescribeGroups and ListGroups,
answered by the GroupCoordinator of the broker leading the group's __consumer_offsets partition."""

from __future__ import annotations

import asyncio
import logging
import time

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import GroupAccess
from broker.clientplane.handlers.common import NO_THROTTLE, answer_once, millis, response_module
from broker.clientplane.handlers.find_coordinator import (
    InternalTopic,
    answer_coordinator,
    coordinator_response,
    create_internal_topic,
)
from broker.clientplane.network import Delayed
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.config import Listener
from broker.group.manager import OFFSETS_TOPIC
from broker.group.metadata import JoinResult, OffsetAndMetadata

log = logging.getLogger(__name__)

GROUP_KEY_TYPE = 0
FIRST_JOIN_VERSION_REQUIRING_MEMBER_ID = 4
FIRST_LEAVE_VERSION_WITH_MEMBERS = 3
AUTHORIZED_OPERATIONS_NOT_REQUESTED = -(2**31)
NO_OFFSET = -1
DEFAULT_RETENTION_TIME_MS = -1
# Kafka creates __consumer_offsets compacted, with offsets.topic.segment.bytes segments (100 MiB) and the producer's
# compression: the log cleaner keeps the last commit of each group-partition and the last metadata of each group, and
# drops their tombstones after delete.retention.ms.
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact"}


async def ensure_offsets_topic(groups: GroupAccess) -> tuple[ErrorCode, str]:
    """Create __consumer_offsets with offsets.topic.num.partitions and offsets.topic.replication.factor, once that
    many brokers are alive (find_coordinator.py). Clients are answered COORDINATOR_NOT_AVAILABLE meanwhile and
    retry."""
    config = groups.config
    return await create_internal_topic(groups.zk, InternalTopic(
        OFFSETS_TOPIC, "offsets topic", config.offsets_topic_num_partitions, config.offsets_topic_replication_factor,
        "offsets.topic.replication.factor",
        {**OFFSETS_TOPIC_CONFIG, "segment.bytes": str(config.offsets_topic_segment_bytes)}))


async def handle_find_coordinator(groups: GroupAccess, request: Request, listener: Listener):
    body = request.body
    version = request.header.api_version
    if getattr(body, "key_type", GROUP_KEY_TYPE) != GROUP_KEY_TYPE:
        return coordinator_response(version, ErrorCode.coordinator_not_available,
                                    "kafkasim has no transaction coordinator")
    return await answer_coordinator(version, groups.metadata_cache, OFFSETS_TOPIC,
                                    groups.coordinator.partition_of(body.key), listener,
                                    lambda: ensure_offsets_topic(groups))


# --- membership ------------------------------------------------------------------------------------

async def handle_join_group(groups: GroupAccess, request: Request):
    body = request.body
    version = request.header.api_version
    module = response_module(ApiKey.JOIN_GROUP, version)
    future, respond = answer_once(asyncio.get_running_loop())
    session_ms = millis(body.session_timeout)
    rebalance_ms = millis(getattr(body, "rebalance_timeout", -1))
    groups.coordinator.handle_join_group(
        body.group_id, body.member_id, getattr(body, "group_instance_id", None),
        version >= FIRST_JOIN_VERSION_REQUIRING_MEMBER_ID, request.header.client_id or "", "",
        rebalance_ms, session_ms, body.protocol_type, [(p.name, p.metadata) for p in body.protocols],
        respond)

    def finish(result: JoinResult):
        members = tuple(build(module.JoinGroupResponseMember, member_id=m, group_instance_id=instance, metadata=meta)
                        for m, instance, meta in result.members)
        return build(module.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                     generation_id=result.generation_id, protocol_name=result.protocol_name or "",
                     leader=result.leader_id, member_id=result.member_id, members=members)

    if future.done():
        return finish(future.result())
    return Delayed(future, finish)


async def handle_sync_group(groups: GroupAccess, request: Request):
    body = request.body
    module = response_module(ApiKey.SYNC_GROUP, request.header.api_version)
    future, respond = answer_once(asyncio.get_running_loop())
    groups.coordinator.handle_sync_group(
        body.group_id, body.generation_id, body.member_id, {a.member_id: a.assignment for a in body.assignments},
        lambda error, assignment: respond((error, assignment)), getattr(body, "group_instance_id", None))

    def finish(result: tuple[ErrorCode, bytes]):
        return build(module.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=result[0],
                     assignment=result[1])

    if future.done():
        return finish(future.result())
    return Delayed(future, finish)


async def handle_heartbeat(groups: GroupAccess, request: Request):
    body = request.body
    module = response_module(ApiKey.HEARTBEAT, request.header.api_version)
    error = groups.coordinator.handle_heartbeat(body.group_id, body.member_id, body.generation_id,
                                                getattr(body, "group_instance_id", None))
    return build(module.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error)


async def handle_leave_group(groups: GroupAccess, request: Request):
    body = request.body
    version = request.header.api_version
    module = response_module(ApiKey.LEAVE_GROUP, version)
    if version >= FIRST_LEAVE_VERSION_WITH_MEMBERS:
        identities = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        identities = [(body.member_id, None)]
    error, errors = groups.coordinator.handle_leave_group(
        body.group_id, [member_id for member_id, _ in identities], [instance for _, instance in identities])
    if version < FIRST_LEAVE_VERSION_WITH_MEMBERS and error == ErrorCode.none:
        error = errors[0]
    members = ()
    if version >= FIRST_LEAVE_VERSION_WITH_MEMBERS:
        members = tuple(build(module.MemberResponse, member_id=member_id, group_instance_id=instance, error_code=e)
                        for (member_id, instance), e in zip(identities, errors, strict=True))
    return build(module.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error, members=members)


# --- offsets -----------------------------------------------------------------------------------------

async def handle_offset_commit(groups: GroupAccess, request: Request):
    body = request.body
    module = response_module(ApiKey.OFFSET_COMMIT, request.header.api_version)
    now_wall = int(time.time() * 1000)
    # OffsetCommit v2-v4 may name a retention of their own: those offsets expire at that time (Kafka's
    # expireTimestamp), the others by offsets.retention.minutes
    retention = millis(getattr(body, "retention_time", DEFAULT_RETENTION_TIME_MS))
    expire_at = None if retention == DEFAULT_RETENTION_TIME_MS else now_wall + retention
    known = groups.metadata_cache.partitions
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    refused: dict[tuple[str, int], ErrorCode] = {}
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if tp not in known:
                refused[tp] = ErrorCode.unknown_topic_or_partition
                continue
            offsets[tp] = OffsetAndMetadata(p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                            p.committed_metadata or "", now_wall, expire_at)
    future, respond = answer_once(asyncio.get_running_loop())
    generation = getattr(body, "generation_id_or_member_epoch", -1)
    groups.coordinator.handle_commit_offsets(body.group_id, getattr(body, "member_id", ""), generation, offsets,
                                             respond, getattr(body, "group_instance_id", None))

    def finish(results: dict[tuple[str, int], ErrorCode]):
        results = {**results, **refused}
        topics = tuple(
            build(module.OffsetCommitResponseTopic, name=topic.name, partitions=tuple(
                build(module.OffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=results.get((topic.name, p.partition_index), ErrorCode.none))
                for p in topic.partitions))
            for topic in body.topics)
        return build(module.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=topics)

    if future.done():
        return finish(future.result())
    return Delayed(future, finish)


async def handle_txn_offset_commit(groups: GroupAccess, request: Request):
    """TxnOffsetCommit (28): a transactional producer's offsets for a group, held pending by the coordinator until
    the transaction's marker (Kafka's KafkaApis.handleTxnOffsetCommitRequest)."""
    body = request.body
    module = response_module(ApiKey.TXN_OFFSET_COMMIT, request.header.api_version)
    now_wall = int(time.time() * 1000)
    known = groups.metadata_cache.partitions
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    refused: dict[tuple[str, int], ErrorCode] = {}
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if tp not in known:
                refused[tp] = ErrorCode.unknown_topic_or_partition
                continue
            offsets[tp] = OffsetAndMetadata(p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                            p.committed_metadata or "", now_wall)
    future, respond = answer_once(asyncio.get_running_loop())
    if offsets:
        groups.coordinator.handle_txn_commit_offsets(
            body.group_id, body.producer_id, body.producer_epoch, getattr(body, "member_id", ""),
            getattr(body, "group_instance_id", None), getattr(body, "generation_id", -1), offsets, respond)
    else:
        respond({})

    def finish(results: dict[tuple[str, int], ErrorCode]):
        results = {**results, **refused}
        topics = tuple(
            build(module.TxnOffsetCommitResponseTopic, name=topic.name, partitions=tuple(
                build(module.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=results.get((topic.name, p.partition_index), ErrorCode.none))
                for p in topic.partitions))
            for topic in body.topics)
        return build(module.TxnOffsetCommitResponse, throttle_time=NO_THROTTLE, topics=topics)

    if future.done():
        return finish(future.result())
    return Delayed(future, finish)


async def handle_offset_fetch(groups: GroupAccess, request: Request):
    body = request.body
    version = request.header.api_version
    module = response_module(ApiKey.OFFSET_FETCH, version)
    wanted = None if body.topics is None else [(t.name, p) for t in body.topics for p in t.partition_indexes]
    error, offsets = groups.coordinator.handle_fetch_offsets(body.group_id, wanted,
                                                             getattr(body, "require_stable", False))
    if wanted is None:
        wanted = sorted(offsets)
    by_topic: dict[str, list] = {}
    for topic, partition in wanted:
        found = offsets.get((topic, partition))
        # v1 has no top-level error: Kafka repeats it on every partition
        partition_error = error if version < 2 else ErrorCode.none
        if isinstance(found, ErrorCode):  # UNSTABLE_OFFSET_COMMIT: no offset, the client retries
            partition_error, found = found, None
        by_topic.setdefault(topic, []).append(build(
            module.OffsetFetchResponsePartition, partition_index=partition,
            committed_offset=found.offset if found else NO_OFFSET,
            committed_leader_epoch=found.leader_epoch if found else -1,
            metadata=found.metadata if found else "", error_code=partition_error))
    topics = tuple(build(module.OffsetFetchResponseTopic, name=name, partitions=tuple(parts))
                   for name, parts in by_topic.items())
    return build(module.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=error)


# --- admin -------------------------------------------------------------------------------------------

async def handle_describe_groups(groups: GroupAccess, request: Request):
    module = response_module(ApiKey.DESCRIBE_GROUPS, request.header.api_version)
    described = []
    for group_id in request.body.groups:
        error, group = groups.coordinator.describe(group_id)
        members = ()
        state, protocol_type, protocol = "Dead", "", ""
        if group is not None:
            state, protocol_type = group.state.value, group.protocol_type or ""
            # Kafka shows the protocol, member metadata and assignments only once the group is Stable
            stable = group.state.value == "Stable"
            protocol = (group.protocol_name or "") if stable else ""
            members = tuple(
                build(module.DescribedGroupMember, member_id=m.member_id, group_instance_id=m.group_instance_id,
                      client_id=m.client_id, client_host=m.client_host,
                      member_metadata=m.metadata_for(protocol) if stable and protocol else b"",
                      member_assignment=m.assignment if stable else b"")
                for m in group.members.values())
        described.append(build(module.DescribedGroup, error_code=error, group_id=group_id, group_state=state,
                               protocol_type=protocol_type, protocol_data=protocol, members=members,
                               authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED))
    return build(module.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(described))


async def handle_list_groups(groups: GroupAccess, request: Request):
    module = response_module(ApiKey.LIST_GROUPS, request.header.api_version)
    coordinator = groups.coordinator
    error = ErrorCode.coordinator_load_in_progress if coordinator.loading_partitions else ErrorCode.none
    groups = tuple(build(module.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type or "")
                   for g in sorted(coordinator.list_groups(), key=lambda g: g.group_id))
    return build(module.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=error, groups=groups)
