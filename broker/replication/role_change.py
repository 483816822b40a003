"""The one place a broker's replicas change role (Kafka's ReplicaManager.becomeLeaderOrFollower and
stopReplicas): the controller's LeaderAndIsr and StopReplica are fenced and recorded by ReplicaManager,
then applied here to the hosted Partition, the replica fetchers, the log and whoever listens for
leadership (the group coordinator for __consumer_offsets)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.log.errors import KafkaStorageError
from broker.replication.partition import LeadershipState, Partition
from broker.replication.replica_fetcher import ReplicaFetcherManager
from broker.replication.replica_log import ReplicaLog
from broker.replication.replica_manager import ReplicaIO, ReplicaManager, ReplicaState, TopicPartition
from clusterplane import cluster_pb2 as pb
from traces import events as te
from traces.writer import TraceWriter

log = logging.getLogger(__name__)
# partitions applied between two yields to the loop
YIELD_EVERY = 20

# (partition, is leader now): told after every role change, and with False when a replica stops here
LeadershipListener = Callable[[TopicPartition, bool], None]


class ReplicaLogs(Protocol):
    """Where a replica's log comes from and goes to (the broker's LogService)."""

    def topic_configs(self, topics: set[str]) -> Awaitable[dict[str, Any]]: ...

    def ensure_log(self, state: ReplicaState, config: Any = None) -> Awaitable[ReplicaLog]: ...

    def delete(self, tp: TopicPartition) -> None: ...


class RoleChangeManager:
    def __init__(self, broker_id: int, replica_manager: ReplicaManager, replica_io: ReplicaIO,
                 fetchers: ReplicaFetcherManager, logs: ReplicaLogs, trace: TraceWriter, *,
                 replica_lag_time_max_ms: int, now_ms: Callable[[], int],
                 checkpointed_high_watermark: Callable[[TopicPartition], int],
                 inter_broker_listener_name: str, live_brokers: Callable[[], dict[int, pb.LiveBroker]]) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.replica_io = replica_io
        self.fetchers = fetchers
        self.logs = logs
        self.trace = trace
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.now_ms = now_ms
        self.checkpointed_high_watermark = checkpointed_high_watermark
        self.inter_broker_listener_name = inter_broker_listener_name
        self.live_brokers = live_brokers
        self._listeners: list[LeadershipListener] = []
        self._cluster_endpoints: dict[int, str] = {}
        replica_manager.on_role_change = self._trace_role
        self._applying: set[asyncio.Task] = set()
        # set when the broker starts stopping (before its controlled shutdown): it follows no one from then on
        self.stopping = False

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self._listeners.append(listener)

    # --- where leaders are ------------------------------------------------------------------------------

    def cluster_address(self, broker_id: int) -> str | None:
        """host:port of a leader's cluster listener, as the controller last announced it (in LeaderAndIsr,
        else in UpdateMetadata)."""
        address = self._cluster_endpoints.get(broker_id)
        if address is None and broker_id in self.live_brokers():
            self.remember_endpoints([self.live_brokers()[broker_id]])
            address = self._cluster_endpoints.get(broker_id)
        return address

    def remember_endpoints(self, brokers) -> None:
        for broker in brokers:
            for endpoint in broker.endpoints:
                if endpoint.listener == self.inter_broker_listener_name:
                    self._cluster_endpoints[broker.id] = f"{endpoint.host}:{endpoint.port}"

    # --- LeaderAndIsr -----------------------------------------------------------------------------------

    async def become_leader_or_follower(self, request: pb.LeaderAndIsrRequest) -> pb.LeaderAndIsrResponse:
        # The apply yields to the loop; gRPC cancels a handler at its next yield when the controller goes away
        # (killed, resigned, deadline). The request's states are recorded before the first yield, so a cancelled
        # apply would leave the rest of its partitions in their old role for good: a repeat of the same epoch is
        # refused as stale. Once started, an apply runs to its end.
        task = asyncio.get_running_loop().create_task(self._apply_leader_and_isr(request))
        self._applying.add(task)
        task.add_done_callback(self._applying.discard)
        return await asyncio.shield(task)

    async def _apply_leader_and_isr(self, request: pb.LeaderAndIsrRequest) -> pb.LeaderAndIsrResponse:
        self.remember_endpoints(request.live_leaders)
        recorded = self.replica_manager.partitions
        before = {(ps.topic, ps.partition): recorded.get((ps.topic, ps.partition)) for ps in request.partition_states}
        response = self.replica_manager.become_leader_or_follower(request)
        mine = {(e.topic, e.partition): recorded.get((e.topic, e.partition)) for e in response.partition_errors
                if e.error_code == 0}
        applied: set[TopicPartition] = set()
        try:
            await self._apply_partitions(response, applied)
        except Exception:
            # The states were recorded before the apply; left recorded, the controller's repeat of these epochs (it
            # sends one when this broker registers again) would be refused as stale and the partitions would never
            # get a log or a fetcher (seen in a campaign: a config read lost with the ZooKeeper session left a
            # bounced broker out of every ISR for good). What was not applied is forgotten, and the request fails, so
            # the controller's sender tries it again (a retry often succeeds: the cause may have passed).
            for error in response.partition_errors:
                tp = (error.topic, error.partition)
                if error.error_code == 0 and tp not in applied and recorded.get(tp) is mine[tp]:
                    self.replica_manager.forget(tp, before.get(tp))  # not if a newer request recorded its own
            raise
        return response

    async def _apply_partitions(self, response: pb.LeaderAndIsrResponse, applied: set[TopicPartition]) -> None:
        new_topics = {e.topic for e in response.partition_errors
                      if e.error_code == 0 and (e.topic, e.partition) not in self.replica_io.hosted}
        configs = await self.logs.topic_configs(new_topics) if new_topics else {}
        for count, error in enumerate(response.partition_errors, 1):
            if count % YIELD_EVERY == 0:
                # Becoming leader writes the leader-epoch checkpoint (fsync) partition by partition: hundreds of
                # them in one go held the loop for over a second, and a controller on this broker, loading after a
                # failover, waited that long for each ZooKeeper answer.
                await asyncio.sleep(0)
            tp = (error.topic, error.partition)
            state = self.replica_manager.partitions.get(tp)
            if error.error_code != 0 or state is None:
                continue
            if tp in self.replica_io.offline:
                # Kafka answers KAFKA_STORAGE_ERROR for a replica in an offline log directory
                error.error_code = ErrorCode.kafka_storage_error.value
                continue
            try:
                await self._become(tp, state, configs.get(tp[0]))
            except KafkaStorageError as exc:
                # the log dir failure channel has the directory; its handler takes the replicas offline
                log.warning("%s-%d: cannot become %s: %s", tp[0], tp[1],
                            "leader" if state.is_leader(self.broker_id) else "follower", exc)
                error.error_code = ErrorCode.kafka_storage_error.value
            applied.add(tp)

    async def _become(self, tp: TopicPartition, state: ReplicaState, config: Any = None) -> None:
        partition = self.replica_io.hosted.get(tp)
        if partition is None:
            replica_log = await self.logs.ensure_log(state, config)
            partition = Partition(tp[0], tp[1], self.broker_id, replica_log, self.replica_lag_time_max_ms,
                                  high_watermark=self.checkpointed_high_watermark(tp))
            self.replica_io.attach(partition)
        leadership = LeadershipState(state.leader, state.leader_epoch, tuple(state.isr), state.zk_version,
                                     tuple(state.replicas), state.controller_epoch)
        is_leader = state.is_leader(self.broker_id)
        if is_leader:
            self.fetchers.remove(tp)
            partition.make_leader(leadership, self.now_ms())
            self.replica_io.leadership_changed(tp)
        else:
            changed = partition.make_follower(leadership)
            if self.stopping:
                # The controlled shutdown makes this broker a follower of the partitions it led, then stops them. A
                # fetcher meanwhile would catch up and be put back into the ISR the controller has just taken it out
                # of (an ISR write and a notification per partition; Kafka 3.3's KIP-841 refuses it at the controller).
                self.fetchers.remove(tp)
            elif changed or self.fetchers.fetch_state(tp) is None:
                self.fetchers.add(partition)
        self._tell(tp, is_leader)
        self.replica_io.wake(tp, True)  # parked requests re-check: they may be answered NOT_LEADER now

    # --- StopReplica ------------------------------------------------------------------------------------

    def stop_replicas(self, request: pb.StopReplicaRequest) -> pb.StopReplicaResponse:
        response = self.replica_manager.stop_replicas(request)
        for part, error in zip(request.partitions, response.partition_errors, strict=False):
            tp = (part.topic, part.partition)
            if error.error_code == 0 and tp not in self.replica_manager.partitions:
                self.fetchers.remove(tp)
                self.replica_io.detach(tp)
                self._tell(tp, False)
            if part.delete_partition and error.error_code == 0:
                self.logs.delete(tp)
        return response

    def _tell(self, tp: TopicPartition, is_leader: bool) -> None:
        for listener in self._listeners:
            listener(tp, is_leader)

    def _trace_role(self, state: ReplicaState | None, tp: TopicPartition, role: str) -> None:
        self.trace.emit(te.ReplicaRoleChanged, topic=tp[0], partition=tp[1], role=role,
                        leader=state.leader if state else -1, leader_epoch=state.leader_epoch if state else -1,
                        isr=state.isr if state else [], controller_epoch=state.controller_epoch if state else None)
