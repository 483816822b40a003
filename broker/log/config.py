"""LogConfig: the per-topic log settings, named and defaulted as Kafka's topic configs."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LONG_MAX = 2**63 - 1
_DAY_MS = 24 * 60 * 60 * 1000
CLEANUP_POLICIES = ("delete", "compact")


class TimestampType(StrEnum):
    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


class LogConfig(BaseModel):
    """Settings of one partition's log, built from Kafka topic property names with Kafka's defaults.

    Construct with property names (``LogConfig.model_validate({"segment.bytes": 1 << 20})``) or field
    names. Broker-level names (``log.segment.bytes``, ``log.roll.hours``, ...) go through
    :meth:`from_broker_properties`.

    One kafkasim-only property exists, for teaching:

    ``kafkasim.log.simulate.unflushed.loss`` (default ``false``)
        When true, every flush also records the flushed offset durably in the partition directory
        (``kafkasim-flushed-offset-checkpoint``), and recovery after an unclean shutdown cuts the log
        back to that offset. It makes a ``kill -9`` behave like a power failure: whatever the broker
        acknowledged but never fsynced is gone, which is exactly what Kafka's default flush policy
        (leave it to the OS, rely on replication) risks when every replica crashes together.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    segment_bytes: int = Field(1 << 30, alias="segment.bytes", ge=14)
    segment_ms: int = Field(7 * _DAY_MS, alias="segment.ms", ge=1)
    segment_index_bytes: int = Field(10 * 1024 * 1024, alias="segment.index.bytes", ge=24)
    index_interval_bytes: int = Field(4096, alias="index.interval.bytes", ge=0)
    retention_ms: int = Field(7 * _DAY_MS, alias="retention.ms", ge=-1)
    retention_bytes: int = Field(-1, alias="retention.bytes")
    flush_messages: int = Field(LONG_MAX, alias="flush.messages", ge=0)
    flush_ms: int = Field(LONG_MAX, alias="flush.ms", ge=0)
    max_message_bytes: int = Field(1048588, alias="max.message.bytes", ge=0)
    message_timestamp_type: TimestampType = Field(TimestampType.CREATE_TIME, alias="message.timestamp.type")
    message_timestamp_difference_max_ms: int = Field(LONG_MAX, alias="message.timestamp.difference.max.ms", ge=0)
    file_delete_delay_ms: int = Field(60000, alias="file.delete.delay.ms", ge=0)
    # Not a log setting, but a topic config Kafka keeps in LogConfig too: acks=all needs this many in sync.
    min_insync_replicas: int = Field(1, alias="min.insync.replicas", ge=1)
    simulate_unflushed_loss: bool = Field(False, alias="kafkasim.log.simulate.unflushed.loss")
    # Compaction (the log cleaner, broker/log/cleaner/): Kafka's names and defaults.
    cleanup_policy: str = Field("delete", alias="cleanup.policy")
    min_cleanable_dirty_ratio: float = Field(0.5, alias="min.cleanable.dirty.ratio", ge=0, le=1)
    min_compaction_lag_ms: int = Field(0, alias="min.compaction.lag.ms", ge=0)
    max_compaction_lag_ms: int = Field(LONG_MAX, alias="max.compaction.lag.ms", ge=1)
    delete_retention_ms: int = Field(_DAY_MS, alias="delete.retention.ms", ge=0)

    @field_validator("cleanup_policy")
    @classmethod
    def _known_policies(cls, value: str) -> str:
        # Kafka's ValidList: a comma-separated list of "delete" and "compact", at least one
        policies = [p.strip() for p in value.split(",")]
        if not value.strip() or any(p not in CLEANUP_POLICIES for p in policies):
            raise ValueError(f"cleanup.policy must be a list of {' and '.join(CLEANUP_POLICIES)} (got {value!r})")
        return value

    @model_validator(mode="after")
    def _compaction_lags_in_order(self) -> LogConfig:
        # LogConfig.validateValues: InvalidConfigurationException, INVALID_CONFIG on the wire
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ValueError(f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
                             f"max.compaction.lag.ms ({self.max_compaction_lag_ms})")
        return self

    @property
    def compact(self) -> bool:
        """The log cleaner compacts this log (cleanup.policy holds compact)."""
        return "compact" in {p.strip() for p in self.cleanup_policy.split(",")}

    @property
    def delete(self) -> bool:
        """Retention by time and size applies (cleanup.policy holds delete); a compact-only log keeps its segments."""
        return "delete" in {p.strip() for p in self.cleanup_policy.split(",")}

    def with_overrides(self, topic_properties: Mapping[str, Any]) -> LogConfig:
        """This config with per-topic properties (Kafka topic names) applied on top."""
        merged = self.to_properties()
        merged.update(topic_properties)
        return LogConfig.model_validate(merged)

    def to_properties(self) -> dict[str, Any]:
        """The config as Kafka topic property names, e.g. for printing at start."""
        return self.model_dump(by_alias=True, mode="json")

    @classmethod
    def from_broker_properties(cls, properties: Mapping[str, Any]) -> LogConfig:
        """Defaults for every topic, from broker properties (``log.*``, ``message.max.bytes``).

        Like Kafka, ``log.roll.ms`` wins over ``log.roll.hours`` and ``log.retention.ms`` over
        ``.minutes`` over ``.hours``.
        """
        topic: dict[str, Any] = {}
        for broker_name, topic_name in _BROKER_TO_TOPIC.items():
            if broker_name in properties:
                topic[topic_name] = properties[broker_name]
        if "segment.ms" not in topic and "log.roll.hours" in properties:
            topic["segment.ms"] = int(properties["log.roll.hours"]) * 3_600_000
        if "retention.ms" not in topic:
            if "log.retention.minutes" in properties:
                topic["retention.ms"] = int(properties["log.retention.minutes"]) * 60_000
            elif "log.retention.hours" in properties:
                topic["retention.ms"] = int(properties["log.retention.hours"]) * 3_600_000
        return cls.model_validate(topic)


def topic_property_names() -> frozenset[str]:
    """The topic-level names a /config/topics/<t> entry may set for the log."""
    return frozenset(field.alias or name for name, field in LogConfig.model_fields.items())


def broker_property_names() -> frozenset[str]:
    """The broker-level names (log.*) that set every topic's log defaults."""
    return frozenset(_BROKER_TO_TOPIC) | {"log.roll.hours", "log.retention.minutes", "log.retention.hours"}


def broker_log_property_names() -> frozenset[str]:
    """The broker properties that each set one topic config's default (Kafka's TopicConfigSynonyms' values)."""
    return frozenset(_BROKER_TO_TOPIC)


def topic_synonym(broker_name: str) -> str:
    """The topic config whose default a broker log property sets."""
    return _BROKER_TO_TOPIC[broker_name]


def broker_synonym(topic_name: str) -> str | None:
    """The broker property that sets a topic config's default (Kafka's LogConfig.TopicConfigSynonyms)."""
    return _TOPIC_TO_BROKER.get(topic_name)


_BROKER_TO_TOPIC = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
    "kafkasim.log.simulate.unflushed.loss": "kafkasim.log.simulate.unflushed.loss",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
}
_TOPIC_TO_BROKER = {topic: broker for broker, topic in _BROKER_TO_TOPIC.items()}
