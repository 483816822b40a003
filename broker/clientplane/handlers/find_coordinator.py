"""FindCoordinator's answer for a key of either type: the coordinator of a group (key type 0) or of a transactional
id (key type 1) is the leader of the key's partition of an internal topic (__consumer_offsets or
__transaction_state), which the first request creates once as many brokers are alive as its replication factor
asks for. group.py and transactions.py check the key; this finds the endpoint."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.common import NO_THROTTLE, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.versions import ApiKey
from broker.config import Listener
from broker.metadata_cache import MetadataCache
from zk.admin import AdminError, create_topic, live_broker_ids
from zk.client import ZkClient

log = logging.getLogger(__name__)


def coordinator_response(version: int, error: ErrorCode, message: str | None, node_id: int = -1, host: str = "",
                         port: int = -1):
    # v0 has neither throttle time nor error message: build leaves out what the version lacks
    return build(response_module(ApiKey.FIND_COORDINATOR, version).FindCoordinatorResponse, throttle_time=NO_THROTTLE,
                 error_code=error, error_message=message, node_id=node_id, host=host, port=port)


@dataclass(frozen=True)
class InternalTopic:
    """A coordinator's internal topic as its configs ask for it: ``description`` and ``replication_property`` name
    it in the log line of a refusal, as Kafka's does."""
    name: str
    description: str
    partitions: int
    replication_factor: int
    replication_property: str
    config: Mapping[str, str]


async def create_internal_topic(zk: ZkClient, topic: InternalTopic) -> tuple[ErrorCode, str]:
    """Create a coordinator's internal topic with exactly its configured partitions and replication factor, or
    refuse while fewer brokers are alive than that replication factor (KIP-115, KAFKA-3959: since 0.11 Kafka never
    creates it with fewer replicas, which would stay that few for the cluster's life). The answer is
    COORDINATOR_NOT_AVAILABLE either way, with the reason: clients retry, find the topic's leaders once the controller
    has elected them, and after a refusal create the topic with a retry once enough brokers are up."""
    try:
        live = await live_broker_ids(zk)
        if len(live) < topic.replication_factor:
            # Kafka's line (KafkaApis.createInternalTopic, 2.7; 2.8 refuses the same way through
            # AutoTopicCreationManager), logged at every refused request as Kafka does
            log.error("Number of alive brokers '%d' does not meet the required replication factor '%d' for the %s "
                      "(configured via '%s'). This error can be ignored if the cluster is starting up and not all "
                      "brokers are up yet.", len(live), topic.replication_factor, topic.description,
                      topic.replication_property)
            return (ErrorCode.coordinator_not_available,
                    f"{topic.name} needs {topic.replication_factor} live brokers ({topic.replication_property}); "
                    f"{len(live)} are alive")
        await create_topic(zk, topic.name, topic.partitions, topic.replication_factor, dict(topic.config))
    except AdminError as exc:
        if exc.error_code != ErrorCode.topic_already_exists:
            log.warning("creating %s failed: %s", topic.name, exc)
        return ErrorCode.coordinator_not_available, f"{topic.name} is being created"
    log.info("created %s (%d partitions, replication factor %d)", topic.name, topic.partitions,
             topic.replication_factor)
    return ErrorCode.coordinator_not_available, f"{topic.name} is being created"


async def answer_coordinator(version: int, cache: MetadataCache, topic: str, partition: int, listener: Listener,
                             create_topic: Callable[[], Awaitable[tuple[ErrorCode, str]]]):
    """The leader of ``topic``-``partition`` by its endpoint on the request's listener (clients connect to exactly
    that address), or COORDINATOR_NOT_AVAILABLE while the topic is created or refused (``create_topic`` answers the
    error and why) or the partition has no live leader: clients retry either."""
    states = cache.topics().get(topic)
    if states is None:
        return coordinator_response(version, *await create_topic())
    state = next((s for s in states if s.partition == partition), None)
    leader = cache.live_brokers.get(state.leader) if state is not None else None
    endpoint = None if leader is None else next((e for e in leader.endpoints if e.listener == listener.name), None)
    if endpoint is None:
        return coordinator_response(version, ErrorCode.coordinator_not_available,
                                    f"{topic}-{partition} has no leader now")
    return coordinator_response(version, ErrorCode.none, None, leader.id, endpoint.host, endpoint.port)
