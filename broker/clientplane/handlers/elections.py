"""ElectLeaders (API 43): preferred or unclean leader elections asked for by an admin client.

Only the active controller elects: another broker answers NOT_CONTROLLER for every partition. That is Kafka
2.8's own behaviour in ZooKeeper mode (its KafkaApis hands the request to the broker's controller, which refuses
when it is not the active one), and every admin client already sends ElectLeaders to the controller named in
Metadata. Forwarding over the cluster plane would hide that step; writing /admin/preferred_replica_election and
polling ZooKeeper would serialise concurrent requests on one znode and could not carry UNCLEAN. That znode is
still watched by the controller, for the ZooKeeper-era tools (kafka-preferred-replica-election.sh).

As Kafka's DelayedElectLeader, the answer waits until this broker's metadata shows the elected leaders, or the
request's timeout (REQUEST_TIMED_OUT for the partitions still waiting).
"""

from __future__ import annotations

import asyncio
import time

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import AdminAccess
from broker.clientplane.handlers.common import NO_THROTTLE, millis, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from controller.preferred_election import ElectionResult, ElectionType

PROPAGATION_POLL_S = 0.05
TopicPartition = tuple[str, int]


async def handle_elect_leaders(admin: AdminAccess, request: Request):
    body = request.body
    module = response_module(ApiKey.ELECT_LEADERS, request.header.api_version)
    requested = None if body.topic_partitions is None else [
        (t.topic, p) for t in body.topic_partitions for p in t.partitions]
    try:
        election_type = ElectionType(getattr(body, "election_type", ElectionType.PREFERRED))  # v0: preferred only
    except ValueError:
        message = f"election type {body.election_type} is neither 0 (PREFERRED) nor 1 (UNCLEAN)"
        results = {tp: ElectionResult(ErrorCode.invalid_request, message) for tp in requested or ()}
        return _response(module, ErrorCode.invalid_request, results)
    results = await admin.elect_leaders(requested, election_type)
    results = await _wait_for_leaders(admin, results, millis(body.timeout))
    if requested is None:
        # all partitions asked for: only those that were elected or failed are reported (Kafka's KafkaApis)
        results = {tp: r for tp, r in results.items() if r.error != ErrorCode.election_not_needed}
    return _response(module, ErrorCode.none, results)


async def _wait_for_leaders(admin: AdminAccess, results: dict[TopicPartition, ElectionResult], timeout_ms: int
                            ) -> dict[TopicPartition, ElectionResult]:
    waiting = {tp: r.leader for tp, r in results.items() if r.error == ErrorCode.none}
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        partitions = admin.metadata_cache.partitions
        waiting = {tp: leader for tp, leader in waiting.items()
                   if tp not in partitions or partitions[tp].leader != leader}
        if not waiting or time.monotonic() >= deadline:
            break
        await asyncio.sleep(PROPAGATION_POLL_S)
    timed_out = ElectionResult(ErrorCode.request_timed_out,
                               f"the new leader was elected but not seen in this broker's metadata within "
                               f"{timeout_ms} ms")
    return {tp: timed_out if tp in waiting else r for tp, r in results.items()}


def _response(module, error: ErrorCode, results: dict[TopicPartition, ElectionResult]):
    by_topic: dict[str, list] = {}
    for (topic, partition), result in sorted(results.items()):
        message = None if result.error in (ErrorCode.none, ErrorCode.election_not_needed) else result.message
        by_topic.setdefault(topic, []).append(build(module.PartitionResult, partition_id=partition,
                                                    error_code=result.error, error_message=message))
    return build(module.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=error,
                 replica_election_results=tuple(
                     build(module.ReplicaElectionResult, topic=topic, partition_result=tuple(partitions))
                     for topic, partitions in by_topic.items()))
