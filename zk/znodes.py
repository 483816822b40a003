"""One model per znode: its path, how its payload is encoded and how it is decoded.

The payloads are Kafka 2.x's (ZkData.scala): compact JSON with Kafka's key names, read in any key order
because Scala's hash maps do not keep one. No ZooKeeper calls live here.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ZNodeDecodeError(ValueError):
    """A znode holds bytes that are not the payload Kafka writes there."""

    def __init__(self, path: str, data: bytes | None, reason: str) -> None:
        shown = data[:200] if data else data
        super().__init__(f"znode {path} holds {shown!r}, not a valid payload: {reason}")
        self.path = path


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _loads(path: str, data: bytes | None) -> Any:
    if not data:
        raise ZNodeDecodeError(path, data, "empty")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZNodeDecodeError(path, data, str(exc)) from None


def _validate(model: type[BaseModel], path: str, data: bytes | None) -> Any:
    try:
        return model.model_validate(_loads(path, data))
    except ValidationError as exc:
        raise ZNodeDecodeError(path, data, exc.errors()[0]["msg"]) from None


def now_ms_string() -> str:
    # Kafka writes timestamps in znodes as strings of epoch milliseconds.
    return str(int(time.time() * 1000))


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


# --- /controller --------------------------------------------------------------------------------------


class ControllerInfo(_Payload):
    version: int = 1
    brokerid: int
    timestamp: str = Field(default_factory=now_ms_string)


class ControllerZNode:
    path = "/controller"

    @staticmethod
    def encode(broker_id: int) -> bytes:
        return _dumps({"version": 1, "brokerid": broker_id, "timestamp": now_ms_string()})

    @staticmethod
    def decode(data: bytes | None) -> ControllerInfo:
        return _validate(ControllerInfo, ControllerZNode.path, data)


# --- /controller_epoch: a plain ASCII integer, not JSON -------------------------------------------------


class ControllerEpochZNode:
    path = "/controller_epoch"

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(epoch).encode()

    @staticmethod
    def decode(data: bytes | None) -> int:
        try:
            return int((data or b"").decode().strip())
        except (UnicodeDecodeError, ValueError):
            raise ZNodeDecodeError(ControllerEpochZNode.path, data, "not an integer") from None


# --- /brokers/ids/<id> -----------------------------------------------------------------------------------


class BrokerRegistration(_Payload):
    """Registration JSON v5 (Kafka 2.7+). The znode's czxid, not a field, is the broker epoch."""

    version: int = 5
    host: str | None = None
    port: int = -1
    jmx_port: int = -1
    timestamp: str = Field(default_factory=now_ms_string)
    endpoints: list[str] = Field(default_factory=list)
    rack: str | None = None
    listener_security_protocol_map: dict[str, str] = Field(default_factory=dict)
    features: dict[str, Any] = Field(default_factory=dict)

    def endpoint(self, listener_name: str) -> tuple[str, int] | None:
        """host and port of the named listener, e.g. ("127.0.0.1", 9192) for CLUSTER."""
        prefix = listener_name + "://"
        for endpoint in self.endpoints:
            if endpoint.startswith(prefix):
                host, _, port = endpoint[len(prefix):].rpartition(":")
                return host.strip("[]"), int(port)
        return None


class BrokerIdsZNode:
    path = "/brokers/ids"


class BrokerIdZNode:
    @staticmethod
    def path(broker_id: int) -> str:
        return f"/brokers/ids/{broker_id}"

    @staticmethod
    def encode(registration: BrokerRegistration) -> bytes:
        body = registration.model_dump()
        if body["rack"] is None:
            del body["rack"]  # Kafka writes "rack" only when broker.rack is set
        return _dumps(body)

    @staticmethod
    def decode(broker_id: int, data: bytes | None) -> BrokerRegistration:
        return _validate(BrokerRegistration, BrokerIdZNode.path(broker_id), data)


# --- /brokers/topics/<topic> -----------------------------------------------------------------------------


class TopicAssignment(_Payload):
    """Replica assignment JSON v2 (2.4+). Partition keys are strings on the wire; the first replica is the
    preferred leader."""

    version: int = 2
    partitions: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = Field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = Field(default_factory=dict)


class BrokerTopicsZNode:
    path = "/brokers/topics"


class TopicZNode:
    @staticmethod
    def path(topic: str) -> str:
        return f"/brokers/topics/{topic}"

    @staticmethod
    def encode(assignment: dict[int, list[int]], adding_replicas: dict[int, list[int]] | None = None,
               removing_replicas: dict[int, list[int]] | None = None) -> bytes:
        """While a partition is reassigned (KIP-455) its replicas are the target then the rest of the original,
        and the two maps name the replicas being added and removed; Kafka writes both maps always, leaving out
        partitions whose list is empty."""
        return _dumps({
            "version": 2,
            "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
            "adding_replicas": {str(p): list(r) for p, r in sorted((adding_replicas or {}).items()) if r},
            "removing_replicas": {str(p): list(r) for p, r in sorted((removing_replicas or {}).items()) if r},
        })

    @staticmethod
    def decode(topic: str, data: bytes | None) -> TopicAssignment:
        return _validate(TopicAssignment, TopicZNode.path(topic), data)


class TopicPartitionsZNode:
    @staticmethod
    def path(topic: str) -> str:
        return f"/brokers/topics/{topic}/partitions"


class TopicPartitionZNode:
    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"/brokers/topics/{topic}/partitions/{partition}"


# --- /brokers/topics/<t>/partitions/<p>/state ------------------------------------------------------------

NO_LEADER = -1


class LeaderIsrAndControllerEpoch(_Payload):
    """The partition state. Its znode's stat version is the "zkVersion" every writer compares and sets."""

    version: int = 1
    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int

    def with_changes(self, **changes: Any) -> LeaderIsrAndControllerEpoch:
        return self.model_copy(update=changes)


class TopicPartitionStateZNode:
    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"/brokers/topics/{topic}/partitions/{partition}/state"

    @staticmethod
    def encode(state: LeaderIsrAndControllerEpoch) -> bytes:
        return _dumps({
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        })

    @staticmethod
    def decode(topic: str, partition: int, data: bytes | None) -> LeaderIsrAndControllerEpoch:
        return _validate(LeaderIsrAndControllerEpoch, TopicPartitionStateZNode.path(topic, partition), data)


# --- /isr_change_notification/isr_change_<seq> -----------------------------------------------------------


class _TopicPartitionRef(_Payload):
    topic: str
    partition: int


class IsrChangeNotification(_Payload):
    version: int = 1
    partitions: list[_TopicPartitionRef]


class IsrChangeNotificationZNode:
    path = "/isr_change_notification"
    # persistent-sequential: ZooKeeper appends a 10-digit counter to this prefix
    prefix = "/isr_change_notification/isr_change_"

    @staticmethod
    def encode(partitions: list[tuple[str, int]]) -> bytes:
        return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})

    @staticmethod
    def decode(path: str, data: bytes | None) -> list[tuple[str, int]]:
        note = _validate(IsrChangeNotification, path, data)
        return [(ref.topic, ref.partition) for ref in note.partitions]


# --- /admin/delete_topics/<topic> ------------------------------------------------------------------------


class DeleteTopicsZNode:
    path = "/admin/delete_topics"


class DeleteTopicsTopicZNode:
    """Holds no data: its existence is the request to delete the topic."""

    @staticmethod
    def path(topic: str) -> str:
        return f"/admin/delete_topics/{topic}"


# --- /admin/preferred_replica_election ------------------------------------------------------------------


class PreferredReplicaElection(_Payload):
    version: int = 1
    partitions: list[_TopicPartitionRef]


class PreferredReplicaElectionZNode:
    """Written by kafka-preferred-replica-election.sh / kafka-leader-election.sh --zookeeper (and kafkasim's own
    tools): the partitions to give back to their preferred replicas. The controller deletes it when done."""

    path = "/admin/preferred_replica_election"

    @staticmethod
    def encode(partitions: list[tuple[str, int]]) -> bytes:
        return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})

    @staticmethod
    def decode(data: bytes | None) -> list[tuple[str, int]]:
        election = _validate(PreferredReplicaElection, PreferredReplicaElectionZNode.path, data)
        return [(ref.topic, ref.partition) for ref in election.partitions]


# --- /admin/reassign_partitions ------------------------------------------------------------------------


class _PartitionReplicas(_Payload):
    topic: str
    partition: int
    replicas: list[int]


class ReassignPartitions(_Payload):
    version: int = 1
    partitions: list[_PartitionReplicas]


class ReassignPartitionsZNode:
    """Written by the ZooKeeper-era kafka-reassign-partitions.sh --zookeeper: each partition's target replicas.
    The controller (KIP-455 keeps it as the legacy path) removes each partition once moved, the znode once empty.
    Other fields a tool writes (``log_dirs``) are ignored."""

    path = "/admin/reassign_partitions"

    @staticmethod
    def encode(partitions: dict[tuple[str, int], list[int]]) -> bytes:
        return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                                    for (t, p), r in sorted(partitions.items())]})

    @staticmethod
    def decode(data: bytes | None) -> dict[tuple[str, int], list[int]]:
        request = _validate(ReassignPartitions, ReassignPartitionsZNode.path, data)
        return {(ref.topic, ref.partition): list(ref.replicas) for ref in request.partitions}


# --- /config/topics/<topic> ------------------------------------------------------------------------------


class ConfigEntity(_Payload):
    version: int = 1
    config: dict[str, str] = Field(default_factory=dict)


class TopicConfigZNode:
    entity_type = "topics"

    @staticmethod
    def path(topic: str) -> str:
        return f"/config/topics/{topic}"

    @staticmethod
    def encode(config: dict[str, str]) -> bytes:
        return _dumps({"version": 1, "config": {k: str(v) for k, v in config.items()}})

    @staticmethod
    def decode(topic: str, data: bytes | None) -> dict[str, str]:
        return dict(_validate(ConfigEntity, TopicConfigZNode.path(topic), data).config)


# --- /config/brokers/<id> and /config/brokers/<default> ----------------------------------------------------


class BrokerConfigZNode:
    """A broker's dynamic config, or with the literal name ``<default>`` the cluster-wide default (KIP-226); the
    payload is a topic config's."""

    entity_type = "brokers"
    default_entity = "<default>"

    @staticmethod
    def entity_name(broker_id: int | None) -> str:
        """``<default>`` for the cluster-wide default (None), else the broker's id."""
        return BrokerConfigZNode.default_entity if broker_id is None else str(broker_id)

    @staticmethod
    def path(entity_name: str) -> str:
        return f"/config/brokers/{entity_name}"

    @staticmethod
    def encode(config: dict[str, str]) -> bytes:
        return _dumps({"version": 1, "config": {k: str(v) for k, v in config.items()}})

    @staticmethod
    def decode(entity_name: str, data: bytes | None) -> dict[str, str]:
        return dict(_validate(ConfigEntity, BrokerConfigZNode.path(entity_name), data).config)


# --- /config/changes/config_change_<seq> ---------------------------------------------------------------


class ConfigChangeNotification(_Payload):
    """Version 2 names the changed entity by path ("topics/orders", "brokers/<default>"); version 1, which
    Kafka still reads, by type and name."""

    version: int
    entity_path: str | None = None
    entity_type: str | None = None
    entity_name: str | None = None

    @model_validator(mode="after")
    def _names_an_entity(self) -> ConfigChangeNotification:
        if self.version == 2 and not self.entity_path:
            raise ValueError("a version 2 config change names its entity_path")
        if self.version == 1 and not (self.entity_type and self.entity_name):
            raise ValueError("a version 1 config change names entity_type and entity_name")
        if self.version not in (1, 2):
            raise ValueError(f"config change version {self.version} is unknown")
        return self


class ConfigChangeNotificationZNode:
    """A persistent sequential child of /config/changes, written after the entity's config znode
    (AdminZkClient.changeEntityConfig); every broker watches the parent (ConfigChangeListener)."""

    path = "/config/changes"
    prefix = "config_change_"

    @staticmethod
    def child_path() -> str:
        return f"{ConfigChangeNotificationZNode.path}/{ConfigChangeNotificationZNode.prefix}"

    @staticmethod
    def sequence(child: str) -> int | None:
        """The sequence number of a child's name, None for a name that is not a notification."""
        tail = child.removeprefix(ConfigChangeNotificationZNode.prefix)
        return int(tail) if tail != child and tail.isdigit() else None

    @staticmethod
    def encode(entity_path: str) -> bytes:
        return _dumps({"version": 2, "entity_path": entity_path})

    @staticmethod
    def decode(child: str, data: bytes | None) -> str:
        """The changed entity's path under /config ("topics/<t>")."""
        change = _validate(ConfigChangeNotification, f"{ConfigChangeNotificationZNode.path}/{child}", data)
        return change.entity_path if change.version == 2 else f"{change.entity_type}/{change.entity_name}"


# --- /cluster/id: note "version" is a string here -----------------------------------------------------------


class ClusterIdInfo(_Payload):
    version: str = "1"
    id: str


class ClusterIdZNode:
    path = "/cluster/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _dumps({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes | None) -> str:
        return _validate(ClusterIdInfo, ClusterIdZNode.path, data).id


# --- /latest_producer_id_block ---------------------------------------------------------------------------


class ProducerIdBlock(_Payload):
    """The block of producer ids a broker claimed last; both ends inclusive. Kafka writes the ends as strings."""

    version: int = 1
    broker: int
    block_start: int
    block_end: int

    @field_validator("block_start", "block_end", mode="before")
    @classmethod
    def _decimal_string(cls, value: Any) -> Any:
        if isinstance(value, str) and not (value.isascii() and value.isdigit()):
            raise ValueError(f"{value!r} is not a producer id")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> ProducerIdBlock:
        if not 0 <= self.block_start <= self.block_end:
            raise ValueError(f"block [{self.block_start}, {self.block_end}] is not a range of producer ids")
        return self


class ProducerIdBlockZNode:
    path = "/latest_producer_id_block"

    @staticmethod
    def encode(block: ProducerIdBlock) -> bytes:
        return _dumps({"version": 1, "broker": block.broker,
                       "block_start": str(block.block_start), "block_end": str(block.block_end)})

    @staticmethod
    def decode(data: bytes | None) -> ProducerIdBlock | None:
        """None while no broker has claimed a block: the znode is created empty at start-up."""
        if not data:
            return None
        return _validate(ProducerIdBlock, ProducerIdBlockZNode.path, data)


# Persistent paths every broker creates at start-up when absent (KafkaZkClient.createTopLevelPaths).
PERSISTENT_PATHS = (
    "/consumers",
    BrokerIdsZNode.path,
    BrokerTopicsZNode.path,
    "/config/changes",
    DeleteTopicsZNode.path,
    "/brokers/seqid",
    IsrChangeNotificationZNode.path,
    ProducerIdBlockZNode.path,
    "/log_dir_event_notification",
    "/config/topics",
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
)
