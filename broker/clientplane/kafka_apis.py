"""KafkaApis: answers client-plane requests. Each handler takes a decoded kio request and returns a kio
response of the same version (built with ``build`` so one code path serves every version)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from broker.clientplane.handlers import (
    admin,
    cluster,
    configs,
    delete_records,
    elections,
    fetch,
    group,
    group_admin,
    txn_markers,
    log_dirs,
    offsets,
    produce,
    reassignments,
    transactions,
)
from broker.clientplane.handlers.access import AdminAccess, ClusterAccess, GroupAccess, ReplicaAccess, TxnAccess
from broker.clientplane.handlers.common import response_module
from broker.clientplane.protocol.api_versions import handle_api_versions
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.config import KafkaConfig, Listener
from broker.group.manager import OFFSETS_TOPIC
from broker.metadata_cache import MetadataCache
from broker.transaction.coordinator import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)
AUTHORIZED_OPERATIONS_NOT_REQUESTED = -(2**31)
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1  # FindCoordinator's key types
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


class ApiNotServedError(RuntimeError):
    """An advertised API this version of kafkasim does not answer yet; the connection is closed."""


class KafkaApis:
    def __init__(self, config: KafkaConfig, metadata_cache: MetadataCache, cluster_id: Callable[[], str | None],
                 replicas: ReplicaAccess, groups: GroupAccess, admin_access: AdminAccess,
                 cluster_access: ClusterAccess, txns: TxnAccess) -> None:
        self.config = config
        self.metadata_cache = metadata_cache
        self.cluster_id = cluster_id
        self.groups = groups
        self.admin = admin_access
        served = {
            ApiKey.PRODUCE: (produce.handle_produce, replicas),
            ApiKey.FETCH: (fetch.handle_fetch, replicas),
            ApiKey.LIST_OFFSETS: (offsets.handle_list_offsets, replicas),
            ApiKey.OFFSET_FOR_LEADER_EPOCH: (offsets.handle_offset_for_leader_epoch, replicas),
            ApiKey.DELETE_RECORDS: (delete_records.handle_delete_records, replicas),
            ApiKey.WRITE_TXN_MARKERS: (txn_markers.handle_write_txn_markers, replicas),
            ApiKey.CREATE_TOPICS: (admin.handle_create_topics, admin_access),
            ApiKey.CREATE_PARTITIONS: (admin.handle_create_partitions, admin_access),
            ApiKey.DELETE_TOPICS: (admin.handle_delete_topics, admin_access),
            ApiKey.INIT_PRODUCER_ID: (transactions.handle_init_producer_id, txns),
            ApiKey.ADD_PARTITIONS_TO_TXN: (transactions.handle_add_partitions_to_txn, txns),
            ApiKey.ADD_OFFSETS_TO_TXN: (transactions.handle_add_offsets_to_txn, txns),
            ApiKey.END_TXN: (transactions.handle_end_txn, txns),
            ApiKey.DESCRIBE_CONFIGS: (configs.handle_describe_configs, admin_access),
            ApiKey.ALTER_CONFIGS: (configs.handle_alter_configs, admin_access),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: (configs.handle_incremental_alter_configs, admin_access),
            ApiKey.ELECT_LEADERS: (elections.handle_elect_leaders, admin_access),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: (reassignments.handle_alter_partition_reassignments, admin_access),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: (reassignments.handle_list_partition_reassignments, admin_access),
            ApiKey.JOIN_GROUP: (group.handle_join_group, groups),
            ApiKey.SYNC_GROUP: (group.handle_sync_group, groups),
            ApiKey.HEARTBEAT: (group.handle_heartbeat, groups),
            ApiKey.LEAVE_GROUP: (group.handle_leave_group, groups),
            ApiKey.OFFSET_COMMIT: (group.handle_offset_commit, groups),
            ApiKey.OFFSET_FETCH: (group.handle_offset_fetch, groups),
            ApiKey.TXN_OFFSET_COMMIT: (group.handle_txn_offset_commit, groups),
            ApiKey.DESCRIBE_GROUPS: (group.handle_describe_groups, groups),
            ApiKey.LIST_GROUPS: (group.handle_list_groups, groups),
            ApiKey.DELETE_GROUPS: (group_admin.handle_delete_groups, groups),
            ApiKey.OFFSET_DELETE: (group_admin.handle_offset_delete, groups),
            ApiKey.DESCRIBE_LOG_DIRS: (log_dirs.handle_describe_log_dirs, cluster_access),
            ApiKey.ALTER_REPLICA_LOG_DIRS: (log_dirs.handle_alter_replica_log_dirs, cluster_access),
        }
        self._handlers: dict[int, Callable] = {
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.FIND_COORDINATOR: lambda request, listener: (
                transactions.handle_find_transaction_coordinator(txns, request, listener)
                if getattr(request.body, "key_type", GROUP_KEY_TYPE) == TRANSACTION_KEY_TYPE
                else group.handle_find_coordinator(groups, request, listener)),
            ApiKey.DESCRIBE_CLUSTER: lambda request, listener: cluster.handle_describe_cluster(
                cluster_access, request, listener),
            **{key: (lambda request, _listener, f=function, a=access: f(a, request))
               for key, (function, access) in served.items()},
        }

    async def handle(self, request: Request, listener: Listener) -> ResponsePayload | None:
        handler = self._handlers.get(request.header.api_key)
        if handler is None:
            raise ApiNotServedError(f"{ApiKey(request.header.api_key).name} is not served by this kafkasim yet")
        return await handler(request, listener)

    async def handle_api_versions(self, request: Request, listener: Listener) -> ResponsePayload:
        return handle_api_versions(request.header, request.body)

    async def handle_metadata(self, request: Request, listener: Listener) -> ResponsePayload:
        """Brokers are described by the listener the request came in on, as Kafka does: clients reconnect
        to exactly these addresses, so they must be the advertised ones of that listener."""
        version = request.header.api_version
        module = response_module(ApiKey.METADATA, version)
        cache = self.metadata_cache
        brokers = [build(module.MetadataResponseBroker, node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
                   for b in cluster.listener_brokers(self.config, cache, listener)]
        known = cache.topics()
        requested = request.body.topics
        names = sorted(known) if requested is None else [t.name for t in requested]
        # v1-v3 have no flag: those clients always asked for auto-creation
        allow_auto_create = getattr(request.body, "allow_auto_topic_creation", True)
        topics = []
        for name in names:
            states = known.get(name)
            if states is None:
                error = ErrorCode.unknown_topic_or_partition
                if name == OFFSETS_TOPIC:
                    # Kafka creates its internal topic with the offsets.topic.* settings, never as an
                    # ordinary auto-created topic
                    await group.ensure_offsets_topic(self.groups)
                    error = ErrorCode.leader_not_available
                elif allow_auto_create and self.config.auto_create_topics_enable:
                    error = await admin.auto_create_topic(self.admin, name)
                topics.append(build(module.MetadataResponseTopic, error_code=error,
                                    name=name, is_internal=False, partitions=(),
                                    topic_authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED))
                continue
            partitions = tuple(
                build(module.MetadataResponsePartition,
                      error_code=ErrorCode.none if s.leader >= 0 and s.leader in cache.live_brokers
                      else ErrorCode.leader_not_available,
                      partition_index=s.partition, leader_id=s.leader, leader_epoch=s.leader_epoch,
                      replica_nodes=tuple(s.replicas), isr_nodes=tuple(s.isr),
                      offline_replicas=tuple(s.offline_replicas))
                for s in states)
            topics.append(build(module.MetadataResponseTopic, error_code=ErrorCode.none, name=name,
                                is_internal=name in INTERNAL_TOPICS, partitions=partitions,
                                topic_authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED))
        return build(module.MetadataResponse, throttle_time=timedelta(0), brokers=tuple(brokers),
                     cluster_id=self.cluster_id(), controller_id=cache.controller_id, topics=tuple(topics),
                     # librdkafka's describe_cluster() asks Metadata for these, not DescribeCluster (v8-v10)
                     cluster_authorized_operations=cluster.cluster_authorized_operations(
                         getattr(request.body, "include_cluster_authorized_operations", False)))
