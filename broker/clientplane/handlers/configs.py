"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs. A topic's dynamic config is written to
/config/topics/<t>, a broker's to /config/brokers/<id> and the cluster-wide broker default to
/config/brokers/<default>, each announced under /config/changes (zk/admin.py), as Kafka 2.8's ZkAdminManager does;
every broker applies it when the notification arrives (broker/config_change_listener.py)."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import AdminAccess
from broker.clientplane.handlers.common import NO_THROTTLE, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.dynamic_broker_config import (
    DYNAMIC_BROKER_CONFIGS,
    ConfigSource,
    Synonym,
    broker_synonyms,
    known_broker_configs,
    validate_broker_change,
)
from broker.dynamic_config import (
    CONTROLLER_TOPIC_CONFIGS,
    AlterOp,
    ConfigError,
    ConfigOperation,
    incremental_overrides,
    replacement_overrides,
    validate_topic_overrides,
)
from broker.log.config import broker_synonym
from zk.admin import (
    AdminError,
    broker_config_overrides,
    change_broker_config,
    change_topic_config,
    topic_config_overrides,
)
from zk.znodes import ZNodeDecodeError

log = logging.getLogger(__name__)

RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
MESSAGE_FORMAT_VERSION = "log.message.format.version"
UNCLEAN = "unclean.leader.election.enable"


# --- AlterConfigs and IncrementalAlterConfigs ------------------------------------------------------------------


async def handle_incremental_alter_configs(admin: AdminAccess, request: Request):
    module = response_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, request.header.api_version)
    results = []
    for resource in request.body.resources:
        ops = [AlterOp(c.name, _operation(c.config_operation), c.value) for c in resource.configs]
        error, message = await _alter(
            admin, resource.resource_type, resource.resource_name,
            lambda current, known, entity, ops=ops: incremental_overrides(current, ops, known, entity),
            request.body.validate_only)
        results.append(build(module.AlterConfigsResourceResponse, error_code=error, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name))
    return build(module.IncrementalAlterConfigsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))


async def handle_alter_configs(admin: AdminAccess, request: Request):
    module = response_module(ApiKey.ALTER_CONFIGS, request.header.api_version)
    results = []
    for resource in request.body.resources:
        pairs = [(c.name, c.value) for c in resource.configs]
        error, message = await _alter(admin, resource.resource_type, resource.resource_name,
                                      lambda _current, _known, _entity, pairs=pairs: replacement_overrides(pairs),
                                      request.body.validate_only)
        results.append(build(module.AlterConfigsResourceResponse, error_code=error, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name))
    return build(module.AlterConfigsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))


def _operation(value: int) -> ConfigOperation | int:
    try:
        return ConfigOperation(value)
    except ValueError:
        return value


async def _alter(admin: AdminAccess, resource_type: int, name: str, new_overrides,
                 validate_only: bool) -> tuple[ErrorCode, str | None]:
    """``new_overrides(current, known names, entity)``: the entity's whole dynamic config after the request."""
    if resource_type == RESOURCE_BROKER:
        return await _alter_broker(admin, name, new_overrides, validate_only)
    if resource_type != RESOURCE_TOPIC:
        return ErrorCode.invalid_request, \
            f"AlterConfigs is only supported for topics and brokers, but resource type is {resource_type}"
    try:
        current = await topic_config_overrides(admin.zk, name)
        overrides = new_overrides(current, None, "topic")
        validate_topic_overrides(name, overrides, admin.log_defaults())
        if not validate_only:
            await change_topic_config(admin.zk, name, overrides)
            log.info("topic %s: dynamic config is now %s", name, overrides)
    except (ConfigError, AdminError) as exc:
        return exc.error_code, str(exc)
    except ZNodeDecodeError as exc:
        return ErrorCode.invalid_config, str(exc)
    return ErrorCode.none, None


async def _alter_broker(admin: AdminAccess, name: str, new_overrides,
                        validate_only: bool) -> tuple[ErrorCode, str | None]:
    """A broker's own dynamic config, sent to that broker (its id), or the cluster-wide default's, sent to any
    ("" is /config/brokers/<default>): ZkAdminManager.alterBrokerConfigs."""
    if name and not name.isdigit():
        return ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}"
    if name and int(name) != admin.broker_id:
        return ErrorCode.invalid_request, f"Unexpected broker id, expected {admin.broker_id}, but received {name}"
    broker_id = admin.broker_id if name else None
    try:
        current = await broker_config_overrides(admin.zk, broker_id)
        overrides = new_overrides(current, known_broker_configs(), "broker")
        validate_broker_change(name, overrides, admin.config_layers())
        if not validate_only:
            await change_broker_config(admin.zk, broker_id, overrides)
            log.info("brokers/%s: dynamic config is now %s", name or "<default>", overrides)
    except ConfigError as exc:
        return exc.error_code, str(exc)
    except ZNodeDecodeError as exc:
        return ErrorCode.invalid_config, str(exc)
    return ErrorCode.none, None


# --- DescribeConfigs -------------------------------------------------------------------------------------------


async def handle_describe_configs(admin: AdminAccess, request: Request):
    module = response_module(ApiKey.DESCRIBE_CONFIGS, request.header.api_version)
    with_synonyms = bool(getattr(request.body, "include_synonyms", False))
    results = []
    for resource in request.body.resources:
        wanted = None if resource.configuration_keys is None else set(resource.configuration_keys)
        error, message, entries = ErrorCode.none, None, []
        if resource.resource_type == RESOURCE_TOPIC:
            error, message, entries = await _topic_configs(admin, resource.resource_name)
        elif resource.resource_type == RESOURCE_BROKER:
            name = resource.resource_name
            if name and not name.isdigit():
                error, message = ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}"
            elif name and int(name) != admin.broker_id:
                error, message = ErrorCode.invalid_request, \
                    f"Unexpected broker id, expected {admin.broker_id} or empty string, but received {name}"
            else:
                entries = _broker_configs(admin, per_broker=bool(name))
        else:
            error, message = ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported"
        configs = tuple(
            build(module.DescribeConfigsResourceResult, name=name, value=value, read_only=read_only,
                  is_default=source == ConfigSource.DEFAULT_CONFIG, config_source=int(source), is_sensitive=False,
                  synonyms=tuple(build(module.DescribeConfigsSynonym, name=n, value=v, source=int(s))
                                 for n, v, s in synonyms) if with_synonyms else (),
                  config_type=0, documentation=None)
            for name, value, source, read_only, synonyms in entries if wanted is None or name in wanted)
        results.append(build(module.DescribeConfigsResult, error_code=error, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name,
                             configs=configs))
    return build(module.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


# name, value, source, read-only, synonyms
Entry = tuple[str, str | None, ConfigSource, bool, list[Synonym]]


async def _topic_configs(admin: AdminAccess, topic: str) -> tuple[ErrorCode, str | None, list[Entry]]:
    """Each topic config with its synonyms in Kafka's order (ConfigHelper.createTopicConfigEntry): the topic override
    (TOPIC_CONFIG), then the broker properties that set its default, from this broker's dynamic config to the
    cluster-wide default, server.properties and Kafka's default. The value is the topic's effective one, the source
    the first synonym's."""
    if topic not in admin.metadata_cache.topics():
        return ErrorCode.unknown_topic_or_partition, f"topic {topic} does not exist", []
    try:
        overrides = await topic_config_overrides(admin.zk, topic)
    except AdminError as exc:
        return exc.error_code, str(exc), []
    except ZNodeDecodeError as exc:
        return ErrorCode.invalid_config, str(exc), []
    layers = admin.config_layers()
    log_defaults = admin.log_defaults()
    try:
        effective = log_defaults.with_overrides({k: v for k, v in overrides.items()
                                                 if k not in CONTROLLER_TOPIC_CONFIGS}).to_properties()
    except ValueError:  # overrides that no longer fit the defaults: the logs keep their last config
        effective = log_defaults.to_properties()
    effective[UNCLEAN] = overrides.get(UNCLEAN, _text(layers.unclean_leader_election_enable()))
    entries = []
    for name, value in sorted(effective.items()):
        broker_name = broker_synonym(name) or name
        synonyms = layers.synonyms(broker_name, broker_synonyms(broker_name))
        if name in overrides:
            synonyms = [(name, overrides[name], ConfigSource.TOPIC_CONFIG), *synonyms]
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append((name, _text(value), source, False, synonyms))
    # The message format every topic is written in (Kafka's message.format.version, from the broker's
    # log.message.format.version), which admin tools read; kafkasim writes record batch v2 whatever it says, so
    # it is reported read-only rather than taken as a topic override.
    synonyms = layers.synonyms(MESSAGE_FORMAT_VERSION, [MESSAGE_FORMAT_VERSION])
    entries.append(("message.format.version", synonyms[0][1], synonyms[0][2], True, synonyms))
    entries.sort(key=lambda entry: entry[0])
    return ErrorCode.none, None, entries


def _broker_configs(admin: AdminAccess, per_broker: bool) -> list[Entry]:
    """A broker's every config (ConfigHelper.createBrokerConfigEntry), read-only unless dynamic; for the cluster-wide
    default (not ``per_broker``) only what it sets, with only its own synonyms."""
    layers = admin.config_layers()
    names = (known_broker_configs() | set(layers.static)) if per_broker else set(layers.default_dynamic)
    entries = []
    for name in sorted(names):
        synonyms = layers.synonyms(name)
        if not per_broker:
            synonyms = [s for s in synonyms if s[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (None, ConfigSource.DEFAULT_CONFIG)
        entries.append((name, value, source, name not in DYNAMIC_BROKER_CONFIGS, synonyms))
    return entries


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
