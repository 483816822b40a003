"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs. A topic's dynamic config is written to
/config/topics/<t> and announced under /config/changes (zk/admin.py), as Kafka 2.8's ZkAdminManager does; every
broker applies it when the notification arrives (broker/config_change_listener.py)."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import AdminAccess
from broker.clientplane.handlers.common import NO_THROTTLE, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.dynamic_config import (
    AlterOp,
    ConfigError,
    ConfigOperation,
    incremental_overrides,
    replacement_overrides,
    validate_topic_overrides,
)
from broker.log.config import broker_synonym
from zk.admin import AdminError, change_topic_config, topic_config_overrides
from zk.znodes import ZNodeDecodeError

log = logging.getLogger(__name__)

RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
SOURCE_DYNAMIC_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5
UNCLEAN = "unclean.leader.election.enable"


# --- AlterConfigs and IncrementalAlterConfigs ------------------------------------------------------------------


async def handle_incremental_alter_configs(admin: AdminAccess, request: Request):
    module = response_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, request.header.api_version)
    results = []
    for resource in request.body.resources:
        ops = [AlterOp(c.name, _operation(c.config_operation), c.value) for c in resource.configs]
        error, message = await _alter(admin, resource.resource_type, resource.resource_name,
                                      lambda current, ops=ops: incremental_overrides(current, ops),
                                      [op.name for op in ops], request.body.validate_only)
        results.append(build(module.AlterConfigsResourceResponse, error_code=error, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name))
    return build(module.IncrementalAlterConfigsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))


async def handle_alter_configs(admin: AdminAccess, request: Request):
    module = response_module(ApiKey.ALTER_CONFIGS, request.header.api_version)
    results = []
    for resource in request.body.resources:
        pairs = [(c.name, c.value) for c in resource.configs]
        error, message = await _alter(admin, resource.resource_type, resource.resource_name,
                                      lambda _current, pairs=pairs: replacement_overrides(pairs),
                                      [name for name, _ in pairs], request.body.validate_only)
        results.append(build(module.AlterConfigsResourceResponse, error_code=error, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name))
    return build(module.AlterConfigsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))


def _operation(value: int) -> ConfigOperation | int:
    try:
        return ConfigOperation(value)
    except ValueError:
        return value


async def _alter(admin: AdminAccess, resource_type: int, name: str, new_overrides, names: list[str],
                 validate_only: bool) -> tuple[ErrorCode, str | None]:
    if resource_type == RESOURCE_BROKER:
        return _refuse_broker_change(admin, name, names)
    if resource_type != RESOURCE_TOPIC:
        return ErrorCode.invalid_request, \
            f"AlterConfigs is only supported for topics and brokers, but resource type is {resource_type}"
    try:
        current = await topic_config_overrides(admin.zk, name)
        overrides = new_overrides(current)
        validate_topic_overrides(name, overrides, admin.log_defaults)
        if not validate_only:
            await change_topic_config(admin.zk, name, overrides)
            log.info("topic %s: dynamic config is now %s", name, overrides)
    except (ConfigError, AdminError) as exc:
        return exc.error_code, str(exc)
    except ZNodeDecodeError as exc:
        return ErrorCode.invalid_config, str(exc)
    return ErrorCode.none, None


def _refuse_broker_change(admin: AdminAccess, name: str, names: list[str]) -> tuple[ErrorCode, str]:
    """kafkasim has no dynamic broker configs: every broker config is read-only, and Kafka 2.8 refuses a change of a
    read-only one with a ConfigException, answered INVALID_REQUEST (DynamicBrokerConfig.validateConfigs)."""
    if name not in ("", str(admin.broker_id)):
        return ErrorCode.invalid_request, \
            f"Unexpected broker id, expected {admin.broker_id} or empty string, but received {name}"
    return ErrorCode.invalid_request, \
        f"Invalid config value for resource ConfigResource(type=BROKER, name='{name}'): " \
        f"Cannot update these configs dynamically: {', '.join(sorted(set(names)))} " \
        "(kafkasim reads broker configs only at start)"


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
            if resource.resource_name not in ("", str(admin.broker_id)):
                error, message = ErrorCode.invalid_request, f"ask broker {resource.resource_name} itself"
            else:
                entries = _broker_configs(admin)
        else:
            error, message = ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported"
        configs = tuple(
            build(module.DescribeConfigsResourceResult, name=name, value=synonyms[0][1],
                  read_only=resource.resource_type != RESOURCE_TOPIC, is_default=synonyms[0][2] == SOURCE_DEFAULT,
                  config_source=synonyms[0][2], is_sensitive=False,
                  synonyms=tuple(build(module.DescribeConfigsSynonym, name=n, value=v, source=s)
                                 for n, v, s in synonyms) if with_synonyms else (),
                  config_type=0, documentation=None)
            for name, synonyms in entries if wanted is None or name in wanted)
        results.append(build(module.DescribeConfigsResult, error_code=error, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name,
                             configs=configs))
    return build(module.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


Synonym = tuple[str, str | None, int]  # name, value, source


async def _topic_configs(admin: AdminAccess, topic: str) -> tuple[ErrorCode, str | None, list[tuple[str, list]]]:
    """Each topic config with its synonyms in Kafka's order: the topic override (DYNAMIC_TOPIC_CONFIG), then the
    broker property that sets its default (STATIC_BROKER_CONFIG when given, else DEFAULT_CONFIG). The entry's
    value and source are the first synonym's."""
    if topic not in admin.metadata_cache.topics():
        return ErrorCode.unknown_topic_or_partition, f"topic {topic} does not exist", []
    try:
        overrides = await topic_config_overrides(admin.zk, topic)
    except AdminError as exc:
        return exc.error_code, str(exc), []
    except ZNodeDecodeError as exc:
        return ErrorCode.invalid_config, str(exc), []
    given = admin.config.log_properties
    defaults: dict[str, Synonym] = {}
    for name, value in admin.log_defaults.to_properties().items():
        broker_name = broker_synonym(name) or name
        defaults[name] = (broker_name, _text(value), SOURCE_STATIC_BROKER if broker_name in given else SOURCE_DEFAULT)
    unclean_given = UNCLEAN in admin.config.model_dump(by_alias=True, exclude_unset=True)
    defaults[UNCLEAN] = (UNCLEAN, _text(admin.config.unclean_leader_election_enable),
                         SOURCE_STATIC_BROKER if unclean_given else SOURCE_DEFAULT)
    entries = []
    for name, default in sorted(defaults.items()):
        synonyms = [(name, overrides[name], SOURCE_DYNAMIC_TOPIC)] if name in overrides else []
        entries.append((name, [*synonyms, default]))
    return ErrorCode.none, None, entries


def _broker_configs(admin: AdminAccess) -> list[tuple[str, list[Synonym]]]:
    config = admin.config
    given = config.model_dump(by_alias=True, exclude_unset=True)
    entries = []
    for name, value in sorted({**config.model_dump(by_alias=True), **(config.model_extra or {})}.items()):
        source = SOURCE_STATIC_BROKER if name in given or name in (config.model_extra or {}) else SOURCE_DEFAULT
        entries.append((name, [(name, None if value is None else _text(value), source)]))
    return entries


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
