"""The broker's configuration: one typed object built from Kafka's property names and defaults.

Where the classroom needs other values (short session and lag timeouts), they come from a named profile
that is printed at start, never from silently different defaults.
"""

from __future__ import annotations

import re

import socket
import sys
from typing import Any
from dataclasses import dataclass
from pathlib import Path

import javaproperties
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from broker.replication.truncation import TruncationRule

# Named profiles: Kafka property overrides applied before the user's own settings.
PROFILES: dict[str, dict[str, str]] = {
    "kafka": {},
    "classroom": {
        "zookeeper.session.timeout.ms": "2000",
        "replica.lag.time.max.ms": "3000",
        "controlled.shutdown.retry.backoff.ms": "500",
        "replica.fetch.backoff.ms": "200",
        "kafkasim.isr.change.propagation.blackout.ms": "100",
        "kafkasim.isr.change.propagation.interval.ms": "1000",
        # 10 offsets partitions instead of 50: a classroom cluster creates them in a second, not ten
        "offsets.topic.num.partitions": "10",
        # the same for __transaction_state
        "transaction.state.log.num.partitions": "10",
        "group.initial.rebalance.delay.ms": "300",
        # a broker back from a crash gets its preferred leaderships back within seconds, while the class watches
        "leader.imbalance.check.interval.seconds": "10",
        # compacted topics are cleaned within a second or two of becoming dirty enough, not 15 s later
        "log.cleaner.backoff.ms": "1000",
    },
}


class ConfigError(ValueError):
    """The configuration cannot be used; the message says which property and what to do."""


@dataclass(frozen=True)
class Listener:
    name: str
    host: str      # "" = all interfaces
    port: int

    @property
    def bind_host(self) -> str:
        return self.host or "0.0.0.0"

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(value: str, property_name: str) -> list[Listener]:
    listeners = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not name or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"{property_name}: {item!r} is not LISTENER_NAME://host:port")
        listeners.append(Listener(name.upper(), host.strip("[]"), int(port)))
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise ConfigError(f"{property_name}: each listener name may appear once ({value})")
    return listeners


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties text (java.util.Properties.load's rules) as a dict; raises ConfigError when unreadable."""
    try:
        props = javaproperties.loads(text)
    except javaproperties.InvalidUEscapeError as exc:
        raise ConfigError(f"{exc}: write a character as \\u and four hex digits") from None
    # Kafka's ConfigDef trims every value before parsing it, so "broker.id=3 " is broker 3 there too
    return {key: value.strip() for key, value in props.items()}


KAFKA_VERSION = "2.8-IV1"  # ApiVersion.latestVersion of Kafka 2.8


def _supported_version(value: str) -> bool:
    """Kafka's version names (ApiVersion): "0.11.0", "1.1", "2.8-IV1", "2.4.1" ... from 0.11.0 (record batch v2) to
    2.8."""
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?(?:-IV\d+)?", value.strip())
    if match is None:
        return False
    major, minor = int(match.group(1)), int(match.group(2))
    return (major, minor) >= (0, 11) and (major, minor) <= (2, 8)


def protocol_at_least(value: str, version: tuple[int, int]) -> bool:
    """Whether a Kafka version name (as ``_supported_version`` reads them) is at least ``version`` (major, minor)."""
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?(?:-IV\d+)?", value.strip())
    return match is not None and (int(match.group(1)), int(match.group(2))) >= version


class KafkaConfig(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="allow")

    broker_id: int = Field(alias="broker.id", ge=0)
    listeners: str = Field("PLAINTEXT://127.0.0.1:9092,CLUSTER://127.0.0.1:9192", alias="listeners")
    advertised_listeners: str | None = Field(None, alias="advertised.listeners")
    listener_security_protocol_map: str = Field("PLAINTEXT:PLAINTEXT,CLUSTER:PLAINTEXT",
                                                alias="listener.security.protocol.map")
    # kafkasim's inter-broker listener speaks gRPC (the cluster plane), never the Kafka protocol.
    inter_broker_listener_name: str = Field("CLUSTER", alias="inter.broker.listener.name")
    broker_rack: str | None = Field(None, alias="broker.rack")
    log_dir: str = Field("/tmp/kafka-logs", alias="log.dir")
    log_dirs: str | None = Field(None, alias="log.dirs")
    zookeeper_connect: str = Field(alias="zookeeper.connect", min_length=1)
    zookeeper_session_timeout_ms: int = Field(18000, alias="zookeeper.session.timeout.ms", gt=0)
    zookeeper_connection_timeout_ms: int | None = Field(None, alias="zookeeper.connection.timeout.ms", gt=0)
    controlled_shutdown_enable: bool = Field(True, alias="controlled.shutdown.enable")
    controlled_shutdown_max_retries: int = Field(3, alias="controlled.shutdown.max.retries", ge=0)
    controlled_shutdown_retry_backoff_ms: int = Field(5000, alias="controlled.shutdown.retry.backoff.ms", ge=0)
    unclean_leader_election_enable: bool = Field(False, alias="unclean.leader.election.enable")
    # Reported by DescribeConfigs, where admin tools (kafka-ui, AKHQ) read the cluster's version. kafkasim speaks
    # Kafka 2.8's protocol and stores record batch v2 whatever they say: only values it can honour are accepted.
    inter_broker_protocol_version: str = Field(KAFKA_VERSION, alias="inter.broker.protocol.version")
    log_message_format_version: str = Field(KAFKA_VERSION, alias="log.message.format.version")
    # Preferred leader election: the controller gives partitions back to their first assigned replica when a
    # broker's share of them led elsewhere is above the percentage (checked every interval)
    auto_leader_rebalance_enable: bool = Field(True, alias="auto.leader.rebalance.enable")
    leader_imbalance_check_interval_seconds: int = Field(300, alias="leader.imbalance.check.interval.seconds", ge=1)
    leader_imbalance_per_broker_percentage: int = Field(10, alias="leader.imbalance.per.broker.percentage", ge=0)
    delete_topic_enable: bool = Field(True, alias="delete.topic.enable")
    auto_create_topics_enable: bool = Field(True, alias="auto.create.topics.enable")
    num_partitions: int = Field(1, alias="num.partitions", ge=1)
    default_replication_factor: int = Field(1, alias="default.replication.factor", ge=1)
    # KIP-578's limit (not in Kafka 2.8, which allocates whatever a request asks for): CreateTopics,
    # CreatePartitions and auto-creation are refused (POLICY_VIOLATION) past this many replicas on a broker
    max_broker_partitions: int = Field(10000, alias="max.broker.partitions", ge=1)
    replica_lag_time_max_ms: int = Field(30000, alias="replica.lag.time.max.ms", gt=0)
    controller_socket_timeout_ms: int = Field(30000, alias="controller.socket.timeout.ms", gt=0)
    replica_fetch_wait_max_ms: int = Field(500, alias="replica.fetch.wait.max.ms", ge=0)
    replica_fetch_min_bytes: int = Field(1, alias="replica.fetch.min.bytes", ge=0)
    replica_fetch_max_bytes: int = Field(1048576, alias="replica.fetch.max.bytes", ge=0)
    replica_fetch_response_max_bytes: int = Field(10485760, alias="replica.fetch.response.max.bytes", ge=0)
    replica_fetch_backoff_ms: int = Field(1000, alias="replica.fetch.backoff.ms", ge=0)
    replica_socket_timeout_ms: int = Field(30000, alias="replica.socket.timeout.ms", gt=0)
    replica_high_watermark_checkpoint_interval_ms: int = Field(
        5000, alias="replica.high.watermark.checkpoint.interval.ms", gt=0)
    log_retention_check_interval_ms: int = Field(300000, alias="log.retention.check.interval.ms", gt=0)
    log_flush_offset_checkpoint_interval_ms: int = Field(60000, alias="log.flush.offset.checkpoint.interval.ms", gt=0)
    # Kafka 2.x announces ISR changes once they have been quiet for 5 s, or at least every 60 s
    # (ReplicaManager.maybePropagateIsrChanges); the classroom profile shortens both.
    isr_change_propagation_blackout_ms: int = Field(5000, alias="kafkasim.isr.change.propagation.blackout.ms", ge=0)
    isr_change_propagation_interval_ms: int = Field(60000, alias="kafkasim.isr.change.propagation.interval.ms",
                                                    ge=0)
    # Consumer groups (Kafka's GroupCoordinator and GroupMetadataManager settings).
    group_min_session_timeout_ms: int = Field(6000, alias="group.min.session.timeout.ms", gt=0)
    group_max_session_timeout_ms: int = Field(1800000, alias="group.max.session.timeout.ms", gt=0)
    group_initial_rebalance_delay_ms: int = Field(3000, alias="group.initial.rebalance.delay.ms", ge=0)
    offsets_topic_num_partitions: int = Field(50, alias="offsets.topic.num.partitions", ge=1)
    offsets_topic_replication_factor: int = Field(3, alias="offsets.topic.replication.factor", ge=1)
    offsets_topic_segment_bytes: int = Field(104857600, alias="offsets.topic.segment.bytes", ge=1)
    offsets_commit_timeout_ms: int = Field(5000, alias="offsets.commit.timeout.ms", gt=0)
    offset_metadata_max_bytes: int = Field(4096, alias="offset.metadata.max.bytes", ge=0)
    # Offset expiry (KIP-211): Kafka accepts at least 1 minute and 1 ms.
    offsets_retention_minutes: int = Field(10080, alias="offsets.retention.minutes", ge=1)
    offsets_retention_check_interval_ms: int = Field(600000, alias="offsets.retention.check.interval.ms", ge=1)
    # Transactions (Kafka's TransactionCoordinator, TransactionStateManager and TransactionLog settings).
    transaction_state_log_num_partitions: int = Field(50, alias="transaction.state.log.num.partitions", ge=1)
    transaction_state_log_replication_factor: int = Field(3, alias="transaction.state.log.replication.factor", ge=1)
    transaction_state_log_min_isr: int = Field(2, alias="transaction.state.log.min.isr", ge=1)
    transaction_state_log_segment_bytes: int = Field(104857600, alias="transaction.state.log.segment.bytes", ge=1)
    transaction_max_timeout_ms: int = Field(900000, alias="transaction.max.timeout.ms", ge=1)
    transactional_id_expiration_ms: int = Field(604800000, alias="transactional.id.expiration.ms", ge=1)
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        10000, alias="transaction.abort.timed.out.transaction.cleanup.interval.ms", ge=1)
    transaction_remove_expired_transaction_cleanup_interval_ms: int = Field(
        3600000, alias="transaction.remove.expired.transaction.cleanup.interval.ms", ge=1)
    # Which follower truncation rule to replay: high-watermark (before KIP-101), kip-101, kip-279.
    replica_truncation_rule: TruncationRule = Field(TruncationRule.KIP_279, alias="kafkasim.replica.truncation.rule")
    trace_file: str | None = Field(None, alias="kafkasim.trace.file")
    # Tracing can be switched off to measure what it costs; rotation keeps a long run's traces bounded.
    trace_enable: bool = Field(True, alias="kafkasim.trace.enable")
    trace_file_max_bytes: int = Field(104857600, alias="kafkasim.trace.file.max.bytes", gt=0)
    trace_file_backups: int = Field(10, alias="kafkasim.trace.file.backups", ge=0)
    trace_buffer_events: int = Field(65536, alias="kafkasim.trace.buffer.events", gt=0)
    # at most one leader-side follower-state and fetch-served event per replica per interval
    trace_replica_interval_ms: int = Field(100, alias="kafkasim.trace.replica.interval.ms", ge=0)
    profile: str = Field("kafka", alias="kafkasim.profile")
    # Prometheus text on http://<client listener host>:<port>/metrics (docs/metrics.md); 0 serves none
    metrics_port: int = Field(0, alias="kafkasim.metrics.port", ge=0, le=65535)

    @field_validator("inter_broker_protocol_version", "log_message_format_version")
    @classmethod
    def _a_version_of_two_eight_or_before(cls, value: str, info) -> str:
        if not _supported_version(value):
            name = cls.model_fields[info.field_name].alias
            raise ValueError(f"{name}={value!r}: kafkasim speaks Kafka 2.8's protocol and writes record batch v2 "
                             f"(message format 0.11.0 and later): use a version from 0.11.0 to {KAFKA_VERSION}, "
                             "or leave it out")
        return value

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        if value not in PROFILES:
            raise ValueError(f"unknown profile {value!r}; choose one of {', '.join(PROFILES)}")
        return value

    @model_validator(mode="after")
    def _listeners_make_sense(self) -> KafkaConfig:
        listeners = parse_listeners(self.listeners, "listeners")
        names = {listener.name for listener in listeners}
        if self.inter_broker_listener_name not in names:
            raise ValueError(
                f"listeners must include the cluster-plane listener {self.inter_broker_listener_name}://host:port "
                f"(gRPC between controller and brokers), e.g. "
                f"listeners=PLAINTEXT://127.0.0.1:9092,{self.inter_broker_listener_name}://127.0.0.1:9192")
        if len(names) < 2:
            raise ValueError("listeners needs a client listener (e.g. PLAINTEXT://127.0.0.1:9092) as well")
        advertised = {listener.name for listener in self.advertised}
        if not advertised <= names:
            raise ValueError(f"advertised.listeners names {sorted(advertised - names)} not in listeners")
        ports = [listener.port for listener in listeners if listener.port]
        if len(set(ports)) != len(ports):
            raise ValueError(f"listeners use one port twice: {self.listeners}")
        if self.metrics_port and self.metrics_port in ports:
            raise ValueError(f"kafkasim.metrics.port={self.metrics_port} is a listener's port too: choose another")
        return self

    # --- derived views ----------------------------------------------------------------------------------

    @property
    def bound_listeners(self) -> list[Listener]:
        return parse_listeners(self.listeners, "listeners")

    @property
    def advertised(self) -> list[Listener]:
        listeners = parse_listeners(self.advertised_listeners or self.listeners, "advertised.listeners")
        # Kafka advertises the host name when a listener binds every interface.
        return [Listener(lst.name, lst.host or socket.getfqdn(), lst.port) for lst in listeners]

    @property
    def client_listeners(self) -> list[Listener]:
        return [lst for lst in self.bound_listeners if lst.name != self.inter_broker_listener_name]

    @property
    def cluster_listener(self) -> Listener:
        return next(lst for lst in self.bound_listeners if lst.name == self.inter_broker_listener_name)

    @property
    def metrics_host(self) -> str:
        """The metrics endpoint binds where the first client listener does (the broker's own address)."""
        return self.client_listeners[0].bind_host

    @property
    def security_protocol_map(self) -> dict[str, str]:
        pairs = (item.split(":", 1) for item in self.listener_security_protocol_map.split(",") if ":" in item)
        return {name.strip().upper(): protocol.strip().upper() for name, protocol in pairs}

    @property
    def all_log_dirs(self) -> list[Path]:
        return [Path(d.strip()) for d in (self.log_dirs or self.log_dir).split(",") if d.strip()]

    @property
    def trace_path(self) -> Path:
        return Path(self.trace_file) if self.trace_file else self.all_log_dirs[0] / "kafkasim-trace.jsonl"

    @property
    def log_properties(self) -> dict[str, Any]:
        """The broker-level topic defaults (log.*, message.max.bytes, min.insync.replicas, ...), as given.

        They are declared once, in `broker.log.config.LogConfig` (Kafka's LogConfig, which also holds the topic-level
        min.insync.replicas), and validated there when the broker's configuration is built."""
        return dict(self.model_extra or {})

    @property
    def unknown_properties(self) -> list[str]:
        return sorted(self.model_extra or {})

    # --- building -------------------------------------------------------------------------------------

    @classmethod
    def from_properties(cls, props: dict[str, str], source: str = "configuration") -> KafkaConfig:
        profile = props.get("kafkasim.profile", "kafka")
        merged = {**PROFILES.get(profile, {}), **props}
        try:
            config = cls.model_validate(merged)
            from broker.log.config import LogConfig

            LogConfig.from_broker_properties(config.model_extra or {})  # log.* settings fail here, not later
            from broker.log.cleaner.log_cleaner import CleanerConfig

            CleanerConfig.model_validate(config.model_extra or {})  # and log.cleaner.* ones
            return config
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                where = ".".join(str(part) for part in error["loc"]) or "(properties)"
                message = "is required" if error["type"] == "missing" else error["msg"].removeprefix("Value error, ")
                problems.append(f"  {where}: {message}")
            raise ConfigError(f"{source} is not a usable broker configuration:\n" + "\n".join(problems)) from None
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @classmethod
    def from_file(cls, path: Path, overrides: dict[str, str] | None = None) -> KafkaConfig:
        try:
            # Java reads Latin-1 and writers escape the rest as \uXXXX (kafkasim's do); UTF-8 also takes
            # a file typed by hand with non-ASCII characters, and reads the escaped files the same way
            props = parse_properties(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"cannot read {path}: byte {exc.start} is not UTF-8; write other characters "
                              "as \\uXXXX") from None
        except ConfigError as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from None
        return cls.from_properties({**props, **(overrides or {})}, str(path))

    def describe(self) -> str:
        lines = [f"kafkasim broker {self.broker_id}, profile {self.profile}"]
        for key, value in PROFILES[self.profile].items():
            lines.append(f"  profile sets {key}={value}")
        from broker.log.cleaner.log_cleaner import cleaner_property_names
        from broker.log.config import broker_property_names, topic_property_names

        log_keys = broker_property_names() | topic_property_names() | cleaner_property_names()
        for key in (k for k in self.unknown_properties if k not in log_keys):
            lines.append(f"  warning: the configuration {key} was supplied but isn't a known config")
        return "\n".join(lines)


def print_config_error(exc: ConfigError) -> None:
    print(f"error: {exc}", file=sys.stderr)
