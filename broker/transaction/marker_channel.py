"""TransactionMarkerChannelManager (Kafka's): writes a decided transaction's markers to every partition's leader
over the cluster plane (WriteTxnMarkers, served beside replica Fetch), retrying a partition whose leader moved,
is unknown or could not replicate yet, until each has its marker; then the coordinator completes the transaction.
A partition this broker leads is written directly. Sending stops when the coordinator gave the transaction's
state partition up (its successor re-sends after loading) or a leader says the coordinator was fenced."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import grpc
from kio.schema.errors import ErrorCode

from broker.replication.txn_markers import MarkerResults, TxnMarker, TxnMarkerWriter
from broker.transaction.coordinator import TxnMarkerRequest
from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import ReplicationStub

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
RETRY_BACKOFF_S = 0.1   # Kafka's channel waits for the next metadata or retry.backoff.ms (100 ms)
RPC_TIMEOUT_S = 35.0    # longer than the leader's own acks=all wait (request.timeout.ms, 30 s)
# the leader refuses the marker for good: the coordinator that sent it is no longer the one
FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})


class TransactionMarkerChannelManager:
    def __init__(self, broker_id: int, leader_of: Callable[[TopicPartition], int | None],
                 address_of: Callable[[int], str | None], local_writer: TxnMarkerWriter,
                 is_current: Callable[[TxnMarkerRequest], bool], on_complete: Callable[[TxnMarkerRequest], None],
                 partition_exists: Callable[[TopicPartition], bool]) -> None:
        self.broker_id = broker_id
        self.leader_of = leader_of
        self.address_of = address_of
        self.local_writer = local_writer
        self.is_current = is_current
        self.on_complete = on_complete
        self.partition_exists = partition_exists
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._tasks: set[asyncio.Task] = set()

    def send(self, request: TxnMarkerRequest) -> None:
        task = asyncio.get_running_loop().create_task(self._run(request), name=f"txn-markers-{request.producer_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, request: TxnMarkerRequest) -> None:
        pending = set(request.partitions)
        attempt = 0
        while pending:
            if not self.is_current(request):
                log.info("markers of %s no longer ours to write (coordinator moved)", request.transactional_id)
                return
            # a deleted topic has nobody to write to (Kafka drops such partitions from the pending set)
            pending = {tp for tp in pending if self.partition_exists(tp)}
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                leader = self.leader_of(tp)
                if leader is not None and leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            outcomes = await asyncio.gather(*(self._write(leader, request, tps) for leader, tps in by_leader.items()))
            for outcome in outcomes:
                for tp, error in outcome.items():
                    if error == ErrorCode.none:
                        pending.discard(tp)
                    elif error in FENCED:
                        log.warning("marker of %s refused by the leader of %s-%d (%s): this coordinator is fenced",
                                    request.transactional_id, tp[0], tp[1], error.name)
                        return
            if pending:
                attempt += 1
                if attempt % 50 == 0:
                    log.warning("markers of %s still pending for %s after %d attempts", request.transactional_id,
                                sorted(pending), attempt)
                await asyncio.sleep(RETRY_BACKOFF_S)
        if self.is_current(request):
            self.on_complete(request)

    async def _write(self, leader: int, request: TxnMarkerRequest, partitions: list[TopicPartition]) -> MarkerResults:
        marker = TxnMarker(request.producer_id, request.producer_epoch, request.commit, request.coordinator_epoch,
                           tuple(partitions))
        if leader == self.broker_id:
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            self.local_writer.write([marker], int(time.time() * 1000),
                                    lambda results: future.done() or future.set_result(results[0]))
            return await future
        address = self.address_of(leader)
        if address is None:
            return {tp: ErrorCode.leader_not_available for tp in partitions}
        stub = ReplicationStub(self._channel(address))
        try:
            response = await stub.WriteTxnMarkers(pb.WriteTxnMarkersRequest(markers=[pb.TxnMarker(
                producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                transaction_result=marker.commit, coordinator_epoch=marker.coordinator_epoch,
                partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in partitions])]), timeout=RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, exc.code().name)
            return {tp: ErrorCode.network_exception for tp in partitions}
        return {(r.topic, r.partition): ErrorCode(r.error_code) for m in response.markers for r in m.partitions}

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address)
        return channel

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
