"""ReplicaManager: every partition replica this broker hosts, and its role as the controller last
decided it. Pure state machine: LeaderAndIsr and StopReplica in, errors and role changes out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.control_fencing import check_control_request
from clusterplane import cluster_pb2 as pb

TopicPartition = tuple[str, int]


@dataclass
class ReplicaState:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    zk_version: int
    replicas: list[int]
    controller_epoch: int

    def is_leader(self, broker_id: int) -> bool:
        return self.leader == broker_id


RoleListener = Callable[[ReplicaState | None, TopicPartition, str], None]


class ReplicaManager:
    def __init__(self, broker_id: int, on_role_change: RoleListener | None = None) -> None:
        self.broker_id = broker_id
        self.broker_epoch = -1
        self.highest_controller_epoch = 0
        self.partitions: dict[TopicPartition, ReplicaState] = {}
        self.on_role_change = on_role_change or (lambda state, tp, role: None)

    def _fence(self, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        error = check_control_request(controller_epoch, self.highest_controller_epoch, broker_epoch,
                                      self.broker_epoch)
        if error == ErrorCode.none:
            self.highest_controller_epoch = controller_epoch
        return error

    def become_leader_or_follower(self, request: pb.LeaderAndIsrRequest) -> pb.LeaderAndIsrResponse:
        error = self._fence(request.controller_epoch, request.broker_epoch)
        if error != ErrorCode.none:
            return pb.LeaderAndIsrResponse(error_code=error.value)
        errors = []
        for ps in request.partition_states:
            tp = (ps.topic, ps.partition)
            code = self._apply(tp, ps)
            errors.append(pb.PartitionError(topic=ps.topic, partition=ps.partition, error_code=code.value))
        return pb.LeaderAndIsrResponse(error_code=0, partition_errors=errors)

    def _apply(self, tp: TopicPartition, ps: pb.PartitionState) -> ErrorCode:
        if self.broker_id not in ps.replicas:
            return ErrorCode.unknown_topic_or_partition
        current = self.partitions.get(tp)
        # Only a strictly newer leader epoch changes anything: the controller bumps it on every decision.
        if current is not None and ps.leader_epoch <= current.leader_epoch:
            return ErrorCode.stale_controller_epoch
        state = ReplicaState(ps.topic, ps.partition, ps.leader, ps.leader_epoch, list(ps.isr), ps.zk_version,
                             list(ps.replicas), ps.controller_epoch)
        self.partitions[tp] = state
        self.on_role_change(state, tp, "leader" if state.is_leader(self.broker_id) else "follower")
        return ErrorCode.none

    def stop_replicas(self, request: pb.StopReplicaRequest) -> pb.StopReplicaResponse:
        error = self._fence(request.controller_epoch, request.broker_epoch)
        if error != ErrorCode.none:
            return pb.StopReplicaResponse(error_code=error.value)
        errors = []
        for part in request.partitions:
            tp = (part.topic, part.partition)
            current = self.partitions.get(tp)
            code = ErrorCode.none
            # -2: topic being deleted, -1: epoch unknown; otherwise only a newer epoch may stop us.
            if current is not None and part.leader_epoch not in (-1, -2) and part.leader_epoch <= current.leader_epoch:
                code = ErrorCode.fenced_leader_epoch
            elif current is not None:
                del self.partitions[tp]
                self.on_role_change(None, tp, "stopped")
            errors.append(pb.PartitionError(topic=part.topic, partition=part.partition, error_code=code.value))
        return pb.StopReplicaResponse(error_code=0, partition_errors=errors)

    def leader_partitions(self) -> list[TopicPartition]:
        return sorted(tp for tp, state in self.partitions.items() if state.is_leader(self.broker_id))
