"""Dynamic topic configs, the pure part: which names a topic may override, how AlterConfigs and
IncrementalAlterConfigs turn the current overrides into new ones, and Kafka 2.8's answers when they may
not (ZkAdminManager.alterConfigs / incrementalAlterConfigs, LogConfig.validate)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from kio.schema.errors import ErrorCode
from pydantic import ValidationError

from broker.log.config import LogConfig, topic_property_names

# Read by the controller (at its next election for the topic), not by the log.
CONTROLLER_TOPIC_CONFIGS = frozenset({"unclean.leader.election.enable"})
# Kafka's INT topic configs; the other numbers are LONG (the type named in "Not a number of type ...").
_INT_CONFIGS = frozenset({"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes",
                          "min.insync.replicas", "log.segment.bytes", "log.index.size.max.bytes",
                          "log.index.interval.bytes", "message.max.bytes"})


class ConfigOperation(IntEnum):
    """IncrementalAlterConfigs' operation (AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class AlterOp:
    name: str
    operation: ConfigOperation
    value: str | None


class ConfigError(Exception):
    """The change is refused; ``error_code`` is Kafka's answer and the message Kafka's text."""

    def __init__(self, message: str, error_code: ErrorCode) -> None:
        super().__init__(message)
        self.error_code = error_code


def topic_config_names() -> frozenset[str]:
    return topic_property_names() | CONTROLLER_TOPIC_CONFIGS


def incremental_overrides(current: Mapping[str, str], ops: Sequence[AlterOp], known: frozenset[str] | None = None,
                          entity: str = "topic") -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs' operations, applied to the current ones in order. ``known``
    are the names the entity has (a topic's by default), ``entity`` names it in the error for another name.

    No config kafkasim knows is a LIST (cleanup.policy, the throttled-replica lists are not supported), so
    APPEND and SUBTRACT are refused as Kafka refuses them for a non-list config."""
    names = [op.name for op in ops]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"Error due to duplicate config keys: {', '.join(duplicates)}", ErrorCode.invalid_request)
    known = topic_config_names() if known is None else known
    result = dict(current)
    for op in ops:
        if op.operation != ConfigOperation.DELETE and op.value is None:
            raise ConfigError(f"Null value not supported for : {op.name}", ErrorCode.invalid_request)
        # Kafka checks the name of a SET when it validates the result, and of an APPEND or SUBTRACT at once; a DELETE
        # of a name it does not know removes nothing and is no error
        if op.name not in known and op.operation != ConfigOperation.DELETE:
            raise ConfigError(f"Unknown {entity} config name: {op.name}", ErrorCode.invalid_config)
        match op.operation:
            case ConfigOperation.SET:
                result[op.name] = op.value
            case ConfigOperation.DELETE:
                result.pop(op.name, None)
            case ConfigOperation.APPEND | ConfigOperation.SUBTRACT:
                verb = "append" if op.operation == ConfigOperation.APPEND else "subtract"
                raise ConfigError(f"Config value {verb} is not allowed for config key: {op.name}",
                                  ErrorCode.invalid_request)
            case _:
                raise ConfigError(f"Unknown config operation {int(op.operation)} for {op.name}",
                                  ErrorCode.invalid_request)
    return result


def replacement_overrides(configs: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """AlterConfigs replaces the whole set of overrides with the request's."""
    result = {}
    for name, value in configs:
        if value is None:
            raise ConfigError(f"Null value not supported for : {name}", ErrorCode.invalid_request)
        result[name] = value
    return result


def validate_topic_overrides(topic: str, overrides: Mapping[str, str], log_defaults: LogConfig) -> LogConfig:
    """The topic's log config with these overrides, or ConfigError as LogConfig.validate would fail:
    an unknown name is INVALID_CONFIG, a bad value (a ConfigException in Kafka) INVALID_REQUEST."""
    unknown = sorted(set(overrides) - topic_config_names())
    if unknown:
        raise ConfigError(f"Unknown topic config name: {unknown[0]}", ErrorCode.invalid_config)
    for name in CONTROLLER_TOPIC_CONFIGS & set(overrides):
        if overrides[name].strip().lower() not in ("true", "false"):
            raise _bad_value(topic, name, overrides[name], "Expected value to be either true or false")
    log_overrides = {k: v for k, v in overrides.items() if k not in CONTROLLER_TOPIC_CONFIGS}
    try:
        return log_defaults.with_overrides(log_overrides)
    except ValidationError as exc:
        error = exc.errors()[0]
        if not error["loc"]:  # a rule across settings (min.compaction.lag.ms > max.compaction.lag.ms)
            raise ConfigError(str(error["ctx"]["error"]), ErrorCode.invalid_config) from None
        name = LogConfig.model_fields[str(error["loc"][0])].alias if str(error["loc"][0]) in LogConfig.model_fields \
            else str(error["loc"][0])
        raise _bad_value(topic, name, log_overrides.get(name), value_reason(name, error)) from None


def value_reason(name: str, error: dict) -> str:
    """Kafka's ConfigDef reason for a value pydantic refused."""
    kind = error["type"]
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"Not a number of type {'INT' if name in _INT_CONFIGS else 'LONG'}"
    if kind == "greater_than_equal":
        return f"Value must be at least {error['ctx']['ge']}"
    if kind in ("bool_parsing", "bool_type"):
        return "Expected value to be either true or false"
    return str(error["msg"])


def _bad_value(topic: str, name: str, value: object, reason: str) -> ConfigError:
    return ConfigError(f"Invalid config value for resource ConfigResource(type=TOPIC, name='{topic}'): "
                       f"Invalid value {value} for configuration {name}: {reason}", ErrorCode.invalid_request)
