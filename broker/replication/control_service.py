"""The cluster-plane gRPC services a broker serves: control requests from the controller, controlled
shutdown requests (when it is the controller), and the admin view for tools."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import AdminServicer, ControlPlaneServicer
from traces import events as te

if TYPE_CHECKING:
    from broker.server import KafkaServer


class ControlPlaneService(ControlPlaneServicer):
    def __init__(self, server: KafkaServer) -> None:
        self.server = server

    def _trace(self, request_name: str, request, partitions: int, error_code: int) -> None:
        self.server.trace.emit(te.ControlRequestApplied, request=request_name, from_controller=request.controller_id,
                               request_controller_epoch=request.controller_epoch, partitions=partitions,
                               error_code=error_code)

    def _received(self, request_name: str, request, partitions: int) -> None:
        self.server.trace.emit(te.ControlRequestReceived, request=request_name, from_controller=request.controller_id,
                               request_controller_epoch=request.controller_epoch, partitions=partitions)

    async def LeaderAndIsr(self, request: pb.LeaderAndIsrRequest, context) -> pb.LeaderAndIsrResponse:
        self._received("LeaderAndIsr", request, len(request.partition_states))
        response = await self.server.apply_leader_and_isr(request)
        self._trace("LeaderAndIsr", request, len(request.partition_states), response.error_code)
        return response

    async def UpdateMetadata(self, request: pb.UpdateMetadataRequest, context) -> pb.UpdateMetadataResponse:
        self._received("UpdateMetadata", request, len(request.partition_states))
        error = self.server.metadata_cache.update(request, self.server.replica_manager.broker_epoch)
        self._trace("UpdateMetadata", request, len(request.partition_states), error.value)
        return pb.UpdateMetadataResponse(error_code=error.value)

    async def StopReplica(self, request: pb.StopReplicaRequest, context) -> pb.StopReplicaResponse:
        self._received("StopReplica", request, len(request.partitions))
        response = self.server.apply_stop_replica(request)
        self._trace("StopReplica", request, len(request.partitions), response.error_code)
        return response

    async def ControlledShutdown(self, request: pb.ControlledShutdownRequest, context
                                 ) -> pb.ControlledShutdownResponse:
        controller = self.server.controller
        if controller is None or not controller.is_active:
            return pb.ControlledShutdownResponse(error_code=ErrorCode.not_controller.value)
        error, remaining = await controller.controlled_shutdown(request.broker_id, request.broker_epoch)
        return pb.ControlledShutdownResponse(
            error_code=error, remaining_partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in remaining])


class AdminService(AdminServicer):
    def __init__(self, server: KafkaServer) -> None:
        self.server = server

    async def DescribeBroker(self, request: pb.DescribeBrokerRequest, context) -> pb.DescribeBrokerResponse:
        server = self.server
        manager = server.replica_manager
        controller = server.controller
        ctx = controller.ctx if controller is not None else None
        replicas = [pb.ReplicaView(topic=s.topic, partition=s.partition, is_leader=s.is_leader(manager.broker_id),
                                   leader=s.leader, leader_epoch=s.leader_epoch, isr=s.isr, zk_version=s.zk_version,
                                   replicas=s.replicas)
                    for _, s in sorted(manager.partitions.items())]
        cache = server.metadata_cache
        return pb.DescribeBrokerResponse(
            broker_id=manager.broker_id, broker_epoch=manager.broker_epoch,
            highest_controller_epoch_seen=manager.highest_controller_epoch, is_controller=ctx is not None,
            controller_epoch=ctx.epoch if ctx is not None else -1, replicas=replicas,
            metadata_brokers=list(cache.live_brokers.values()), metadata_partitions=list(cache.partitions.values()))
