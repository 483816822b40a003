"""What each family of client-plane handlers may reach: the narrow collaborators the broker hands to
KafkaApis, instead of the whole server. Adding a handler that needs more means adding it here, in view."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from broker.config import KafkaConfig
from broker.dynamic_broker_config import BrokerConfigLayers
from broker.group.coordinator import GroupCoordinator
from broker.log.config import LogConfig
from broker.log.log_manager import LogManager
from broker.metadata_cache import MetadataCache
from broker.producer_id_manager import ProducerIdManager
from broker.replication.replica_manager import ReplicaIO
from broker.replication.txn_markers import TxnMarkerWriter
from broker.transaction.coordinator import TransactionCoordinator
from controller.preferred_election import ElectionResult, ElectionType
from controller.reassignment import Refused, ReplicaAssignment
from zk.client import ZkClient


@dataclass(frozen=True)
class ReplicaAccess:
    """Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords, WriteTxnMarkers: the hosted replicas and
    the loop's clock."""

    replica_io: ReplicaIO
    now_ms: Callable[[], int]
    on_produce_answered: Callable[[dict, int], None]  # (statuses by partition, acks): traced
    txn_markers: TxnMarkerWriter  # WriteTxnMarkers: the leader's append of transaction markers


@dataclass(frozen=True)
class GroupAccess:
    """The group coordinator's requests, and FindCoordinator (which may create __consumer_offsets)."""

    coordinator: GroupCoordinator
    metadata_cache: MetadataCache
    zk: ZkClient
    config: KafkaConfig


@dataclass(frozen=True)
class TxnAccess:
    """The transaction coordinator's requests, InitProducerId (which claims producer ids) and FindCoordinator for
    a transactional id (which may create __transaction_state)."""

    coordinator: TransactionCoordinator
    metadata_cache: MetadataCache
    zk: ZkClient
    config: KafkaConfig
    producer_ids: ProducerIdManager


@dataclass(frozen=True)
class AdminAccess:
    """CreateTopics, CreatePartitions, DeleteTopics, DescribeConfigs, InitProducerId, ElectLeaders,
    Alter/ListPartitionReassignments and auto-creation."""

    broker_id: int
    config: KafkaConfig
    zk: ZkClient
    metadata_cache: MetadataCache
    log_defaults: Callable[[], LogConfig]  # every topic's, now: server.properties and the dynamic broker configs
    config_layers: Callable[[], BrokerConfigLayers]  # this broker's config, by where each value comes from
    is_controller: Callable[[], bool]
    producer_ids: ProducerIdManager
    # this broker's controller's elections (NOT_CONTROLLER per partition unless it is the active one)
    elect_leaders: Callable[[list[tuple[str, int]] | None, ElectionType],
                            Awaitable[dict[tuple[str, int], ElectionResult]]]
    # this broker's controller's partition reassignments (KIP-455); None: not the active controller
    alter_partition_reassignments: Callable[[dict[tuple[str, int], list[int] | None]],
                                            Awaitable[dict[tuple[str, int], Refused | None] | None]]
    list_partition_reassignments: Callable[[list[tuple[str, int]] | None],
                                           Awaitable[dict[tuple[str, int], ReplicaAssignment] | None]]


@dataclass(frozen=True)
class ClusterAccess:
    """DescribeCluster, DescribeLogDirs and AlterReplicaLogDirs: the cluster as this broker's metadata shows it,
    and this broker's own log directories and replicas, read only."""

    config: KafkaConfig
    metadata_cache: MetadataCache
    cluster_id: Callable[[], str | None]
    log_manager: LogManager
    replica_io: ReplicaIO
