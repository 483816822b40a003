"""CreateTopics, CreatePartitions, DeleteTopics (active controller only, as in Kafka's ZooKeeper mode) and topic
auto-creation (the config APIs are in configs.py, InitProducerId in transactions.py)."""

from __future__ import annotations

import asyncio
import logging
import time

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import AdminAccess
from broker.clientplane.handlers.common import NO_THROTTLE, millis, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.dynamic_config import ConfigError, validate_topic_overrides
from zk.admin import AdminError, add_partitions, create_topic, delete_topic
from zk.assignment import PartitionLimit, hosted_replicas

log = logging.getLogger(__name__)

USE_BROKER_DEFAULT = -1
PROPAGATION_POLL_S = 0.05


def check_topic_configs(admin: AdminAccess, topic: str, configs: dict[str, str]) -> None:
    """The topic's configs checked as AlterConfigs checks them (LogConfig.validate); CreateTopics answers every
    refusal INVALID_CONFIG, a bad value too (Kafka's createTopics turns the ConfigException into an
    InvalidConfigurationException, where AlterConfigs answers INVALID_REQUEST)."""
    try:
        validate_topic_overrides(topic, configs, admin.log_defaults())
    except ConfigError as exc:
        raise AdminError(str(exc), ErrorCode.invalid_config) from None


def partition_limit(admin: AdminAccess) -> PartitionLimit:
    """``max.broker.partitions`` against the replicas each broker hosts as this broker's metadata shows them."""
    states = (s for partitions in admin.metadata_cache.topics().values() for s in partitions)
    return PartitionLimit(admin.config.max_broker_partitions, hosted_replicas(s.replicas for s in states))


async def wait_for_metadata(admin: AdminAccess, topic: str, *, present: bool, timeout_ms: int,
                            partitions: int = 0) -> bool:
    """Kafka answers CreateTopics/CreatePartitions/DeleteTopics once the change reached this broker's metadata
    (at least ``partitions`` partitions, each with a leader), or at the request's timeout
    (DelayedCreatePartitions / DelayedDeleteTopics)."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        states = admin.metadata_cache.topics().get(topic)
        if present:
            done = states is not None and len(states) >= partitions and all(s.leader >= 0 for s in states)
        else:
            done = states is None
        if done:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(PROPAGATION_POLL_S)


async def handle_create_topics(admin: AdminAccess, request: Request):
    body = request.body
    module = response_module(ApiKey.CREATE_TOPICS, request.header.api_version)
    names = [t.name for t in body.topics]
    results = []

    async def one(topic) -> tuple[ErrorCode, str | None]:
        if not admin.is_controller():
            return ErrorCode.not_controller, f"broker {admin.broker_id} is not the controller"
        if names.count(topic.name) > 1:
            return ErrorCode.invalid_request, f"topic {topic.name} appears more than once in the request"
        assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments} or None
        partitions, replication = topic.num_partitions, topic.replication_factor
        if assignment is not None and (partitions != USE_BROKER_DEFAULT or replication != USE_BROKER_DEFAULT):
            return ErrorCode.invalid_request, "give either replica assignments or partitions and replication factor"
        partitions = admin.config.num_partitions if partitions == USE_BROKER_DEFAULT else partitions
        replication = admin.config.default_replication_factor if replication == USE_BROKER_DEFAULT else replication
        configs = {c.name: c.value for c in topic.configs}
        try:
            check_topic_configs(admin, topic.name, configs)
            await create_topic(admin.zk, topic.name, partitions, replication, configs, assignment=assignment,
                               validate_only=body.validate_only, limit=partition_limit(admin))
        except AdminError as exc:
            return exc.error_code, str(exc)
        if not body.validate_only and not await wait_for_metadata(admin, topic.name, present=True,
                                                                  timeout_ms=millis(body.timeout)):
            return ErrorCode.request_timed_out, f"topic {topic.name} was created but has no leaders yet"
        return ErrorCode.none, None

    for topic in body.topics:
        error, message = await one(topic)
        results.append(build(module.CreatableTopicResult, name=topic.name, error_code=error, error_message=message,
                             num_partitions=-1, replication_factor=-1, configs=None))
    return build(module.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))


async def handle_create_partitions(admin: AdminAccess, request: Request):
    body = request.body
    module = response_module(ApiKey.CREATE_PARTITIONS, request.header.api_version)
    names = [t.name for t in body.topics]

    async def one(topic) -> tuple[ErrorCode, str | None]:
        # the order of Kafka 2.8's KafkaApis.handleCreatePartitionsRequest and ZkAdminManager.createPartitions
        if not admin.is_controller():
            return ErrorCode.not_controller, f"broker {admin.broker_id} is not the controller"
        if names.count(topic.name) > 1:
            return ErrorCode.invalid_request, "Duplicate topic in request."
        assignment = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
        try:
            await add_partitions(admin.zk, topic.name, topic.count, assignment, validate_only=body.validate_only,
                                 limit=partition_limit(admin))
        except AdminError as exc:
            return exc.error_code, str(exc)
        if not body.validate_only and not await wait_for_metadata(admin, topic.name, present=True,
                                                                  timeout_ms=millis(body.timeout),
                                                                  partitions=topic.count):
            return ErrorCode.request_timed_out, f"the partitions of {topic.name} were added but have no leaders yet"
        return ErrorCode.none, None

    results = []
    for topic in body.topics:
        error, message = await one(topic)
        results.append(build(module.CreatePartitionsTopicResult, name=topic.name, error_code=error,
                             error_message=message))
    return build(module.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


async def handle_delete_topics(admin: AdminAccess, request: Request):
    body = request.body
    module = response_module(ApiKey.DELETE_TOPICS, request.header.api_version)
    results = []
    for name in body.topic_names:
        error = ErrorCode.none
        if not admin.is_controller():
            error = ErrorCode.not_controller
        elif not admin.config.delete_topic_enable:
            error = ErrorCode.topic_deletion_disabled
        else:
            try:
                await delete_topic(admin.zk, name)
            except AdminError as exc:
                error = exc.error_code
            if error == ErrorCode.none and not await wait_for_metadata(admin, name, present=False,
                                                                       timeout_ms=millis(body.timeout)):
                error = ErrorCode.request_timed_out
        results.append(build(module.DeletableTopicResult, name=name, error_code=error))
    return build(module.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))


async def auto_create_topic(admin: AdminAccess, name: str) -> ErrorCode:
    """Metadata for an unknown topic with auto.create.topics.enable: create it with the broker defaults;
    the client sees LEADER_NOT_AVAILABLE and asks again (Kafka's behaviour)."""
    try:
        await create_topic(admin.zk, name, admin.config.num_partitions, admin.config.default_replication_factor,
                           limit=partition_limit(admin))
    except AdminError as exc:
        if exc.error_code == ErrorCode.topic_already_exists:  # another broker or client was faster
            return ErrorCode.leader_not_available
        log.warning("auto-creating topic %s failed: %s", name, exc)
        return exc.error_code
    log.info("auto-created topic %s (%d partitions, replication factor %d)", name, admin.config.num_partitions,
             admin.config.default_replication_factor)
    return ErrorCode.leader_not_available
