"""CreateTopics, CreatePartitions, DeleteTopics (active controller only, as in Kafka's ZooKeeper mode), topic
auto-creation, InitProducerId and DescribeConfigs."""

from __future__ import annotations

import asyncio
import logging
import time

from kio.schema.errors import ErrorCode
from pydantic import ValidationError

from broker.clientplane.handlers.access import AdminAccess
from broker.clientplane.handlers.common import NO_THROTTLE, millis, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.log.config import topic_property_names
from zk.admin import AdminError, add_partitions, create_topic, delete_topic
from zk.znodes import TopicConfigZNode, ZNodeDecodeError

log = logging.getLogger(__name__)

USE_BROKER_DEFAULT = -1
# Topic configs the controller reads; the log reads the rest (topic_property_names()).
CONTROLLER_TOPIC_CONFIGS = frozenset({"unclean.leader.election.enable"})
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
SOURCE_DYNAMIC_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5
PROPAGATION_POLL_S = 0.05


def check_topic_configs(admin: AdminAccess, configs: dict[str, str]) -> None:
    known = topic_property_names() | CONTROLLER_TOPIC_CONFIGS
    unknown = sorted(set(configs) - known)
    if unknown:
        raise AdminError(f"kafkasim does not know the topic config(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(known))}", ErrorCode.invalid_config)
    try:
        admin.log_defaults.with_overrides(
            {k: v for k, v in configs.items() if k not in CONTROLLER_TOPIC_CONFIGS})
    except ValidationError as exc:
        error = exc.errors()[0]
        raise AdminError(f"invalid value for {'.'.join(map(str, error['loc']))}: {error['msg']}",
                         ErrorCode.invalid_config) from None


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
            check_topic_configs(admin, configs)
            await create_topic(admin.zk, topic.name, partitions, replication, configs, assignment=assignment,
                               validate_only=body.validate_only)
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
            await add_partitions(admin.zk, topic.name, topic.count, assignment, validate_only=body.validate_only)
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
        await create_topic(admin.zk, name, admin.config.num_partitions, admin.config.default_replication_factor)
    except AdminError as exc:
        if exc.error_code == ErrorCode.topic_already_exists:  # another broker or client was faster
            return ErrorCode.leader_not_available
        log.warning("auto-creating topic %s failed: %s", name, exc)
        return exc.error_code
    log.info("auto-created topic %s (%d partitions, replication factor %d)", name, admin.config.num_partitions,
             admin.config.default_replication_factor)
    return ErrorCode.leader_not_available


async def handle_init_producer_id(admin: AdminAccess, request: Request):
    module = response_module(ApiKey.INIT_PRODUCER_ID, request.header.api_version)
    if request.body.transactional_id is not None:
        log.warning("InitProducerId with transactional.id %r refused: kafkasim has no transactions",
                    request.body.transactional_id)
        return build(module.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request,
                     producer_id=-1, producer_epoch=-1)
    producer_id = await admin.producer_ids.generate_producer_id()
    return build(module.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 producer_id=producer_id, producer_epoch=0)


async def handle_describe_configs(admin: AdminAccess, request: Request):
    module = response_module(ApiKey.DESCRIBE_CONFIGS, request.header.api_version)
    results = []
    for resource in request.body.resources:
        wanted = None if resource.configuration_keys is None else set(resource.configuration_keys)
        error, message, entries = ErrorCode.none, None, []
        if resource.resource_type == RESOURCE_TOPIC:
            error, message, entries = await _topic_configs(admin, resource.resource_name)
        elif resource.resource_type == RESOURCE_BROKER:
            if resource.resource_name not in ("", str(admin.broker_id)):
                error, message = ErrorCode.invalid_request, f"ask broker {resource.resource_name} itself"
            else:
                entries = _broker_configs(admin)
        else:
            error, message = ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported"
        configs = tuple(
            build(module.DescribeConfigsResourceResult, name=name, value=value,
                  read_only=source != SOURCE_DYNAMIC_TOPIC, is_default=source == SOURCE_DEFAULT,
                  config_source=source, is_sensitive=False, synonyms=(),
                  config_type=0, documentation=None)
            for name, value, source in entries if wanted is None or name in wanted)
        results.append(build(module.DescribeConfigsResult, error_code=error, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name,
                             configs=configs))
    return build(module.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


async def _topic_configs(admin: AdminAccess, topic: str):
    if topic not in admin.metadata_cache.topics():
        return ErrorCode.unknown_topic_or_partition, f"topic {topic} does not exist", []
    data, _ = await admin.zk.get_or_none(TopicConfigZNode.path(topic))
    try:
        overrides = TopicConfigZNode.decode(topic, data) if data else {}
    except ZNodeDecodeError as exc:
        return ErrorCode.invalid_config, str(exc), []
    defaults = {k: _text(v) for k, v in admin.log_defaults.to_properties().items()}
    defaults["unclean.leader.election.enable"] = _text(admin.config.unclean_leader_election_enable)
    entries = [(name, overrides.get(name, value), SOURCE_DYNAMIC_TOPIC if name in overrides else SOURCE_DEFAULT)
               for name, value in sorted(defaults.items())]
    return ErrorCode.none, None, entries


def _broker_configs(admin: AdminAccess) -> list[tuple[str, str | None, int]]:
    config = admin.config
    given = config.model_dump(by_alias=True, exclude_unset=True)
    entries = []
    for name, value in sorted({**config.model_dump(by_alias=True), **(config.model_extra or {})}.items()):
        source = SOURCE_STATIC_BROKER if name in given or name in (config.model_extra or {}) else SOURCE_DEFAULT
        entries.append((name, None if value is None else _text(value), source))
    return entries


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
