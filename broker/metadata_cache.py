"""MetadataCache: what the controller last told this broker about all brokers and partitions; the
client plane answers Metadata requests from it. Pure."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.replication.control_fencing import check_control_request
from clusterplane import cluster_pb2 as pb

TopicPartition = tuple[str, int]
LEADER_DURING_DELETE = -2


class MetadataCache:
    def __init__(self) -> None:
        self.highest_controller_epoch = 0
        self.controller_id = -1
        self.live_brokers: dict[int, pb.LiveBroker] = {}
        self.partitions: dict[TopicPartition, pb.PartitionState] = {}

    def update(self, request: pb.UpdateMetadataRequest, current_broker_epoch: int) -> ErrorCode:
        error = check_control_request(request.controller_epoch, self.highest_controller_epoch,
                                      request.broker_epoch, current_broker_epoch)
        if error != ErrorCode.none:
            return error
        self.highest_controller_epoch = request.controller_epoch
        self.controller_id = request.controller_id
        self.live_brokers = {broker.id: broker for broker in request.live_brokers}
        for state in request.partition_states:
            tp = (state.topic, state.partition)
            if state.leader == LEADER_DURING_DELETE:
                self.partitions.pop(tp, None)
            else:
                self.partitions[tp] = state
        return ErrorCode.none

    def topics(self) -> dict[str, list[pb.PartitionState]]:
        result: dict[str, list[pb.PartitionState]] = {}
        for (topic, _), state in sorted(self.partitions.items()):
            result.setdefault(topic, []).append(state)
        return result
