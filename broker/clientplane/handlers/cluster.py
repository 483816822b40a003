"""DescribeCluster (API 60, KIP-700, new in Kafka 2.8): the live brokers, the controller and the cluster id,
without topics. kafka-python and the Java AdminClient use it for describe_cluster() (librdkafka asks Metadata).
Brokers are described by the listener the request came in on, as Metadata does. A ZooKeeper-mode cluster has
only broker endpoints and never fences a broker (v1 endpoint type, v2 fenced brokers: KRaft's)."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import ClusterAccess
from broker.clientplane.handlers.common import NO_THROTTLE, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.config import KafkaConfig, Listener
from broker.metadata_cache import MetadataCache

AUTHORIZED_OPERATIONS_NOT_REQUESTED = -(2**31)
# AclOperation codes of what the CLUSTER resource supports (Kafka's AclEntry.supportedOperations): CREATE,
# ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE. Without an authorizer
# Kafka grants all of them, so that is what an admin asking for its authorized operations is told.
CLUSTER_OPERATIONS = (5, 7, 8, 9, 10, 11, 12)
BROKER_ENDPOINTS = 1


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int
    rack: str | None


def listener_brokers(config: KafkaConfig, cache: MetadataCache, listener: Listener) -> list[BrokerEndpoint]:
    """The live brokers at their address on ``listener``: clients reconnect to exactly these, so they must be
    the advertised ones of the listener the client used."""
    brokers = []
    for broker in sorted(cache.live_brokers.values(), key=lambda b: b.id):
        endpoint = next((e for e in broker.endpoints if e.listener == listener.name), None)
        if endpoint is not None:
            brokers.append(BrokerEndpoint(broker.id, endpoint.host, endpoint.port, broker.rack or None))
    advertised = {lst.name: lst for lst in config.advertised}
    if not brokers and listener.name in advertised:  # before the first UpdateMetadata: at least ourselves
        own = advertised[listener.name]
        brokers.append(BrokerEndpoint(config.broker_id, own.host, own.port, config.broker_rack))
    return brokers


def cluster_authorized_operations(requested: bool) -> int:
    return sum(1 << operation for operation in CLUSTER_OPERATIONS) if requested \
        else AUTHORIZED_OPERATIONS_NOT_REQUESTED


async def handle_describe_cluster(cluster: ClusterAccess, request: Request, listener: Listener):
    body = request.body
    module = response_module(ApiKey.DESCRIBE_CLUSTER, request.header.api_version)

    def answer(error: ErrorCode, message: str | None, brokers: tuple = ()):
        return build(module.DescribeClusterResponse, throttle_time=NO_THROTTLE, error_code=error,
                     error_message=message, endpoint_type=BROKER_ENDPOINTS, cluster_id=cluster.cluster_id() or "",
                     controller_id=cluster.metadata_cache.controller_id, brokers=brokers,
                     cluster_authorized_operations=cluster_authorized_operations(
                         body.include_cluster_authorized_operations))

    if getattr(body, "endpoint_type", BROKER_ENDPOINTS) != BROKER_ENDPOINTS:
        # Kafka's answer when a broker is asked for controller endpoints (KIP-919)
        return answer(ErrorCode.mismatched_endpoint_type, "this is a broker (ZooKeeper mode has no KRaft controllers "
                                                          "to describe): ask for endpoint type 1, brokers")
    return answer(ErrorCode.none, None, tuple(
        build(module.DescribeClusterBroker, broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack,
              is_fenced=False)
        for b in listener_brokers(cluster.config, cluster.metadata_cache, listener)))
