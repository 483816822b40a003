"""Dynamic broker configs (KIP-226), the pure part: which broker configs may change without a restart, the layers
a broker's effective value comes from (its own dynamic config over the cluster-wide default over server.properties
over Kafka's default), the checks Kafka 2.8 makes before writing a change (DynamicBrokerConfig.validate) and the
synonyms DescribeConfigs lists (ConfigHelper.configSynonyms)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kio.schema.errors import ErrorCode
from pydantic import ValidationError
from pydantic_core import PydanticUndefined

from broker.config import KafkaConfig
from broker.dynamic_config import ConfigError, value_reason
from broker.replication.truncation import TruncationRule
from broker.log.config import (
    LogConfig,
    broker_log_property_names,
    broker_property_names,
    broker_synonym,
    topic_synonym,
)

UNCLEAN = "unclean.leader.election.enable"
TRUNCATION_RULE = "kafkasim.replica.truncation.rule"
# Kafka's DynamicLogConfig.ReconfigurableConfigs: the broker synonyms of the topic configs (kafkasim's LogConfig,
# its kafkasim.log.simulate.unflushed.loss switch included), and unclean.leader.election.enable, which the
# controller reads. log.roll.hours and log.retention.hours/minutes are not among them, as in Kafka. kafkasim's own
# historical switch, the follower truncation rule, is dynamic too: a class can flip it between two crashes.
DYNAMIC_BROKER_CONFIGS = broker_log_property_names() | {UNCLEAN, TRUNCATION_RULE}


class ConfigSource(IntEnum):
    """DescribeConfigs' ConfigSource."""

    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


Synonym = tuple[str, str | None, ConfigSource]  # name, value, source


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    return str(getattr(value, "value", value))


def default_broker_configs() -> dict[str, str | None]:
    """Kafka's default of every broker config kafkasim knows (KafkaConfig.defaultValues): a config whose default is
    null is listed with None (log.retention.ms, log.roll.ms), one without a default (broker.id) is not."""
    defaults: dict[str, str | None] = {}
    for name, info in KafkaConfig.model_fields.items():
        if info.default is not PydanticUndefined:
            defaults[info.alias or name] = _text(info.default)
    log_defaults = LogConfig().to_properties()
    for broker_name in broker_log_property_names():
        defaults[broker_name] = _text(log_defaults[topic_synonym(broker_name)])
    defaults.update({"log.roll.ms": None, "log.roll.hours": "168", "log.retention.ms": None,
                     "log.retention.minutes": None, "log.retention.hours": "168"})
    return defaults


def known_broker_configs() -> frozenset[str]:
    return frozenset(default_broker_configs()) | broker_property_names() | {"broker.id", "zookeeper.connect"}


def broker_synonyms(name: str) -> list[str]:
    """The names that set one broker config, the most specific first (DynamicBrokerConfig.brokerConfigSynonyms)."""
    if name in ("log.roll.ms", "log.roll.hours"):
        return ["log.roll.ms", "log.roll.hours"]
    if name in ("log.retention.ms", "log.retention.minutes", "log.retention.hours"):
        return ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    return [name]


@dataclass(frozen=True)
class BrokerConfigLayers:
    """One broker's config, by where each value comes from. ``static`` is server.properties as given (with the
    profile's settings, which are given too); the dynamic layers hold ZooKeeper's strings."""

    static: Mapping[str, str]
    default_dynamic: Mapping[str, str] = field(default_factory=dict)
    broker_dynamic: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, str | None] = field(default_factory=default_broker_configs)

    @classmethod
    def of(cls, config: KafkaConfig) -> BrokerConfigLayers:
        given = config.model_dump(by_alias=True, exclude_unset=True, mode="json")
        static = {name: _text(value) for name, value in {**given, **(config.model_extra or {})}.items()}
        return cls({k: v for k, v in static.items() if v is not None})

    def with_dynamic(self, *, default: Mapping[str, str] | None = None,
                     broker: Mapping[str, str] | None = None) -> BrokerConfigLayers:
        return BrokerConfigLayers(self.static, self.default_dynamic if default is None else dict(default),
                                  self.broker_dynamic if broker is None else dict(broker), self.defaults)

    def effective(self) -> dict[str, str]:
        """The value each config has now. Only dynamic configs are taken from the dynamic layers, as Kafka
        ignores (and logs) a read-only one written there by hand."""
        dynamic = {k: v for k, v in {**self.default_dynamic, **self.broker_dynamic}.items()
                   if k in DYNAMIC_BROKER_CONFIGS}
        return {**self.static, **dynamic}

    def log_defaults(self) -> LogConfig:
        """Every topic's log defaults; raises ValidationError when a value is not one."""
        properties = self.effective()
        return LogConfig.from_broker_properties({k: v for k, v in properties.items() if k in broker_property_names()})

    def unclean_leader_election_enable(self) -> bool:
        value = self.effective().get(UNCLEAN, self.defaults.get(UNCLEAN) or "false")
        return value.strip().lower() == "true"

    def truncation_rule(self) -> TruncationRule:
        return TruncationRule(self.effective().get(TRUNCATION_RULE, self.defaults.get(TRUNCATION_RULE)).strip())

    def synonyms(self, name: str, names: list[str] | None = None) -> list[Synonym]:
        """Kafka's synonyms of a broker config: every name that sets it, per layer from the per-broker dynamic one
        to the default, with the ones before the config's own name dropped (ConfigHelper.configSynonyms)."""
        names = broker_synonyms(name) if names is None else names
        layers = ((self.broker_dynamic, ConfigSource.DYNAMIC_BROKER_CONFIG),
                  (self.default_dynamic, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                  (self.static, ConfigSource.STATIC_BROKER_CONFIG), (self.defaults, ConfigSource.DEFAULT_CONFIG))
        found = [(n, layer[n], source) for layer, source in layers for n in names if n in layer]
        while found and found[0][0] != name:
            found.pop(0)
        return found


def validate_broker_change(resource_name: str, overrides: Mapping[str, str], layers: BrokerConfigLayers) -> None:
    """Raise ConfigError unless ``overrides`` may become the dynamic config of the resource: a broker's (its id)
    or the cluster-wide default's (""). Checked as Kafka 2.8 does, in its order, and answered as its ZkAdminManager
    answers a ConfigException: INVALID_REQUEST, "Invalid config value for resource ...". A name no broker config
    has is INVALID_CONFIG: Kafka would store it and never read it, kafkasim says so instead."""
    prefix = f"Invalid config value for resource ConfigResource(type=BROKER, name='{resource_name}'): "
    unknown = sorted(set(overrides) - known_broker_configs())
    if unknown:
        raise ConfigError(f"Unknown broker config name: {unknown[0]} (kafkasim's dynamic broker configs are "
                          f"{', '.join(sorted(DYNAMIC_BROKER_CONFIGS))})", ErrorCode.invalid_config)
    read_only = sorted(set(overrides) - DYNAMIC_BROKER_CONFIGS)
    if read_only:
        raise ConfigError(f"{prefix}Cannot update these configs dynamically: Set({', '.join(read_only)})",
                          ErrorCode.invalid_request)
    if UNCLEAN in overrides and overrides[UNCLEAN].strip().lower() not in ("true", "false"):
        raise ConfigError(f"{prefix}Invalid value {overrides[UNCLEAN]} for configuration {UNCLEAN}: "
                          "Expected value to be either true or false", ErrorCode.invalid_request)
    rules = [rule.value for rule in TruncationRule]
    if TRUNCATION_RULE in overrides and overrides[TRUNCATION_RULE].strip() not in rules:
        raise ConfigError(f"{prefix}Invalid value {overrides[TRUNCATION_RULE]} for configuration {TRUNCATION_RULE}: "
                          f"String must be one of: {', '.join(rules)}", ErrorCode.invalid_request)
    changed = layers.with_dynamic(default=overrides) if resource_name == "" else layers.with_dynamic(broker=overrides)
    try:
        changed.log_defaults()
    except ValidationError as exc:
        error = exc.errors()[0]
        topic_name = str(error["loc"][0])
        if topic_name in LogConfig.model_fields:
            topic_name = LogConfig.model_fields[topic_name].alias or topic_name
        name = broker_synonym(topic_name) or topic_name
        value: Any = overrides.get(name, changed.effective().get(name))
        raise ConfigError(f"{prefix}Invalid value {value} for configuration {name}: {value_reason(name, error)}",
                          ErrorCode.invalid_request) from None
