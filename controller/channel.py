"""Control requests from the controller to brokers over the cluster plane (Kafka's
ControllerChannelManager and ControllerBrokerRequestBatch).

Each broker has its own sender task and queue, so a slow broker never delays the others; a request is
retried until it is answered or the broker is removed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable

import grpc

from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import ControlPlaneStub
from controller.context import ControllerContext, TopicPartition
from zk.znodes import BrokerRegistration

log = logging.getLogger(__name__)
RETRY_BACKOFF_S = 0.1


class _BrokerSender:
    def __init__(self, broker_id: int, address: str, timeout_s: float) -> None:
        self.broker_id = broker_id
        self.address = address
        self.timeout_s = timeout_s
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = ControlPlaneStub(self.channel)
        self.queue: asyncio.Queue[tuple[str, object, asyncio.Future]] = asyncio.Queue()
        self.in_flight: asyncio.Future | None = None
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"controller-sender-{broker_id}")

    async def _run(self) -> None:
        while True:
            method, request, answered = await self.queue.get()
            self.in_flight = answered
            while True:
                try:
                    response = await getattr(self.stub, method)(request, timeout=self.timeout_s)
                    if response.error_code:
                        log.warning("broker %d answered %s with error %d", self.broker_id, method,
                                    response.error_code)
                    if not answered.done():
                        answered.set_result(response.error_code)
                    break
                except grpc.aio.AioRpcError as exc:
                    log.info("%s to broker %d at %s failed (%s); retrying", method, self.broker_id,
                             self.address, exc.code().name)
                    await asyncio.sleep(RETRY_BACKOFF_S)

    async def close(self) -> None:
        self.task.cancel()
        # The request being sent is given up too: whoever waits on it (a controlled shutdown waiting for the
        # survivors to take over) would otherwise wait its whole timeout for a broker that has gone.
        if self.in_flight is not None:
            self.in_flight.cancel()
        while not self.queue.empty():
            self.queue.get_nowait()[2].cancel()
        await self.channel.close(grace=None)


class ControllerChannelManager:
    def __init__(self, listener_name: str, timeout_ms: int) -> None:
        self.listener_name = listener_name
        self.timeout_s = timeout_ms / 1000
        self._senders: dict[int, _BrokerSender] = {}

    def add_broker(self, broker_id: int, registration: BrokerRegistration) -> None:
        endpoint = registration.endpoint(self.listener_name)
        if endpoint is None:
            log.error("broker %d registered no %s endpoint; the controller cannot reach it",
                      broker_id, self.listener_name)
            return
        old = self._senders.pop(broker_id, None)
        if old is not None:
            asyncio.get_running_loop().create_task(old.close())
        self._senders[broker_id] = _BrokerSender(broker_id, f"{endpoint[0]}:{endpoint[1]}", self.timeout_s)

    def remove_broker(self, broker_id: int) -> None:
        sender = self._senders.pop(broker_id, None)
        if sender is not None:
            asyncio.get_running_loop().create_task(sender.close())

    def send(self, broker_id: int, method: str, request: object) -> asyncio.Future | None:
        """Queues the request; the future is done when the broker has answered it (None: broker unknown)."""
        sender = self._senders.get(broker_id)
        if sender is None:
            return None
        answered = asyncio.get_running_loop().create_future()
        sender.queue.put_nowait((method, request, answered))
        return answered

    async def close(self) -> None:
        senders, self._senders = list(self._senders.values()), {}
        for sender in senders:
            await sender.close()


def partition_state(ctx: ControllerContext, tp: TopicPartition, is_new: bool = False,
                    deleting: bool = False) -> pb.PartitionState:
    lead = ctx.leadership.get(tp)
    replicas = ctx.replicas(tp)
    if lead is None:
        return pb.PartitionState(topic=tp[0], partition=tp[1], leader=-1, leader_epoch=-1, replicas=replicas)
    state = lead.state
    return pb.PartitionState(
        topic=tp[0], partition=tp[1], controller_epoch=state.controller_epoch,
        leader=-2 if deleting else state.leader, leader_epoch=-2 if deleting else state.leader_epoch,
        isr=state.isr, zk_version=lead.zk_version, replicas=replicas, is_new=is_new,
        offline_replicas=[r for r in replicas if r not in ctx.live_brokers])


def live_broker(broker_id: int, registration: BrokerRegistration, broker_epoch: int) -> pb.LiveBroker:
    protocols = registration.listener_security_protocol_map
    endpoints = []
    for endpoint in registration.endpoints:
        name, _, address = endpoint.partition("://")
        host, _, port = address.rpartition(":")
        endpoints.append(pb.Endpoint(listener=name, host=host, port=int(port),
                                     security_protocol=protocols.get(name, "PLAINTEXT")))
    return pb.LiveBroker(id=broker_id, endpoints=endpoints, rack=registration.rack or "",
                         broker_epoch=broker_epoch)


class ControlRequestBatch:
    """Collects one controller decision's requests and sends them in Kafka's order: LeaderAndIsr, then
    UpdateMetadata, then StopReplica. Every LeaderAndIsr entry also goes to every broker as metadata."""

    def __init__(self, controller_id: int, ctx: ControllerContext, channel: ControllerChannelManager,
                 on_sent: Callable[[str, int, int], None] | None = None) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self.channel = channel
        self.on_sent = on_sent
        self._leader_and_isr: dict[int, dict[TopicPartition, pb.PartitionState]] = defaultdict(dict)
        self._metadata_brokers: set[int] = set()
        self._metadata_partitions: dict[TopicPartition, pb.PartitionState] = {}
        self._stop_replica: dict[int, list[pb.StopReplicaPartition]] = defaultdict(list)

    def add_leader_and_isr(self, brokers: list[int] | set[int], tp: TopicPartition, is_new: bool = False) -> None:
        state = partition_state(self.ctx, tp, is_new=is_new)
        for broker in brokers:
            if broker in self.ctx.live_brokers:
                self._leader_and_isr[broker][tp] = state
        self.add_update_metadata(self.ctx.live_or_shutting_down, [tp])

    def add_update_metadata(self, brokers: set[int] | list[int], partitions: list[TopicPartition],
                            deleting: bool = False) -> None:
        self._metadata_brokers.update(b for b in brokers if b in self.ctx.live_brokers)
        for tp in partitions:
            self._metadata_partitions[tp] = partition_state(self.ctx, tp, deleting=deleting)

    def add_stop_replica(self, broker: int, tp: TopicPartition, delete: bool, leader_epoch: int) -> None:
        if broker in self.ctx.live_brokers:
            self._stop_replica[broker].append(pb.StopReplicaPartition(
                topic=tp[0], partition=tp[1], leader_epoch=leader_epoch, delete_partition=delete))

    def send(self) -> dict[int, list[asyncio.Future]]:
        """Sends what was collected; returns, per broker, the futures of its requests' answers."""
        ctx = self.ctx
        sent: dict[int, list[asyncio.Future]] = defaultdict(list)

        def track(broker: int, answered: asyncio.Future | None) -> None:
            if answered is not None:
                sent[broker].append(answered)

        header = dict(controller_id=self.controller_id, controller_epoch=ctx.epoch)
        leaders = {lead.state.leader for lead in ctx.leadership.values()}
        live_leaders = [live_broker(b, ctx.live_brokers[b], ctx.broker_epochs.get(b, -1))
                        for b in sorted(leaders) if b in ctx.live_brokers]
        for broker, states in sorted(self._leader_and_isr.items()):
            track(broker, self.channel.send(broker, "LeaderAndIsr", pb.LeaderAndIsrRequest(
                broker_epoch=ctx.broker_epochs.get(broker, -1), partition_states=list(states.values()),
                live_leaders=live_leaders, **header)))
            self._sent("LeaderAndIsr", broker, len(states))
        all_live = [live_broker(b, reg, ctx.broker_epochs.get(b, -1)) for b, reg in sorted(ctx.live_brokers.items())]
        for broker in sorted(self._metadata_brokers):
            track(broker, self.channel.send(broker, "UpdateMetadata", pb.UpdateMetadataRequest(
                broker_epoch=ctx.broker_epochs.get(broker, -1),
                partition_states=list(self._metadata_partitions.values()), live_brokers=all_live, **header)))
            self._sent("UpdateMetadata", broker, len(self._metadata_partitions))
        for broker, partitions in sorted(self._stop_replica.items()):
            track(broker, self.channel.send(broker, "StopReplica", pb.StopReplicaRequest(
                broker_epoch=ctx.broker_epochs.get(broker, -1), partitions=partitions, **header)))
            self._sent("StopReplica", broker, len(partitions))
        self.__init__(self.controller_id, ctx, self.channel, self.on_sent)
        return sent

    def _sent(self, request: str, broker: int, partitions: int) -> None:
        if self.on_sent is not None:
            self.on_sent(request, broker, partitions)
