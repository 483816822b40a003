"""The leader's side of replication on the cluster plane: replica fetches (parked in the same fetch
purgatory as consumer long-polls, reading up to the LEO), answered in order on each follower's stream, each stream
one incremental fetch session (``fetch_session.py``), OffsetsForLeaderEpoch, and a transaction coordinator's
WriteTxnMarkers (``txn_markers.py``)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.common import answer_once
from broker.replication.delayed_ops import FetchParams, FetchPartitionRequest
from broker.replication.fetch_session import FetchPosition, LeaderFetchSession, SessionRequest
from broker.replication.partition import NO_EPOCH, FetchIsolation, PartitionError
from broker.replication.replica_manager import ReplicaIO
from broker.replication.replication_tracing import ReplicationTracer
from broker.replication.txn_markers import TxnMarker, TxnMarkerWriter
from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import ReplicationServicer


class ReplicationService(ReplicationServicer):
    def __init__(self, replica_io: ReplicaIO, tracer: ReplicationTracer, now_ms: Callable[[], int],
                 txn_markers: TxnMarkerWriter | None = None) -> None:
        self.replica_io = replica_io
        self.txn_markers = txn_markers
        self.tracer = tracer
        self.now_ms = now_ms
        self._session_ids = itertools.count(1)

    async def Fetch(self, requests: AsyncIterator[pb.ReplicaFetchRequest],
                    context) -> AsyncIterator[pb.ReplicaFetchResponse]:
        """One follower's fetches, in order, in one incremental fetch session that lasts as long as the stream."""
        session = LeaderFetchSession(next(self._session_ids), replica_id=-1)
        try:
            async for request in requests:
                session.replica_id = request.replica_id
                yield await self._fetch(session, request)
        finally:
            self.replica_io.close_session(session)

    async def _fetch(self, session: LeaderFetchSession, request: pb.ReplicaFetchRequest) -> pb.ReplicaFetchResponse:
        error = self.replica_io.update_session(session, session_request_of(request))
        if error != ErrorCode.none:
            return pb.ReplicaFetchResponse(error_code=error.value, session_id=session.session_id)
        named = FetchParams(
            replica_id=request.replica_id, max_wait_ms=request.max_wait_ms, min_bytes=request.min_bytes,
            max_bytes=request.max_bytes, isolation=FetchIsolation.LOG_END,
            partitions=[FetchPartitionRequest(p.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                                              current_leader_epoch=p.current_leader_epoch,
                                              log_start_offset=p.log_start_offset)
                        for p in request.partitions])
        loop = asyncio.get_running_loop()
        future, respond = answer_once(loop)
        started = loop.time()
        self.replica_io.session_fetch(session, named, self.now_ms(), respond)
        results = await future
        wait_ms = (loop.time() - started) * 1000
        served = 0
        partitions = []
        positions = session.positions
        for tp, result in results.items():
            position = positions.get(tp)
            if position is None:
                continue  # forgotten while the fetch was parked
            read = result.read
            if (read is not None and read.region is None and result.error == ErrorCode.none
                    and position.high_watermark == read.high_watermark
                    and position.log_start_offset >= read.log_start_offset):
                continue  # nothing new for the follower: left out, it keeps what it has
            data = pb.ReplicaFetchPartitionData(topic=tp[0], partition=tp[1], error_code=result.error.value,
                                                high_watermark=-1, log_start_offset=-1, log_end_offset=-1)
            if read is not None:
                data.high_watermark, data.log_start_offset = read.high_watermark, read.log_start_offset
                data.log_end_offset = read.log_end_offset
                if read.region is not None:
                    data.records = read.region.read_bytes()
                    served += len(data.records)
            elif result.error == ErrorCode.offset_out_of_range:
                partition = self.replica_io.hosted.get(tp)
                if partition is not None:  # where the follower should go instead
                    data.log_start_offset = partition.log.log_start_offset
                    data.log_end_offset = partition.log_end_offset
            partitions.append(data)
        fetch_offsets = {(p.topic, p.partition): p.fetch_offset for p in request.partitions}
        self.tracer.fetch_served(request.replica_id, fetch_offsets, served, wait_ms)
        return pb.ReplicaFetchResponse(partitions=partitions, session_id=session.session_id)

    async def OffsetsForLeaderEpoch(self, request: pb.OffsetsForLeaderEpochRequest,
                                    context) -> pb.OffsetsForLeaderEpochResponse:
        answers = []
        for p in request.partitions:
            try:
                partition = self.replica_io.leader_partition((p.topic, p.partition))
                epoch, end_offset = partition.end_offset_for_epoch(p.current_leader_epoch, p.leader_epoch)
                error = ErrorCode.none
            except PartitionError as exc:
                error, epoch, end_offset = exc.error_code, NO_EPOCH, -1
            answers.append(pb.EpochEndOffset(topic=p.topic, partition=p.partition, error_code=error.value,
                                             leader_epoch=epoch, end_offset=end_offset))
        return pb.OffsetsForLeaderEpochResponse(partitions=answers)


    async def WriteTxnMarkers(self, request: pb.WriteTxnMarkersRequest, context) -> pb.WriteTxnMarkersResponse:
        markers = [TxnMarker(producer_id=m.producer_id, producer_epoch=m.producer_epoch, commit=m.transaction_result,
                             coordinator_epoch=m.coordinator_epoch,
                             partitions=tuple((tp.topic, tp.partition) for tp in m.partitions))
                   for m in request.markers]
        future, respond = answer_once(asyncio.get_running_loop())
        self.txn_markers.write(markers, int(time.time() * 1000), respond)
        results = await future
        return pb.WriteTxnMarkersResponse(markers=[
            pb.TxnMarkerResult(producer_id=marker.producer_id, partitions=[
                pb.TxnMarkerPartitionResult(topic=tp[0], partition=tp[1], error_code=error.value)
                for tp, error in outcome.items()])
            for marker, outcome in zip(markers, results, strict=True)])


def session_request_of(request: pb.ReplicaFetchRequest) -> SessionRequest:
    return SessionRequest(
        request.session_id, request.session_epoch,
        {(p.topic, p.partition): FetchPosition(p.fetch_offset, p.log_start_offset, p.current_leader_epoch,
                                               p.high_watermark, p.partition_max_bytes)
         for p in request.partitions},
        [(f.topic, f.partition) for f in request.forgotten])
