"""WriteTxnMarkers (27): a transaction coordinator has partition leaders write a transaction's COMMIT or ABORT
marker (Kafka's KafkaApis.handleWriteTxnMarkersRequest). The leader appends one control batch per partition, as
the coordinator's append (AppendOrigin.Coordinator, acks=all), and answers once it is replicated.

There is no transaction coordinator in kafkasim yet (issue 20 builds the log side first): this API is how the
log is handed markers, by tests today and by the coordinator later. Kafka restricts it to CLUSTER_ACTION; kafkasim
has no ACLs. A marker of an older producer epoch than the partition knows is INVALID_PRODUCER_EPOCH
(ProducerAppendInfo.checkProducerEpoch); the coordinator epoch fence (TRANSACTION_COORDINATOR_FENCED) waits for
the coordinator, which owns those epochs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import ReplicaAccess
from broker.clientplane.handlers.common import answer_once, response_module
from broker.clientplane.network import Delayed
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.group.manager import OFFSETS_TOPIC
from broker.log.record_batch import parse_header
from broker.log.records import build_end_txn_marker
from broker.replication.delayed_ops import ProducePartitionStatus
from broker.replication.partition import Partition

MARKER_TIMEOUT_MS = 30_000  # Kafka appends markers with request.timeout.ms


def check_marker_epoch(partition: Partition, records: bytes) -> ProducePartitionStatus | None:
    header = parse_header(records, 0)
    entry = partition.producer_state.producers.get(header.producer_id)
    if entry is not None and header.producer_epoch < entry.producer_epoch:
        return ProducePartitionStatus(
            ErrorCode.invalid_producer_epoch,
            error_message=f"marker of producer {header.producer_id} has epoch {header.producer_epoch}, older than "
                          f"the current {entry.producer_epoch}")
    return None


def completing_offsets_txn(replicas: ReplicaAccess, producer_id: int, committed: bool,
                           respond: Callable[[dict[tuple[str, int], ProducePartitionStatus]], None]):
    """Kafka's maybeSendResponseCallback: once a marker is replicated on __consumer_offsets partitions, the group
    coordinator completes the producer's transactional offset commits there, then the answer goes out."""
    def respond_after(statuses: dict[tuple[str, int], ProducePartitionStatus]) -> None:
        done = [p for (topic, p), status in statuses.items()
                if topic == OFFSETS_TOPIC and status.error == ErrorCode.none]
        if done:
            replicas.on_offsets_txn_marker(producer_id, done, committed)
        respond(statuses)
    return respond_after


async def handle_write_txn_markers(replicas: ReplicaAccess, request: Request):
    module = response_module(ApiKey.WRITE_TXN_MARKERS, request.header.api_version)
    loop = asyncio.get_running_loop()
    now = replicas.now_ms()
    pending: list[tuple[int, list[tuple[str, int]], asyncio.Future]] = []
    for marker in request.body.markers:
        records = build_end_txn_marker(producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                                       abort=not marker.transaction_result,
                                       coordinator_epoch=marker.coordinator_epoch, timestamp=now)
        partitions = [(topic.name, p) for topic in marker.topics for p in topic.partition_indexes]
        future, respond = answer_once(loop)
        respond = completing_offsets_txn(replicas, marker.producer_id, marker.transaction_result, respond)
        replicas.replica_io.append_records({tp: records for tp in partitions}, -1, MARKER_TIMEOUT_MS, now, respond,
                                           check=check_marker_epoch, from_coordinator=True)
        pending.append((marker.producer_id, partitions, future))

    def finish(_: object = None):
        results = []
        for producer_id, partitions, future in pending:
            statuses = future.result()
            topics: dict[str, list] = {}
            for topic, partition in partitions:
                status = statuses.get((topic, partition))
                error = status.error if status is not None else ErrorCode.unknown_server_error
                topics.setdefault(topic, []).append(build(module.WritableTxnMarkerPartitionResult,
                                                          partition_index=partition, error_code=error))
            results.append(build(module.WritableTxnMarkerResult, producer_id=producer_id, topics=tuple(
                build(module.WritableTxnMarkerTopicResult, name=name, partitions=tuple(parts))
                for name, parts in topics.items())))
        return build(module.WriteTxnMarkersResponse, markers=tuple(results))

    if all(future.done() for _, _, future in pending):
        return finish()
    return Delayed(asyncio.gather(*(future for _, _, future in pending)), finish)
