"""The cluster-plane gRPC services a broker serves: control requests from the controller, controlled
shutdown requests (when it is the controller), and the admin view for tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
from kio.schema.errors import ErrorCode

from broker.metadata_cache import MetadataCache
from broker.replication.partition import Partition
from broker.replication.replica_manager import ReplicaIO, ReplicaManager
from broker.replication.role_change import RoleChangeManager
from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import AdminServicer, ControlPlaneServicer
from traces import events as te
from traces.writer import TraceWriter

if TYPE_CHECKING:
    from controller.controller import KafkaController

# the broker's controller, None until it has started
ControllerRef = Callable[[], "KafkaController | None"]


class ControlPlaneService(ControlPlaneServicer):
    def __init__(self, role_changes: RoleChangeManager, metadata_cache: MetadataCache,
                 replica_manager: ReplicaManager, controller: ControllerRef, trace: TraceWriter) -> None:
        self.role_changes = role_changes
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.controller = controller
        self.trace = trace

    def _trace(self, request_name: str, request, partitions: int, error_code: int, epoch_seen: int) -> None:
        """``epoch_seen``: the highest controller epoch this broker had heard from before the request."""
        if error_code == ErrorCode.stale_controller_epoch.value:
            # Kafka's becomeLeaderOrFollower / stopReplicas / maybeUpdateMetadataCache log the refusal of an old
            # controller ("Latest known controller epoch is ..."): traced, so a deposed controller's request is seen
            self.trace.emit(te.ControlRequestFenced, request=request_name, from_controller=request.controller_id,
                            request_controller_epoch=request.controller_epoch, highest_controller_epoch_seen=epoch_seen,
                            partitions=partitions)
        self.trace.emit(te.ControlRequestApplied, request=request_name, from_controller=request.controller_id,
                               request_controller_epoch=request.controller_epoch, partitions=partitions,
                               error_code=error_code)

    def _received(self, request_name: str, request, partitions: int) -> None:
        self.trace.emit(te.ControlRequestReceived, request=request_name, from_controller=request.controller_id,
                               request_controller_epoch=request.controller_epoch, partitions=partitions)

    async def _refuse_until_registered(self, context) -> None:
        """A restarted broker serves the cluster plane before it has loaded its logs and registered; the controller
        may still be retrying a request addressed to its previous incarnation, whose broker epoch this process
        cannot yet tell stale. Kafka takes no request before start-up ends; here the controller is told to retry
        (UNAVAILABLE), and once this broker registers, the controller's new requests carry its new epoch."""
        if self.replica_manager.broker_epoch == -1:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"broker {self.replica_manager.broker_id} is starting: not registered yet")

    async def LeaderAndIsr(self, request: pb.LeaderAndIsrRequest, context) -> pb.LeaderAndIsrResponse:
        await self._refuse_until_registered(context)
        self._received("LeaderAndIsr", request, len(request.partition_states))
        seen = self.replica_manager.highest_controller_epoch
        response = await self.role_changes.become_leader_or_follower(request)
        self._trace("LeaderAndIsr", request, len(request.partition_states), response.error_code, seen)
        return response

    async def UpdateMetadata(self, request: pb.UpdateMetadataRequest, context) -> pb.UpdateMetadataResponse:
        await self._refuse_until_registered(context)
        self._received("UpdateMetadata", request, len(request.partition_states))
        seen = self.metadata_cache.highest_controller_epoch
        error = self.metadata_cache.update(request, self.replica_manager.broker_epoch)
        self._trace("UpdateMetadata", request, len(request.partition_states), error.value, seen)
        return pb.UpdateMetadataResponse(error_code=error.value)

    async def StopReplica(self, request: pb.StopReplicaRequest, context) -> pb.StopReplicaResponse:
        await self._refuse_until_registered(context)
        self._received("StopReplica", request, len(request.partitions))
        seen = self.replica_manager.highest_controller_epoch
        response = self.role_changes.stop_replicas(request)
        self._trace("StopReplica", request, len(request.partitions), response.error_code, seen)
        return response

    async def ControlledShutdown(self, request: pb.ControlledShutdownRequest, context
                                 ) -> pb.ControlledShutdownResponse:
        controller = self.controller()
        if controller is None or not controller.is_active:
            return pb.ControlledShutdownResponse(error_code=ErrorCode.not_controller.value)
        error, remaining = await controller.controlled_shutdown(request.broker_id, request.broker_epoch)
        return pb.ControlledShutdownResponse(
            error_code=error, remaining_partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in remaining])


class AdminService(AdminServicer):
    def __init__(self, replica_manager: ReplicaManager, metadata_cache: MetadataCache,
                 controller: ControllerRef, replica_io: ReplicaIO | None = None,
                 now_ms: Callable[[], int] = lambda: 0) -> None:
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.controller = controller
        self.replica_io = replica_io
        self.now_ms = now_ms

    def _offsets(self, tp: tuple[str, int], view: pb.ReplicaView) -> None:
        """The replica's LEO and HW from its hosted Partition, and, on a leader, each follower's LEO as it knows
        it (what the dashboard draws on one offset axis)."""
        partition: Partition | None = self.replica_io.hosted.get(tp) if self.replica_io is not None else None
        if partition is None:
            view.log_end_offset, view.high_watermark = -1, -1
            return
        view.hosted = True
        view.log_end_offset, view.high_watermark = partition.log_end_offset, partition.high_watermark
        if partition.is_leader:
            now = self.now_ms()
            for replica, follower in sorted(partition.followers.items()):
                ago = now - follower.last_caught_up_time_ms if follower.last_caught_up_time_ms > 0 else -1
                view.followers.append(pb.FollowerOffset(replica=replica, log_end_offset=follower.log_end_offset,
                                                        last_caught_up_ms_ago=ago))

    async def DescribeBroker(self, request: pb.DescribeBrokerRequest, context) -> pb.DescribeBrokerResponse:
        manager = self.replica_manager
        controller = self.controller()
        ctx = controller.ctx if controller is not None else None
        replicas = [pb.ReplicaView(topic=s.topic, partition=s.partition, is_leader=s.is_leader(manager.broker_id),
                                   leader=s.leader, leader_epoch=s.leader_epoch, isr=s.isr, zk_version=s.zk_version,
                                   replicas=s.replicas)
                    for _, s in sorted(manager.partitions.items())]
        for (tp, _), view in zip(sorted(manager.partitions.items()), replicas, strict=True):
            self._offsets(tp, view)
        cache = self.metadata_cache
        return pb.DescribeBrokerResponse(
            broker_id=manager.broker_id, broker_epoch=manager.broker_epoch,
            highest_controller_epoch_seen=manager.highest_controller_epoch, is_controller=ctx is not None,
            controller_epoch=ctx.epoch if ctx is not None else -1, replicas=replicas,
            metadata_brokers=list(cache.live_brokers.values()), metadata_partitions=list(cache.partitions.values()))
