"""WriteTxnMarkers (27) on the client plane: a transaction coordinator has partition leaders write a transaction's
COMMIT or ABORT marker (Kafka's KafkaApis.handleWriteTxnMarkersRequest). The leader's work is
``broker/replication/txn_markers.py``, shared with the cluster-plane service kafkasim's own coordinators call; this
is the wire side, for any tool that speaks Kafka's protocol. Kafka restricts the API to CLUSTER_ACTION; kafkasim
has no ACLs."""

from __future__ import annotations

import asyncio
import time

from broker.clientplane.handlers.access import ReplicaAccess
from broker.clientplane.handlers.common import answer_once, response_module
from broker.clientplane.network import Delayed
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.replication.txn_markers import MarkerResults, TxnMarker


async def handle_write_txn_markers(replicas: ReplicaAccess, request: Request):
    module = response_module(ApiKey.WRITE_TXN_MARKERS, request.header.api_version)
    markers = [TxnMarker(producer_id=m.producer_id, producer_epoch=m.producer_epoch, commit=m.transaction_result,
                         coordinator_epoch=m.coordinator_epoch,
                         partitions=tuple((topic.name, p) for topic in m.topics for p in topic.partition_indexes))
               for m in request.body.markers]
    future, respond = answer_once(asyncio.get_running_loop())
    replicas.txn_markers.write(markers, int(time.time() * 1000), respond)

    def finish(results: list[MarkerResults]):
        answers = []
        for marker, outcome in zip(markers, results, strict=True):
            topics: dict[str, list] = {}
            for (topic, partition), error in outcome.items():
                topics.setdefault(topic, []).append(build(module.WritableTxnMarkerPartitionResult,
                                                          partition_index=partition, error_code=error))
            answers.append(build(module.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=tuple(
                build(module.WritableTxnMarkerTopicResult, name=name, partitions=tuple(parts))
                for name, parts in topics.items())))
        return build(module.WriteTxnMarkersResponse, markers=tuple(answers))

    if future.done():
        return finish(future.result())
    return Delayed(future, finish)
