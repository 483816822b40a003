"""KafkaController: every broker runs one; the one that owns /controller is active.

One serial event queue processes every ZooKeeper notification and request, in order (Kafka's
ControllerEventManager). Handlers other than the election ones return at once unless this broker is
the active controller.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent
from kio.schema.errors import ErrorCode

from controller import events as ev
from controller.channel import ControllerChannelManager, ControlRequestBatch
from controller.context import ControllerContext, PartitionLeadership, TopicPartition
from controller import partition_state_machine as psm
from controller import preferred_election as pe
from controller import reassignment as ra
from controller import replica_state_machine as rsm
from controller.state_change import ControllerMovedError, PartitionStateWrite, StateChanges
from controller.topic_deletion import decide_topic_deletion
from controller.zk_writes import MAX_READS_IN_FLIGHT, ControllerEpochFencedError, FencedZkWriter
from traces import events as te
from traces.writer import TraceWriter
from zk.client import CreateOp, MultiOpError, SetDataOp, ZkClient, ZkUnavailableError
from zk.znodes import (
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerTopicsZNode,
    ControllerEpochZNode,
    ControllerZNode,
    DeleteTopicsTopicZNode,
    DeleteTopicsZNode,
    IsrChangeNotificationZNode,
    PreferredReplicaElectionZNode,
    ReassignPartitionsZNode,
    TopicAssignment,
    TopicConfigZNode,
    TopicPartitionStateZNode,
    TopicZNode,
    ZNodeDecodeError,
)

log = logging.getLogger(__name__)
# Kafka's controller runs its first leader imbalance check this long after becoming controller
AUTO_REBALANCE_FIRST_DELAY_S = 5
# how long a controlled shutdown's answer waits for the other brokers to apply its leader moves
CONTROLLED_SHUTDOWN_PROPAGATION_S = 10.0


class KafkaController:
    def __init__(self, broker_id: int, zk: ZkClient, trace: TraceWriter, *, cluster_listener_name: str,
                 unclean_leader_election_enable: bool = False, delete_topic_enable: bool = True,
                 request_timeout_ms: int = 30000, auto_leader_rebalance_enable: bool = True,
                 leader_imbalance_check_interval_seconds: int = 300,
                 leader_imbalance_per_broker_percentage: int = 10) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.trace = trace
        self.cluster_listener_name = cluster_listener_name
        self.unclean_default = unclean_leader_election_enable
        self.delete_topic_enable = delete_topic_enable
        self.request_timeout_ms = request_timeout_ms
        self.auto_leader_rebalance_enable = auto_leader_rebalance_enable
        self.leader_imbalance_check_interval_s = leader_imbalance_check_interval_seconds
        self.leader_imbalance_per_broker_percentage = leader_imbalance_per_broker_percentage
        self._auto_rebalance_timer: asyncio.TimerHandle | None = None
        self.active_controller_id = -1
        self.ctx: ControllerContext | None = None
        self._writer: FencedZkWriter | None = None
        self._channel: ControllerChannelManager | None = None
        self._queue: asyncio.Queue[ev.ControllerEvent] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self.on_state_change: Callable[[], None] | None = None  # test and status hook

    # --- queue -----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"controller-{self.broker_id}")
        self.put(ev.Startup())

    def put(self, event: ev.ControllerEvent) -> None:
        self._queue.put_nowait(event)

    def expire(self) -> None:
        """The ZooKeeper session expired: Kafka's ControllerEventManager.clearAndPut(Expire). Every queued event is
        dropped, and those a caller waits on are answered as a deposed controller answers them (their preempt), so a
        controller paused past its session resigns before it decides anything more; the broker's shutdown stays
        queued behind the Expire."""
        dropped: list[ev.ControllerEvent] = []
        while not self._queue.empty():
            dropped.append(self._queue.get_nowait())
        self._queue.put_nowait(ev.Expire())
        for event in dropped:
            if isinstance(event, ev.Shutdown):
                self._queue.put_nowait(event)
            else:
                _preempt(event)

    def set_unclean_default(self, enabled: bool) -> None:
        """The broker's unclean.leader.election.enable changed dynamically: read at the next election; turned on,
        the offline partitions are elected at once, as Kafka's DynamicLogConfig asks its controller to."""
        self.unclean_default = enabled
        if enabled:
            self.put(ev.UncleanLeaderElectionEnable())

    async def stop(self) -> None:
        if self._task is None:
            return
        self.put(ev.Shutdown())
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=5)
        except TimeoutError:
            self._task.cancel()
        self._task = None

    @property
    def is_active(self) -> bool:
        return self.ctx is not None

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, list[TopicPartition]]:
        event = ev.ControlledShutdown(broker_id, broker_epoch, asyncio.get_running_loop().create_future())
        self.put(event)
        answer = await event.reply
        # The broker exits as soon as it has the answer; until the others have applied the new leaders, clients
        # asking them would be sent to a broker that is gone (seen at 1000 partitions: every moved partition).
        # Kafka answers without waiting; waiting, bounded, costs the stopping broker the others' apply time.
        # The wait is the asker's: inside the event queue a broker that does not answer would hold every
        # other decision (a kill's election among them) for the whole bound.
        if event.applying:
            _, late = await asyncio.wait(event.applying, timeout=CONTROLLED_SHUTDOWN_PROPAGATION_S)
            if late:
                log.warning("controlled shutdown of broker %d: %d requests to the other brokers not answered "
                            "within %.0f s; answering anyway", broker_id, len(late),
                            CONTROLLED_SHUTDOWN_PROPAGATION_S)
        return answer

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            if isinstance(event, ev.Shutdown):
                await self._resign("broker shutting down")
                return
            try:
                await self._process(event)
            except Exception as exc:
                # The loop must outlive every event: a controller task that died here would leave this
                # broker out of every later election (it did, once, after a session expired mid-event).
                try:
                    await self._recover(event, exc)
                except Exception:
                    log.exception("controller %d could not recover from a failed %s", self.broker_id,
                                  type(event).__name__)
            finally:
                if isinstance(event, ev.ControlledShutdown) and not event.reply.done():
                    event.reply.set_result((ErrorCode.unknown_server_error.value, []))
                if isinstance(event, ev.ReplicaLeaderElection) and event.reply is not None and not event.reply.done():
                    # deposed mid-election: the client asks the new controller (Kafka's ControllerMovedException)
                    failed = (pe.ElectionResult(ErrorCode.not_controller) if not self.is_active else
                              pe.ElectionResult(ErrorCode.unknown_server_error, "the controller failed while "
                                                "electing; see its log"))
                    event.reply.set_result(dict.fromkeys(event.partitions or (), failed))
                if isinstance(event, ev.ApiPartitionReassignment | ev.ListPartitionReassignments) \
                        and not event.reply.done():
                    event.reply.set_exception(ControllerMovedError("deposed") if not self.is_active else
                                              RuntimeError("the controller failed; see its log"))
                if self.on_state_change is not None:
                    self.on_state_change()

    async def _recover(self, event: ev.ControllerEvent, exc: Exception) -> None:
        name = type(event).__name__
        if isinstance(exc, ControllerMovedError):
            if isinstance(exc, ControllerEpochFencedError):
                # Kafka's process() catches ControllerMovedException and calls maybeResign: the write was refused
                # whole by ZooKeeper, so nothing of this event's decision reached the cluster
                self.trace.emit(te.ControllerWriteFenced, operation=name, write=exc.write,
                                expected_epoch_zk_version=exc.expected_epoch_zk_version,
                                controller_epoch=exc.controller_epoch)
            log.warning("controller %d was deposed while handling %s: %s", self.broker_id, name, exc)
            await self._maybe_resign()
            return
        log.error("controller %d failed handling %s", self.broker_id, name, exc_info=exc)
        if not self.is_active:
            if isinstance(event, ev.ControllerChange | ev.Reelect):
                # The read that re-arms the /controller watch failed: without another try this broker would
                # never hear of the controller's death.
                self._retry_later(ev.Reelect())
            return
        # Kafka's answer to a failed controller event: move the controller so another broker starts again
        # from ZooKeeper's state.
        await self._resign("error while handling " + name)
        await self._delete_own_controller_znode()

    def _retry_later(self, event: ev.ControllerEvent, delay_s: float = 0.5) -> None:
        asyncio.get_running_loop().call_later(delay_s, self.put, event)

    async def _process(self, event: ev.ControllerEvent) -> None:
        match event:
            case ev.Startup() | ev.RegisterBrokerAndReelect():
                await self._elect()
            case ev.Reelect():
                await self._maybe_resign()
                await self._elect()
            case ev.ControllerChange():
                await self._maybe_resign()
                if self.active_controller_id == -1:
                    # kazoo reports a lost connection to every watch as an event of type NONE, and does not
                    # restore watches: a deletion of /controller meanwhile shows up only as its absence.
                    await self._elect()
            case ev.Expire():
                self.active_controller_id = -1
                await self._resign("ZooKeeper session expired")
            case ev.ControlledShutdown():
                await self._on_controlled_shutdown(event)
            case ev.ReplicaLeaderElection():
                await self._on_replica_leader_election(event)
            case ev.ApiPartitionReassignment() | ev.ListPartitionReassignments() if not self.is_active:
                event.reply.set_exception(ControllerMovedError("not the active controller"))
            case ev.ApiPartitionReassignment():
                await self._on_api_partition_reassignment(event)
            case ev.ListPartitionReassignments():
                event.reply.set_result(self._list_partition_reassignments(event.partitions))
            case _ if not self.is_active:
                return
            case ev.ZkPartitionReassignment():
                await self._on_zk_partition_reassignment()
            case ev.BrokerChange():
                await self._on_broker_change()
            case ev.TopicChange():
                await self._on_topic_change()
            case ev.PartitionModifications():
                await self._on_partition_modifications(event.topic)
            case ev.TopicDeletion():
                await self._on_topic_deletion()
            case ev.IsrChangeNotification():
                await self._on_isr_change_notification()
            case ev.TopicConfigChange():
                await self._on_topic_config_change(event.topic)
            case ev.UncleanLeaderElectionEnable():
                batch = self._batch()
                await self._trigger_online_partitions(batch)
                batch.send()
            case ev.AutoPreferredReplicaLeaderElection():
                await self._on_auto_preferred_replica_election()

    # --- watches (on the loop): only enqueue ------------------------------------------------------------

    def _controller_watch(self, event: WatchedEvent) -> None:
        self.put(ev.Reelect() if event.type == EventType.DELETED else ev.ControllerChange())

    def _brokers_watch(self, _: WatchedEvent) -> None:
        self.put(ev.BrokerChange())

    def _topics_watch(self, _: WatchedEvent) -> None:
        self.put(ev.TopicChange())

    def _partition_modifications_watch(self, event: WatchedEvent) -> None:
        if event.type == EventType.CHANGED:
            self.put(ev.PartitionModifications(event.path.rsplit("/", 1)[-1]))

    def _delete_topics_watch(self, _: WatchedEvent) -> None:
        self.put(ev.TopicDeletion())

    def _isr_change_watch(self, _: WatchedEvent) -> None:
        self.put(ev.IsrChangeNotification())

    def _reassign_partitions_watch(self, event: WatchedEvent) -> None:
        # Kafka's PartitionReassignmentHandler acts on creation only: the controller's own rewrites of the znode
        # (partitions done) must not start those left over again; any other event only re-arms the watch. A lost
        # connection (NONE) may have hidden a creation: that look starts only partitions not moving already.
        if event.type in (EventType.CREATED, EventType.NONE):
            self.put(ev.ZkPartitionReassignment())
        else:
            asyncio.get_running_loop().create_task(self._arm_reassign_partitions_watch())

    async def _arm_reassign_partitions_watch(self) -> None:
        if self.is_active:
            try:
                await self.zk.exists(ReassignPartitionsZNode.path, watch=self._reassign_partitions_watch)
            except (KazooException, ZkUnavailableError) as exc:
                log.warning("could not watch %s again: %r", ReassignPartitionsZNode.path, exc)

    # --- election ---------------------------------------------------------------------------------------

    async def _read_active_controller(self) -> int:
        data, _ = await self.zk.get_or_none(ControllerZNode.path, watch=self._controller_watch)
        if data is None:
            return -1
        try:
            return ControllerZNode.decode(data).brokerid
        except ZNodeDecodeError as exc:
            log.error("%s", exc)
            return -1

    async def _elect(self) -> None:
        self.active_controller_id = await self._read_active_controller()
        if self.active_controller_id != -1:
            return
        try:
            data, stat = await self.zk.get(ControllerEpochZNode.path)
            epoch, epoch_version = ControllerEpochZNode.decode(data), stat.version
        except NoNodeError:
            try:
                await self.zk.create(ControllerEpochZNode.path, ControllerEpochZNode.encode(0))
            except NodeExistsError:
                pass
            data, stat = await self.zk.get(ControllerEpochZNode.path)
            epoch, epoch_version = ControllerEpochZNode.decode(data), stat.version
        try:
            # Creating /controller and bumping /controller_epoch in one multi-op: there is never a
            # controller without its own epoch (Kafka 2.1+).
            results = await self.zk.multi([
                CreateOp(ControllerZNode.path, ControllerZNode.encode(self.broker_id), ephemeral=True),
                SetDataOp(ControllerEpochZNode.path, ControllerEpochZNode.encode(epoch + 1), epoch_version),
            ])
            new_epoch_version = results[1].version
        except MultiOpError:
            self.active_controller_id = await self._read_active_controller()
            adopted = await self._own_election_went_through(epoch + 1)
            if adopted is None:
                return
            new_epoch_version = adopted
        self.active_controller_id = self.broker_id
        self.ctx = ControllerContext(epoch=epoch + 1, epoch_zk_version=new_epoch_version)
        self._writer = FencedZkWriter(self.zk, new_epoch_version, epoch + 1)
        self.trace.controller_epoch = epoch + 1
        self.trace.emit(te.ControllerElected, epoch_zk_version=new_epoch_version)
        log.info("broker %d is the controller, epoch %d", self.broker_id, epoch + 1)
        elected = time.monotonic()
        await self._on_controller_failover()
        # the end of Kafka's onControllerFailover: what a controller failover costs beyond the session timeout
        loaded_ms = (time.monotonic() - elected) * 1000
        partitions = len(self._ctx().leadership)
        self.trace.emit(te.ControllerLoaded, partitions=partitions, duration_ms=round(loaded_ms, 1))
        log.info("controller %d loaded %d partitions in %.0f ms", self.broker_id, partitions, loaded_ms)

    async def _own_election_went_through(self, epoch: int) -> int | None:
        """The epoch znode's version when our multi-op was applied although it reported failure: ZkClient sends
        a request again after a lost connection, and the second try finds the first one's /controller
        (Kafka's registerControllerAndIncrementControllerEpoch checks the same way)."""
        if self.active_controller_id != self.broker_id:
            return None
        data, stat = await self.zk.get(ControllerEpochZNode.path)
        return stat.version if ControllerEpochZNode.decode(data) == epoch else None

    async def _maybe_resign(self) -> None:
        was_active = self.is_active
        self.active_controller_id = await self._read_active_controller()
        if was_active and self.active_controller_id != self.broker_id:
            await self._resign(f"controller is now broker {self.active_controller_id}")

    async def _resign(self, reason: str) -> None:
        if self.ctx is None:
            return
        epoch = self.ctx.epoch
        self.ctx = None
        self._cancel_auto_rebalance()
        self._writer = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        self.trace.emit(te.ControllerResigned, controller_epoch=epoch, reason=reason)
        log.info("broker %d resigned as controller (epoch %d): %s", self.broker_id, epoch, reason)

    async def _delete_own_controller_znode(self) -> None:
        try:
            data, stat = await self.zk.get(ControllerZNode.path)
            if ControllerZNode.decode(data).brokerid == self.broker_id:
                await self.zk.delete(ControllerZNode.path, stat.version)
        except (NoNodeError, BadVersionError, ZNodeDecodeError):
            pass
        except (KazooException, ZkUnavailableError) as exc:
            # Without ZooKeeper the znode goes with the session, and another broker takes over then.
            log.warning("controller %d could not delete its /controller: %r", self.broker_id, exc)

    # --- failover: load everything, then make every partition whole -------------------------------------

    async def _on_controller_failover(self) -> None:
        ctx = self._ctx()
        await self.zk.get_children(DeleteTopicsZNode.path, watch=self._delete_topics_watch)
        notifications = await self.zk.get_children(IsrChangeNotificationZNode.path, watch=self._isr_change_watch)
        await self._writer_().delete_paths([f"{IsrChangeNotificationZNode.path}/{n}" for n in notifications])
        await self._load_live_brokers(ctx)
        await self._load_topics(ctx, await self.zk.get_children(BrokerTopicsZNode.path, watch=self._topics_watch))
        ctx.topics_to_delete = set(await self.zk.get_children(DeleteTopicsZNode.path)) & set(ctx.assignments)
        self._channel = ControllerChannelManager(self.cluster_listener_name, self.request_timeout_ms)
        for broker_id, registration in ctx.live_brokers.items():
            self._channel.add_broker(broker_id, registration)
        batch = self._batch()
        # Brokers learn the live broker set before any leadership (Kafka's failover order).
        batch.add_update_metadata(ctx.live_brokers, [])
        batch.send()
        self._queue_requests(batch, rsm.to_online(ctx, ctx.live))
        # Every state znode was read just above: the elections and ISR removals decide on that read (a write on
        # a version that moved since is refused and decided again), not on two more reads of every partition,
        # which were half of a failover's load at 1000 partitions.
        await self._trigger_online_partitions(batch, refresh=False)
        for replica in rsm.replicas_in_dead_isr(ctx):
            await self._offline_replica(batch, replica, refresh=False)
        batch.add_update_metadata(ctx.live_brokers, ctx.all_partitions())
        batch.send()
        await self._on_topic_deletion()
        # Kafka's initializePartitionReassignments: reassignments found in the topic znodes go on, then those asked
        # for in /admin/reassign_partitions while no controller was there are started
        for tp in ctx.reassigning_partitions():
            current = ra.current_assignment(ctx, tp)
            await self._on_partition_reassignment(tp, current.reassign_to(current.target), "resumed at failover")
        self.put(ev.ZkPartitionReassignment())
        # Kafka's failover: elections asked for in /admin/preferred_replica_election while no controller was
        # there are done now, and the first imbalance check runs 5 s later
        self.put(ev.ReplicaLeaderElection(None, pe.ElectionType.PREFERRED))
        self._schedule_auto_rebalance(AUTO_REBALANCE_FIRST_DELAY_S)

    async def _load_live_brokers(self, ctx: ControllerContext) -> None:
        ctx.live_brokers.clear()
        ctx.broker_epochs.clear()
        for child in await self.zk.get_children(BrokerIdsZNode.path, watch=self._brokers_watch):
            registered = await self._read_broker(child)
            if registered is not None:
                broker_id, registration, czxid = registered
                ctx.live_brokers[broker_id] = registration
                ctx.broker_epochs[broker_id] = czxid

    async def _read_broker(self, child: str):
        if not child.isdigit():
            return None
        broker_id = int(child)
        data, stat = await self.zk.get_or_none(BrokerIdZNode.path(broker_id))
        if data is None:
            return None
        try:
            return broker_id, BrokerIdZNode.decode(broker_id, data), stat.czxid
        except ZNodeDecodeError as exc:
            log.error("skipping broker %d: %s", broker_id, exc)
            return None

    async def _load_topics(self, ctx: ControllerContext, topics: list[str], *, read_states: bool = True) -> list[str]:
        """Reads the assignment and config of ``topics`` and their partitions' states, all pipelined (a round trip
        per topic, one after the other, is what made a failover at many topics slow; Kafka's controller reads them
        with getFullReplicaAssignmentForTopics and getTopicPartitionStates, pipelined too). The read of each
        assignment arms its data watch (Kafka's PartitionModificationsHandler): no extra round trip. Returns the
        topics loaded. ``read_states=False``: their partition states are not read (new topics have none yet)."""
        limit = asyncio.Semaphore(MAX_READS_IN_FLIGHT)

        async def one(topic: str) -> tuple[str, TopicAssignment | None, dict[str, str]]:
            async with limit:
                data, _ = await self.zk.get_or_none(TopicZNode.path(topic), watch=self._partition_modifications_watch)
                if data is None:
                    return topic, None, {}
                try:
                    assignment = TopicZNode.decode(topic, data)
                except ZNodeDecodeError as exc:
                    log.error("skipping topic %s: %s", topic, exc)
                    return topic, None, {}
                config_data, _ = await self.zk.get_or_none(TopicConfigZNode.path(topic))
            try:
                config = TopicConfigZNode.decode(topic, config_data) if config_data else {}
            except ZNodeDecodeError as exc:
                log.error("topic %s: ignoring its config: %s", topic, exc)
                config = {}
            return topic, assignment, config

        loaded = []
        for topic, assignment, config in sorted(await asyncio.gather(*(one(t) for t in topics)),
                                                key=lambda read: read[0]):
            if assignment is not None:
                ctx.assignments[topic], ctx.topic_configs[topic] = dict(assignment.partitions), config
                for p, replicas in assignment.adding_replicas.items():
                    ctx.adding_replicas[(topic, p)] = list(replicas)
                for p, replicas in assignment.removing_replicas.items():
                    ctx.removing_replicas[(topic, p)] = list(replicas)
                loaded.append(topic)
        if read_states:
            await self._refresh_partitions([(topic, p) for topic in loaded for p in ctx.assignments[topic]])
        return loaded

    async def _refresh_leadership(self, ctx: ControllerContext, tp: TopicPartition) -> PartitionLeadership | None:
        data, stat = await self.zk.get_or_none(TopicPartitionStateZNode.path(*tp))
        if data is None:
            ctx.leadership.pop(tp, None)
            return None
        try:
            lead = PartitionLeadership(TopicPartitionStateZNode.decode(tp[0], tp[1], data), stat.version)
        except ZNodeDecodeError as exc:
            log.error("partition %s-%d: %s", tp[0], tp[1], exc)
            return None
        ctx.leadership[tp] = lead
        return lead

    # --- performing state-machine steps -----------------------------------------------------------------

    async def _refresh_partitions(self, partitions: list[TopicPartition]) -> None:
        """Re-reads the state znodes (pipelined), as Kafka does before every election: a leader may have
        changed the ISR since we last looked."""
        ctx = self._ctx()
        limit = asyncio.Semaphore(MAX_READS_IN_FLIGHT)

        async def one(tp: TopicPartition) -> None:
            async with limit:
                await self._refresh_leadership(ctx, tp)

        await asyncio.gather(*(one(tp) for tp in partitions))

    async def _perform(self, batch: ControlRequestBatch, step: Callable[[list[TopicPartition]], StateChanges],
                       partitions: list[TopicPartition], *, refresh: bool = True) -> StateChanges:
        """Runs one state-machine step over ``partitions``: re-read, decide, write, queue the requests.
        A partition whose write lost a race is re-read and decided again until it is written or needs
        no write (Kafka's retry of updateLeaderAndIsr). ``refresh=False``: the caller has just read them (or
        written them itself in the same event); a write on a stale version is refused and decided again anyway."""
        ctx = self._ctx()
        if refresh:
            await self._refresh_partitions(partitions)
        changes = step(partitions)
        self._queue_requests(batch, changes)
        writes = changes.writes
        while writes:
            results = await self._writer_().write_partition_states(writes)
            for write in writes:
                version = results.written.get(write.tp)
                if version is None:
                    continue
                ctx.leadership[write.tp] = PartitionLeadership(write.state, version)
                self._trace_election(write, version)
                batch.add_leader_and_isr(write.leader_and_isr_to, write.tp, is_new=write.is_new)
            if not results.retry:
                break
            await self._refresh_partitions(results.retry)
            retry = []
            for write in writes:
                if write.tp not in results.retry:
                    continue
                now = ctx.leadership.get(write.tp)
                if now is not None and now.state == write.state:
                    # Our own write, applied, whose answer was lost with the connection: the client's resend
                    # met BADVERSION or NODEEXISTS. Decided again it would need no write, and the brokers would
                    # never hear of it.
                    self._trace_election(write, now.zk_version)
                    batch.add_leader_and_isr(write.leader_and_isr_to, write.tp, is_new=write.is_new)
                else:
                    retry.append(write.tp)
            if not retry:
                break
            writes = step(retry).writes
        return changes

    @staticmethod
    def _queue_requests(batch: ControlRequestBatch, changes: StateChanges) -> None:
        """Queues the requests that need no write first (a write's own LeaderAndIsr waits for it)."""
        for entry in changes.leader_and_isr:
            batch.add_leader_and_isr(entry.brokers, entry.tp, is_new=entry.is_new)
        for stop in changes.stop_replicas:
            batch.add_stop_replica(stop.broker, stop.tp, delete=stop.delete, leader_epoch=stop.leader_epoch)

    def _trace_election(self, write: PartitionStateWrite, zk_version: int) -> None:
        state, tp = write.state, write.tp
        self.trace.emit(te.LeaderElected, topic=tp[0], partition=tp[1], leader=state.leader,
                        leader_epoch=state.leader_epoch, isr=list(state.isr), previous_leader=write.previous_leader,
                        zk_version=zk_version, election=write.election, replicas=list(self._ctx().replicas(tp)))

    async def _trigger_online_partitions(self, batch: ControlRequestBatch, *, refresh: bool = True) -> None:
        ctx = self._ctx()
        await self._perform(batch, lambda tps: psm.to_online(ctx, tps, self.unclean_default), ctx.offline_partitions(),
                            refresh=refresh)

    async def _on_topic_config_change(self, topic: str) -> None:
        """Kafka 2.8 reads unclean.leader.election.enable when it elects; turning it on for a topic also elects its
        offline partitions at once (TopicUncleanLeaderElectionEnable). Turning it off changes nothing now."""
        ctx = self._ctx()
        if topic not in ctx.assignments:
            return
        config_data, _ = await self.zk.get_or_none(TopicConfigZNode.path(topic))
        try:
            ctx.topic_configs[topic] = TopicConfigZNode.decode(topic, config_data) if config_data else {}
        except ZNodeDecodeError as exc:
            log.error("topic %s: ignoring its changed config: %s", topic, exc)
            return
        if not psm.unclean_allowed(ctx, topic, self.unclean_default):
            return
        offline = [tp for tp in ctx.offline_partitions() if tp[0] == topic]
        if offline:
            log.info("unclean.leader.election.enable turned on for %s: electing %d offline partitions", topic,
                     len(offline))
            batch = self._batch()
            await self._perform(batch, lambda tps: psm.to_online(ctx, tps, self.unclean_default), offline)
            batch.send()

    async def _offline_replica(self, batch: ControlRequestBatch, replica: int, *, refresh: bool = True) -> None:
        ctx = self._ctx()
        await self._perform(batch, lambda tps: rsm.to_offline(ctx, replica, tps), ctx.all_partitions(),
                            refresh=refresh)

    # --- broker membership ------------------------------------------------------------------------------

    async def _on_broker_change(self) -> None:
        ctx = self._ctx()
        registered: dict[int, tuple] = {}
        for child in await self.zk.get_children(BrokerIdsZNode.path, watch=self._brokers_watch):
            found = await self._read_broker(child)
            if found is not None:
                registered[found[0]] = found
        cached = dict(ctx.broker_epochs)
        new = sorted(set(registered) - set(cached))
        dead = sorted(set(cached) - set(registered))
        bounced = sorted(b for b in set(registered) & set(cached) if registered[b][2] > cached[b])
        if not (new or dead or bounced):
            return
        self.trace.emit(te.BrokerMembershipChanged, new_brokers=new, dead_brokers=dead, bounced_brokers=bounced,
                        broker_epochs={b: found[2] for b, found in registered.items()})
        for b in dead + bounced:  # a bounced broker's old session ended too (it came back before we looked)
            self.trace.emit(te.BrokerExpired, expired_broker=b, broker_epoch=cached[b])

        def add(ids: list[int]) -> None:
            for b in ids:
                ctx.live_brokers[b], ctx.broker_epochs[b] = registered[b][1], registered[b][2]

        def remove(ids: list[int]) -> None:
            for b in ids:
                ctx.live_brokers.pop(b, None)
                ctx.broker_epochs.pop(b, None)

        if new:
            add(new)
            await self._on_broker_startup(new)
        if bounced:
            remove(bounced)
            await self._on_broker_failure(bounced)
            add(bounced)
            await self._on_broker_startup(bounced)
        if dead:
            remove(dead)
            await self._on_broker_failure(dead)

    async def _on_broker_startup(self, started: list[int]) -> None:
        ctx = self._ctx()
        channel = self._channel_()
        for b in started:
            channel.add_broker(b, ctx.live_brokers[b])
        batch = self._batch()
        batch.add_update_metadata(set(ctx.live_brokers) - set(started), [])
        batch.add_update_metadata(started, [tp for tp, lead in ctx.leadership.items() if lead.state.leader >= 0])
        batch.send()
        self._queue_requests(batch, rsm.to_online(ctx, started))
        await self._trigger_online_partitions(batch)
        batch.send()
        if ctx.topics_to_delete:
            await self._on_topic_deletion()

    async def _on_broker_failure(self, dead: list[int]) -> None:
        ctx = self._ctx()
        for b in dead:
            ctx.shutting_down.discard(b)
            self._channel_().remove_broker(b)
        batch = self._batch()
        led = [tp for tp in ctx.partitions_led_by(set(dead)) if tp[0] not in ctx.topics_to_delete]
        await self._perform(batch, lambda tps: psm.elect(ctx, tps, psm.OFFLINE, self.unclean_default), led)
        for b in dead:
            await self._offline_replica(batch, b)
        batch.add_update_metadata(ctx.live_brokers, [])
        batch.send()

    # --- controlled shutdown ----------------------------------------------------------------------------

    async def _on_controlled_shutdown(self, event: ev.ControlledShutdown) -> None:
        ctx = self.ctx
        if ctx is None:
            event.reply.set_result((ErrorCode.not_controller.value, []))
            return
        if event.broker_id not in ctx.live_brokers:
            event.reply.set_result((ErrorCode.broker_not_available.value, []))
            return
        if event.broker_epoch < ctx.broker_epochs.get(event.broker_id, -1):
            event.reply.set_result((ErrorCode.stale_broker_epoch.value, []))
            return
        broker = event.broker_id
        ctx.shutting_down.add(broker)
        batch = self._batch()
        replicated = psm.partitions_to_move_for_shutdown(ctx, broker)
        # No re-read of the state znodes first (Kafka re-reads them; at 1000 partitions that was a quarter of a
        # second of the controller's answer): the controller's own view is exact for what it wrote, and the
        # leaders' ISR changes since are told by their notifications. Every write is a compare-and-set on the version
        # in that view, so a stale one is refused, re-read and decided again (_perform), never applied.
        await self._refresh_partitions([tp for tp in replicated if tp not in ctx.leadership])
        led = rsm.still_led_by(ctx, broker, replicated)
        led_set = set(led)
        # The elections of the partitions it leads and the ISR removals of those it follows touch different
        # partitions: their writes go out together. Then the partitions just moved, which it now follows, go through
        # the second step too (their ISR lost it in the election: a StopReplica, no write).
        await asyncio.gather(
            self._perform(batch, lambda tps: psm.elect(ctx, tps, psm.CONTROLLED_SHUTDOWN), led, refresh=False),
            self._perform(batch, lambda tps: rsm.shutdown_followers(ctx, broker, tps),
                          [tp for tp in replicated if tp not in led_set], refresh=False))
        await self._perform(batch, lambda tps: rsm.shutdown_followers(ctx, broker, tps), led, refresh=False)
        sent = batch.send()
        event.applying.extend(f for b, futures in sent.items() if b != broker for f in futures)
        # Kafka answers partitionLeadersOnBroker: the replicated partitions it still leads, those whose election
        # failed because no other ISR member is alive. The broker asks again, and stops anyway once out of retries.
        remaining = rsm.still_led_by(ctx, broker, replicated)
        if remaining:
            log.info("controlled shutdown of broker %d: %d partitions stay led by it, no other live ISR member: %s",
                     broker, len(remaining), ", ".join(f"{t}-{p}" for t, p in remaining[:20]))
        self.trace.emit(te.ControlledShutdownStep, phase="handled", remaining_partitions=len(remaining),
                        remaining=[f"{t}-{p}" for t, p in remaining], detail=f"for broker {broker}")
        event.reply.set_result((ErrorCode.none.value, remaining))

    # --- topics -----------------------------------------------------------------------------------------

    async def _on_topic_change(self) -> None:
        """Kafka's processTopicChange: the new topics' assignments are read, not their partition states, and their
        partitions go NewPartition -> OnlinePartition (onNewPartitionCreation), creating each state znode. A state
        znode that exists already (a newer controller initialized it) makes the create fail; a deposed controller's
        create fails first on its /controller_epoch check."""
        ctx = self._ctx()
        topics = set(await self.zk.get_children(BrokerTopicsZNode.path, watch=self._topics_watch))
        for gone in set(ctx.assignments) - topics:
            ctx.remove_topic(gone)
        created: list[TopicPartition] = []
        for topic in await self._load_topics(ctx, sorted(topics - set(ctx.assignments)), read_states=False):
            self.trace.emit(te.TopicCreated, topic=topic, assignment=ctx.assignments[topic])
            created += [(topic, p) for p in sorted(ctx.assignments[topic])]
        batch = self._batch()
        await self._perform(batch, lambda tps: psm.to_online(ctx, tps, self.unclean_default), created, refresh=False)
        batch.send()

    async def _on_partition_modifications(self, topic: str) -> None:
        """Kafka's processPartitionModifications: partitions in the topic znode that the controller does not know
        go NewPartition -> OnlinePartition, as at topic creation; the others are left alone."""
        ctx = self._ctx()
        if topic not in ctx.assignments:
            return  # not loaded yet (TopicChange loads it and arms the watch) or deleted meanwhile
        data, _ = await self.zk.get_or_none(TopicZNode.path(topic), watch=self._partition_modifications_watch)
        if data is None:
            return
        try:
            assignment = TopicZNode.decode(topic, data).partitions
        except ZNodeDecodeError as exc:
            log.error("ignoring the changed assignment of topic %s: %s", topic, exc)
            return
        known = ctx.assignments[topic]
        added = {p: list(r) for p, r in sorted(assignment.items()) if p not in known}
        if topic in ctx.topics_to_delete:
            if added:
                # as Kafka: the topic goes away whole, so the assignment it had is written back
                log.warning("skipping adding partitions %s of topic %s: it is being deleted",
                            ",".join(map(str, added)), topic)
                await self._writer_().multi([SetDataOp(TopicZNode.path(topic), TopicZNode.encode(known), -1)])
            return
        if not added:
            return
        known.update(added)
        self.trace.emit(te.PartitionsAdded, topic=topic, assignment=added)
        log.info("topic %s: new partitions %s", topic, added)
        batch = self._batch()
        await self._perform(batch, lambda tps: psm.to_online(ctx, tps, self.unclean_default),
                            [(topic, p) for p in added])
        batch.send()

    async def _on_topic_deletion(self) -> None:
        ctx = self._ctx()
        requested = await self.zk.get_children(DeleteTopicsZNode.path, watch=self._delete_topics_watch)
        writer = self._writer_()
        decision = decide_topic_deletion(ctx, requested, self.delete_topic_enable)
        if requested and not self.delete_topic_enable:
            log.warning("delete.topic.enable is false: ignoring deletion of %s", ", ".join(requested))
        if decision.unknown:
            await writer.delete_paths([DeleteTopicsTopicZNode.path(t) for t in decision.unknown])
        ctx.topics_to_delete = decision.to_delete
        for topic, missing in decision.waiting.items():
            log.info("deletion of %s waits for replicas on brokers %s", topic, missing)
        batch = self._batch()
        for topic in decision.ready:
            partitions = [(topic, p) for p in sorted(ctx.assignments[topic])]
            batch.add_update_metadata(ctx.live_brokers, partitions, deleting=True)
            self._queue_requests(batch, rsm.deletion_started(ctx, topic))
            await writer.delete_paths([TopicZNode.path(topic), TopicConfigZNode.path(topic),
                                       DeleteTopicsTopicZNode.path(topic)])
            ctx.remove_topic(topic)
            self.trace.emit(te.TopicDeleted, topic=topic)
        batch.send()

    async def _on_isr_change_notification(self) -> None:
        ctx = self._ctx()
        children = await self.zk.get_children(IsrChangeNotificationZNode.path, watch=self._isr_change_watch)
        changed: set[TopicPartition] = set()
        for child in sorted(children):
            path = f"{IsrChangeNotificationZNode.path}/{child}"
            data, _ = await self.zk.get_or_none(path)
            try:
                changed.update(IsrChangeNotificationZNode.decode(path, data))
            except ZNodeDecodeError as exc:
                log.error("ignoring ISR change notification: %s", exc)
        await self._refresh_partitions([tp for tp in sorted(changed) if tp[0] in ctx.assignments])
        batch = self._batch()
        batch.add_update_metadata(ctx.live_brokers, [tp for tp in sorted(changed) if tp in ctx.leadership])
        batch.send()
        await self._writer_().delete_paths([f"{IsrChangeNotificationZNode.path}/{c}" for c in children])
        # how Kafka (ZooKeeper mode) learns that the new replicas of a reassignment caught up
        for tp in sorted(changed):
            if ctx.is_reassigning(tp) and ra.is_complete(ctx, tp):
                await self._complete_reassignment(tp)

    # --- preferred leader election (the decisions are in preferred_election.py) -------------------------

    async def elect_leaders(self, partitions: list[TopicPartition] | None, election_type: pe.ElectionType
                            ) -> dict[TopicPartition, pe.ElectionResult]:
        """ElectLeaders: queued like every controller event; the answer comes once the new leaders are written
        and the LeaderAndIsr/UpdateMetadata requests queued. ``partitions`` None: every partition."""
        reply: asyncio.Future = asyncio.get_running_loop().create_future()
        self.put(ev.ReplicaLeaderElection(None if partitions is None else tuple(partitions), int(election_type),
                                          reply))
        return await reply

    def _schedule_auto_rebalance(self, delay_s: float) -> None:
        if not self.auto_leader_rebalance_enable:
            return
        self._cancel_auto_rebalance()
        self._auto_rebalance_timer = asyncio.get_running_loop().call_later(
            delay_s, self.put, ev.AutoPreferredReplicaLeaderElection())

    def _cancel_auto_rebalance(self) -> None:
        if self._auto_rebalance_timer is not None:
            self._auto_rebalance_timer.cancel()
            self._auto_rebalance_timer = None

    def _preferred_replica_election_watch(self, _: WatchedEvent) -> None:
        self.put(ev.ReplicaLeaderElection(None, pe.ElectionType.PREFERRED))

    async def _on_auto_preferred_replica_election(self) -> None:
        try:
            ctx = self._ctx()
            candidates = pe.auto_rebalance_candidates(ctx, self.leader_imbalance_per_broker_percentage)
            if candidates:
                ratios = ", ".join(f"broker {b}: {i.led_elsewhere}/{i.preferred}"
                                   for b, i in pe.leader_imbalance(ctx).items() if i.led_elsewhere)
                log.info("leader imbalance (%s) above %d%%: preferred election for %s", ratios,
                         self.leader_imbalance_per_broker_percentage,
                         ", ".join(f"{t}-{p}" for t, p in candidates))
                await self._replica_election(candidates, pe.ElectionType.PREFERRED, admin=False)
        finally:
            if self.is_active:
                self._schedule_auto_rebalance(self.leader_imbalance_check_interval_s)

    async def _on_replica_leader_election(self, event: ev.ReplicaLeaderElection) -> None:
        election_type = pe.ElectionType(event.election_type)
        if event.reply is not None:
            if self.ctx is None:
                event.reply.set_result({tp: pe.ElectionResult(ErrorCode.not_controller, None)
                                        for tp in event.partitions or ()})
                return
            wanted = self._ctx().all_partitions() if event.partitions is None else list(event.partitions)
            event.reply.set_result(await self._replica_election(wanted, election_type, admin=True))
            return
        if self.ctx is None:
            return
        # the exists-watch is set again by every look, so the next request is seen as well (our own delete
        # fires it too: that look finds nothing)
        path = PreferredReplicaElectionZNode.path
        if await self.zk.exists(path, watch=self._preferred_replica_election_watch) is None:
            return
        data, _ = await self.zk.get_or_none(PreferredReplicaElectionZNode.path)
        try:
            requested = PreferredReplicaElectionZNode.decode(data) if data is not None else []
        except ZNodeDecodeError as exc:
            log.error("ignoring the preferred replica election request: %s", exc)
            requested = []
        try:
            results = await self._replica_election(requested, election_type, admin=False)
            for (topic, partition), result in sorted(results.items()):
                if result.error not in (ErrorCode.none, ErrorCode.election_not_needed):
                    log.warning("preferred election of %s-%d failed: %s (%s)", topic, partition, result.error.name,
                                result.message)
        finally:
            await self._writer_().delete_paths([PreferredReplicaElectionZNode.path])

    async def _replica_election(self, partitions: list[TopicPartition], election_type: pe.ElectionType, *,
                                admin: bool) -> dict[TopicPartition, pe.ElectionResult]:
        """Kafka's onReplicaElection: PREFERRED gives each partition to its preferred replica if it is alive and
        in the ISR; UNCLEAN elects offline partitions, out of the ISR too when an admin asked for it."""
        ctx = self._ctx()
        plan = pe.plan_election(ctx, partitions, election_type)
        if plan.electable:
            if election_type == pe.ElectionType.PREFERRED:
                def step(tps: list[TopicPartition]) -> StateChanges:
                    return psm.elect(ctx, tps, psm.PREFERRED)
            else:
                def step(tps: list[TopicPartition]) -> StateChanges:
                    return psm.elect(ctx, tps, psm.OFFLINE, self.unclean_default, force_unclean=admin)
            batch = self._batch()
            await self._perform(batch, step, plan.electable)
            batch.send()
        results = dict(plan.answered)
        for tp in plan.electable:
            results[tp] = pe.election_result(ctx, tp, election_type)
        return results

    # --- helpers ----------------------------------------------------------------------------------------

    def _ctx(self) -> ControllerContext:
        if self.ctx is None:
            raise ControllerMovedError("not the active controller")
        return self.ctx

    def _writer_(self) -> FencedZkWriter:
        if self._writer is None:
            raise ControllerMovedError("not the active controller")
        return self._writer

    def _channel_(self) -> ControllerChannelManager:
        if self._channel is None:
            raise ControllerMovedError("not the active controller")
        return self._channel

    def _batch(self) -> ControlRequestBatch:
        return ControlRequestBatch(self.broker_id, self._ctx(), self._channel_())

    # --- partition reassignment (KIP-455; the decisions are in reassignment.py) ---------------------------

    async def alter_partition_reassignments(self, reassignments: dict[TopicPartition, list[int] | None]
                                            ) -> dict[TopicPartition, ra.Refused | None]:
        """AlterPartitionReassignments: answered once each reassignment is started (not finished), as Kafka does.
        Raises ControllerMovedError when this broker is not (or no longer) the active controller."""
        reply: asyncio.Future = asyncio.get_running_loop().create_future()
        self.put(ev.ApiPartitionReassignment(tuple((tp, None if r is None else tuple(r))
                                                   for tp, r in reassignments.items()), reply))
        return await reply

    async def list_partition_reassignments(self, partitions: list[TopicPartition] | None
                                           ) -> dict[TopicPartition, ra.ReplicaAssignment]:
        reply: asyncio.Future = asyncio.get_running_loop().create_future()
        self.put(ev.ListPartitionReassignments(None if partitions is None else tuple(partitions), reply))
        return await reply

    def _list_partition_reassignments(self, partitions: tuple[TopicPartition, ...] | None
                                      ) -> dict[TopicPartition, ra.ReplicaAssignment]:
        ctx = self._ctx()
        wanted = ctx.reassigning_partitions() if partitions is None else \
            [tp for tp in partitions if ctx.is_reassigning(tp)]
        return {tp: ra.current_assignment(ctx, tp) for tp in wanted}

    async def _on_api_partition_reassignment(self, event: ev.ApiPartitionReassignment) -> None:
        ctx = self._ctx()
        results: dict[TopicPartition, ra.Refused | None] = {}
        overridden: list[TopicPartition] = []
        for tp, target in event.reassignments:
            planned = ra.plan(ctx, tp, None if target is None else list(target))
            if isinstance(planned, ra.Refused):
                results[tp] = planned
                continue
            if tp in ctx.zk_reassignments:
                # an API reassignment of the same partition overrides the one asked for through ZooKeeper
                del ctx.zk_reassignments[tp]
                overridden.append(tp)
            await self._on_partition_reassignment(tp, planned, "cancelled" if target is None else "asked for")
            results[tp] = None
        if overridden:
            await self._rewrite_zk_reassignments()
        event.reply.set_result(results)

    async def _on_zk_partition_reassignment(self) -> None:
        """/admin/reassign_partitions (kafka-reassign-partitions.sh --zookeeper): each valid partition starts; the
        invalid ones are logged and removed from the znode, which goes when nothing in it is left to do."""
        ctx = self._ctx()
        if await self.zk.exists(ReassignPartitionsZNode.path, watch=self._reassign_partitions_watch) is None:
            return
        data, _ = await self.zk.get_or_none(ReassignPartitionsZNode.path)
        try:
            requested = ReassignPartitionsZNode.decode(data) if data is not None else {}
        except ZNodeDecodeError as exc:
            log.error("ignoring the partition reassignment request: %s", exc)
            requested = {}
        for tp, target in sorted(requested.items()):
            if ctx.zk_reassignments.get(tp) == target and ctx.is_reassigning(tp):
                continue
            planned = ra.plan(ctx, tp, target)
            if isinstance(planned, ra.Refused):
                log.warning("reassignment of %s-%d to %s from %s refused: %s (%s)", tp[0], tp[1], target,
                            ReassignPartitionsZNode.path, planned.error.name, planned.message)
                continue
            ctx.zk_reassignments[tp] = list(target)
            await self._on_partition_reassignment(tp, planned, f"asked for in {ReassignPartitionsZNode.path}")
        await self._rewrite_zk_reassignments()

    async def _rewrite_zk_reassignments(self) -> None:
        """Kafka's maybeRemoveFromZkReassignment: the znode keeps only the partitions still moving to its target."""
        ctx = self._ctx()
        for tp in [tp for tp in ctx.zk_reassignments if not ctx.is_reassigning(tp)]:
            del ctx.zk_reassignments[tp]
        path = ReassignPartitionsZNode.path
        if not ctx.zk_reassignments:
            await self._writer_().delete_paths([path])
            return
        data = ReassignPartitionsZNode.encode(ctx.zk_reassignments)
        try:
            await self._writer_().multi([SetDataOp(path, data, -1)])
        except NoNodeError:
            pass  # removed by hand meanwhile: nothing to keep up to date

    async def _write_topic_assignment(self, topic: str) -> None:
        ctx = self._ctx()
        partitions = ctx.assignments[topic]
        adding = {p: ctx.adding_replicas[(topic, p)] for p in partitions if ctx.adding_replicas.get((topic, p))}
        removing = {p: ctx.removing_replicas[(topic, p)] for p in partitions
                    if ctx.removing_replicas.get((topic, p))}
        await self._writer_().multi([SetDataOp(TopicZNode.path(topic),
                                               TopicZNode.encode(partitions, adding, removing), -1)])

    def _trace_reassignment(self, tp: TopicPartition, phase: str, detail: str = "") -> None:
        ctx = self._ctx()
        self.trace.emit(te.PartitionReassignmentStep, topic=tp[0], partition=tp[1], phase=phase,
                        replicas=list(ctx.replicas(tp)), adding_replicas=list(ctx.adding_replicas.get(tp, [])),
                        removing_replicas=list(ctx.removing_replicas.get(tp, [])), detail=detail)
        log.info("reassignment of %s-%d %s: replicas %s, adding %s, removing %s %s", tp[0], tp[1], phase,
                 ctx.replicas(tp), ctx.adding_replicas.get(tp, []), ctx.removing_replicas.get(tp, []), detail)

    async def _on_partition_reassignment(self, tp: TopicPartition, moved: ra.ReplicaAssignment, why: str) -> None:
        """Kafka's onPartitionReassignment, start: RS/AR/RR written (U1, U2), an earlier RS's extra replicas stopped
        (U3), then phase A (new replicas told to fetch) or, when the target is already in the ISR, completion."""
        ctx = self._ctx()
        topic, partition = tp
        previous = ra.current_assignment(ctx, tp)
        ctx.assignments[topic][partition] = list(moved.replicas)
        ctx.adding_replicas[tp], ctx.removing_replicas[tp] = list(moved.adding), list(moved.removing)
        await self._write_topic_assignment(topic)
        self._trace_reassignment(tp, "started", f"target {list(moved.target)}, {why}")
        batch = self._batch()
        stale = [r for r in previous.replicas if r not in moved.replicas]
        if stale:
            await self._perform(batch, lambda tps: ra.stop_removed_replicas(ctx, tps, stale), [tp])
            self._trace_reassignment(tp, "replaced", f"replicas {stale} stopped and deleted")
        await self._refresh_partitions([tp])
        if not ra.is_complete(ctx, tp):
            await self._perform(batch, lambda tps: ra.bump_leader_epoch(ctx, tps), [tp])
            self._trace_reassignment(tp, "adding", "LeaderAndIsr with the new replicas sent")
            batch.send()
            return
        batch.send()
        await self._complete_reassignment(tp)

    async def _complete_reassignment(self, tp: TopicPartition) -> None:
        """Phase B, once the target is in the ISR: leader in the target (B3), removed replicas out of the ISR and
        deleted (B4, B5), the topic znode with the target only (B6), the ZooKeeper request updated (B7), metadata
        to every broker (B8)."""
        ctx = self._ctx()
        topic, partition = tp
        current = ra.current_assignment(ctx, tp)
        removed = list(current.removing)
        ctx.assignments[topic][partition] = list(current.target)
        ctx.adding_replicas.pop(tp, None)
        ctx.removing_replicas.pop(tp, None)
        batch = self._batch()
        await self._perform(batch, lambda tps: ra.elect_in_target(ctx, tps), [tp])
        lead = ctx.leadership.get(tp)
        self._trace_reassignment(tp, "leader_moved", f"leader {lead.state.leader if lead else -1}")
        if removed:
            await self._perform(batch, lambda tps: ra.stop_removed_replicas(ctx, tps, removed), [tp])
            self._trace_reassignment(tp, "replicas_removed", f"replicas {removed} stopped and deleted")
        await self._write_topic_assignment(topic)
        if tp in ctx.zk_reassignments:
            await self._rewrite_zk_reassignments()
        batch.add_update_metadata(ctx.live_brokers, [tp])
        batch.send()
        self._trace_reassignment(tp, "completed")
        if topic in ctx.topics_to_delete:
            await self._on_topic_deletion()


def _preempt(event: ev.ControllerEvent) -> None:
    """An event dropped from the queue on session expiry gets the answer Kafka's preempt() gives it: the controller
    moved (NOT_CONTROLLER), so the caller asks the new one."""
    if isinstance(event, ev.ControlledShutdown) and not event.reply.done():
        event.reply.set_result((ErrorCode.not_controller.value, []))
    elif isinstance(event, ev.ReplicaLeaderElection) and event.reply is not None and not event.reply.done():
        event.reply.set_result(dict.fromkeys(event.partitions or (), pe.ElectionResult(ErrorCode.not_controller)))
    elif isinstance(event, ev.ApiPartitionReassignment | ev.ListPartitionReassignments) and not event.reply.done():
        event.reply.set_exception(ControllerMovedError("the controller's ZooKeeper session expired"))
