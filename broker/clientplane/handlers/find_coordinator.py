"""FindCoordinator's answer for a key of either type: the coordinator of a group (key type 0) or of a transactional
id (key type 1) is the leader of the key's partition of an internal topic (__consumer_offsets or
__transaction_state), which the first request creates. group.py and transactions.py check the key; this finds the
endpoint."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

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


async def create_internal_topic(zk: ZkClient, topic: str, partitions: int, replication_factor: int,
                                config: Callable[[int], dict[str, str]]) -> ErrorCode:
    """Create a coordinator's internal topic with its configured partitions and replication factor capped by the live
    brokers (Kafka 2.x refuses instead; a classroom cluster of one must work too); ``config`` gives the topic's
    config for the replication factor chosen. The answer is COORDINATOR_NOT_AVAILABLE whatever happens: clients
    retry, and find the topic's leaders once the controller has elected them."""
    try:
        live = await live_broker_ids(zk)
        replication = max(1, min(replication_factor, len(live)))
        await create_topic(zk, topic, partitions, replication, config(replication))
    except AdminError as exc:
        if exc.error_code != ErrorCode.topic_already_exists:
            log.warning("creating %s failed: %s", topic, exc)
        return ErrorCode.coordinator_not_available
    log.info("created %s (%d partitions, replication factor %d)", topic, partitions, replication)
    return ErrorCode.coordinator_not_available


async def answer_coordinator(version: int, cache: MetadataCache, topic: str, partition: int, listener: Listener,
                             create_topic: Callable[[], Awaitable[ErrorCode]]):
    """The leader of ``topic``-``partition`` by its endpoint on the request's listener (clients connect to exactly
    that address), or COORDINATOR_NOT_AVAILABLE while the topic is created (``create_topic`` answers the error) or
    the partition has no live leader: clients retry either."""
    states = cache.topics().get(topic)
    if states is None:
        return coordinator_response(version, await create_topic(), f"{topic} is being created")
    state = next((s for s in states if s.partition == partition), None)
    leader = cache.live_brokers.get(state.leader) if state is not None else None
    endpoint = None if leader is None else next((e for e in leader.endpoints if e.listener == listener.name), None)
    if endpoint is None:
        return coordinator_response(version, ErrorCode.coordinator_not_available,
                                    f"{topic}-{partition} has no leader now")
    return coordinator_response(version, ErrorCode.none, None, leader.id, endpoint.host, endpoint.port)
