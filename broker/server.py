"""KafkaServer: one broker process. Starts its listeners, registers in ZooKeeper, runs its controller,
applies control requests, and leaves cleanly on SIGTERM (controlled shutdown), or halts when its log
directory fails (Kafka's LogDirFailureHandler)."""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable
from pathlib import Path

import grpc
from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import AdminAccess, ClusterAccess, GroupAccess, ReplicaAccess, TxnAccess
from broker.clientplane.kafka_apis import KafkaApis
from broker.clientplane.network import SocketServer
from broker.config import KafkaConfig, Listener
from broker.group.manager import OFFSETS_TOPIC, GroupMetadataManager
from broker.transaction.state_manager import TransactionStateManager
from broker.log.errors import KafkaStorageError
from broker.log.log_dir_failure_channel import LogDirFailureChannel
from broker.config_change_listener import ConfigChangeListener
from broker.dynamic_broker_config import BrokerConfigLayers
from broker.log.cleaner.manager import CleaningReport
from broker.log_service import LogDirectoryError, LogService, MaintenanceIntervals
from broker.memory import keep_freed_memory
from broker.metrics.broker_state import snapshot_broker
from broker.metrics.http_server import MetricsBindError, MetricsServer
from broker.metrics.snapshot import BrokerSnapshot, on_loop
from broker.metadata_cache import MetadataCache
from broker.producer_id_manager import ProducerIdManager
from broker.purgatory.asyncio_timer import AsyncioTimer
from broker.registration import (
    SessionNeverReturnedError,
    create_top_level_paths,
    get_or_create_cluster_id,
    on_a_live_session,
    register_broker,
    registration_for,
)
from broker.replication.control_service import AdminService, ControlPlaneService
from broker.replication.isr_manager import IsrChangeManager
from broker.replication.partition import Partition
from broker.replication.replica_fetcher import REPLICATION_CHANNEL_OPTIONS, FetcherSettings, ReplicaFetcherManager
from broker.replication.replica_manager import ReplicaIO, ReplicaManager, TopicPartition
from broker.replication.replication_service import ReplicationService
from broker.replication.txn_markers import MarkerResults, TxnMarker, TxnMarkerWriter
from broker.replication.replication_tracing import ReplicationTracer
from broker.replication.role_change import RoleChangeManager
from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import (
    ControlPlaneStub,
    add_AdminServicer_to_server,
    add_ControlPlaneServicer_to_server,
    add_ReplicationServicer_to_server,
)
from controller import events as controller_events
from controller.controller import KafkaController
from controller.reassignment import Refused, ReplicaAssignment
from controller.state_change import ControllerMovedError
from controller.preferred_election import ElectionResult, ElectionType
from traces import events as te
from traces.writer import TraceWriter
from zk.client import SessionEvent, ZkClient
from zk.admin import broker_config_overrides
from zk.znodes import BrokerConfigZNode, BrokerIdZNode, ControllerZNode, ZNodeDecodeError

log = logging.getLogger(__name__)


class StartupError(RuntimeError):
    """The broker cannot start; the message says what to fix."""


def check_port_free(listener: Listener) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((listener.bind_host, listener.port))
        except OSError as exc:
            raise StartupError(f"listener {listener} cannot bind {listener.bind_host}:{listener.port}: "
                               f"{exc.strerror}; stop what holds the port or change 'listeners'") from None


class KafkaServer:
    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.trace = TraceWriter(config.trace_path, config.broker_id, capacity=config.trace_buffer_events,
                                 enabled=config.trace_enable, max_file_bytes=config.trace_file_max_bytes,
                                 backups=config.trace_file_backups)
        self.replication_tracer = ReplicationTracer(self.trace, self.now_ms, config.trace_replica_interval_ms)
        self.zk = ZkClient(config.zookeeper_connect, config.zookeeper_session_timeout_ms,
                           config.zookeeper_connection_timeout_ms)
        self.replica_manager = ReplicaManager(config.broker_id)
        self.metadata_cache = MetadataCache()
        self.log_dir_failure_channel = LogDirFailureChannel()
        self.log_dir_failure_channel.add_listener(self._on_offline_log_dir)
        self._log_dir_failure_handler: asyncio.Task | None = None
        self.replica_io = ReplicaIO(
            self.replica_manager,
            known_in_metadata=lambda tp: tp in self.metadata_cache.partitions,
            min_insync_replicas=lambda partition: partition.log.config.min_insync_replicas,
            is_broker_alive=lambda broker_id: broker_id in self.metadata_cache.live_brokers)
        self.log_service = LogService(config.log_properties, config.all_log_dirs, self.zk,
                                      high_watermarks=self._high_watermarks_to_checkpoint,
                                      intervals=MaintenanceIntervals(
                                          config.replica_high_watermark_checkpoint_interval_ms / 1000,
                                          config.log_retention_check_interval_ms / 1000,
                                          config.log_flush_offset_checkpoint_interval_ms / 1000),
                                      log_dir_failure_channel=self.log_dir_failure_channel,
                                      on_log_cleaned=self._on_log_cleaned)
        self.producer_ids = ProducerIdManager(config.broker_id, self.zk)
        self.isr_manager = IsrChangeManager(
            self.zk, self.replica_io, self.trace, self.now_ms,
            blackout_ms=config.isr_change_propagation_blackout_ms,
            interval_ms=config.isr_change_propagation_interval_ms)
        self.replica_io.on_isr_proposal = self.isr_manager.submit
        self.replica_io.on_high_watermark = lambda partition: self._trace_high_watermark(
            partition, "leader" if partition.is_leader else "follower")
        self.replica_io.on_follower_fetch = self.replication_tracer.follower_fetched
        self.replica_io.on_delayed_finished = self.replication_tracer.delayed_finished
        self.replica_io.on_txn_marker = self.replication_tracer.txn_marker_written
        self.replica_io.on_last_stable_offset = self.replication_tracer.last_stable_offset_changed
        self.replica_io.on_log_start_moved = lambda partition: self._log_start_moved(partition, "leader")
        self.fetcher_manager = ReplicaFetcherManager(
            FetcherSettings(broker_id=config.broker_id, max_wait_ms=config.replica_fetch_wait_max_ms,
                            min_bytes=config.replica_fetch_min_bytes,
                            partition_max_bytes=config.replica_fetch_max_bytes,
                            response_max_bytes=config.replica_fetch_response_max_bytes,
                            backoff_ms=config.replica_fetch_backoff_ms,
                            socket_timeout_ms=config.replica_socket_timeout_ms,
                            truncation_rule=config.replica_truncation_rule),
            self.trace, lambda broker_id: self.role_changes.cluster_address(broker_id),
            self._follower_progress,
            on_log_start_moved=lambda partition: self._log_start_moved(partition, "follower"))
        self.role_changes = RoleChangeManager(
            config.broker_id, self.replica_manager, self.replica_io, self.fetcher_manager, self.log_service,
            self.trace, replica_lag_time_max_ms=config.replica_lag_time_max_ms, now_ms=self.now_ms,
            checkpointed_high_watermark=lambda tp: self._checkpointed_high_watermarks.get(tp, 0),
            inter_broker_listener_name=config.inter_broker_listener_name,
            live_brokers=lambda: self.metadata_cache.live_brokers)
        self._isr_expiration: asyncio.Task | None = None
        self._trace_flusher: asyncio.Task | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._timers: list[AsyncioTimer] = []
        self._checkpointed_high_watermarks: dict[TopicPartition, int] = {}
        self._high_watermarks_collected: tuple[int, dict[TopicPartition, int]] | None = None
        self.controller: KafkaController | None = None
        # server.properties, then the dynamic broker configs read at start and on every change (KIP-226)
        self.config_layers = BrokerConfigLayers.of(config)
        self.config_changes = ConfigChangeListener(self.zk, self._on_topic_config_change,
                                                   self._on_broker_config_change)
        self.cluster_id: str | None = None
        self._grpc_server: grpc.aio.Server | None = None
        self.group_manager = GroupMetadataManager(config, self.replica_io, self.trace, self.now_ms)
        self.role_changes.add_leadership_listener(self.group_manager.on_role_change)
        self.txn_marker_writer = TxnMarkerWriter(self.replica_io, self.now_ms)
        self.txn_manager = TransactionStateManager(
            config, self.replica_io, self.txn_marker_writer, self.trace, self.now_ms,
            leader_of=lambda tp: state.leader if (state := self.metadata_cache.partitions.get(tp)) else None,
            address_of=lambda broker_id: self.role_changes.cluster_address(broker_id),
            partition_exists=lambda tp: tp in self.metadata_cache.partitions)
        self.role_changes.add_leadership_listener(self.txn_manager.on_role_change)
        # a marker written on __consumer_offsets completes the producer's transactional offset commits there
        self.txn_marker_writer.listeners.append(self._complete_txn_offsets)
        self.apis = KafkaApis(
            config, self.metadata_cache, lambda: self.cluster_id,
            ReplicaAccess(self.replica_io, self.now_ms, self.trace_produce, self.txn_marker_writer),
            GroupAccess(self.group_manager.coordinator, self.metadata_cache, self.zk, config),
            AdminAccess(config.broker_id, config, self.zk, self.metadata_cache, lambda: self.log_service.default_config,
                        lambda: self.config_layers,
                        lambda: self.is_controller, self.elect_leaders,
                        self.alter_partition_reassignments, self.list_partition_reassignments),
            ClusterAccess(config, self.metadata_cache, lambda: self.cluster_id, self.log_service.manager,
                          self.replica_io),
            TxnAccess(self.txn_manager.coordinator, self.metadata_cache, self.zk, config, self.producer_ids))
        self.socket_server = SocketServer(config.client_listeners, self.apis.handle)
        self._stopping = asyncio.Event()
        self._registration = registration_for(config)
        self._registration_wanted = False
        self._reregistrations: set[asyncio.Task] = set()
        self._logs_loaded = False
        self.metrics_server: MetricsServer | None = None
        if config.metrics_port:
            self.metrics_server = MetricsServer(config.metrics_host, config.metrics_port,
                                                lambda: on_loop(self.loop, self.metrics_snapshot))

    # --- start ------------------------------------------------------------------------------------------

    def _high_watermarks_to_checkpoint(self) -> dict[TopicPartition, int]:
        # Collected again only when some HW may have moved: an idle broker's thousand HWs stay as they were.
        generation = self.replica_io.high_watermark_generation
        if self._high_watermarks_collected is None or self._high_watermarks_collected[0] != generation:
            # logs not hosted yet (after a restart, before LeaderAndIsr) keep the HW they had on disk
            self._high_watermarks_collected = (
                generation, {**self._checkpointed_high_watermarks, **self.replica_io.high_watermarks()})
        return self._high_watermarks_collected[1]

    def _follower_progress(self, partition: Partition) -> None:
        """A follower appended records or took a new HW from its leader."""
        self.replica_io.high_watermark_generation += 1
        self._trace_high_watermark(partition, "follower")

    def now_ms(self) -> int:
        """The loop's monotonic clock in ms: purgatory timeouts and replica lag times are measured on it."""
        return int(self.loop.time() * 1000)

    def _complete_txn_offsets(self, marker: TxnMarker, results: MarkerResults) -> None:
        """Kafka's handleTxnCompletion: only the __consumer_offsets partitions whose marker was written."""
        done = [p for (topic, p), error in results.items() if topic == OFFSETS_TOPIC and error == ErrorCode.none]
        if done:
            self.group_manager.handle_txn_completion(marker.producer_id, done, marker.commit)

    def _on_log_cleaned(self, report: CleaningReport) -> None:
        self.trace.emit(te.LogCleaned, **report.event_fields())

    @property
    def is_controller(self) -> bool:
        return self.controller is not None and self.controller.is_active

    async def elect_leaders(self, partitions: list[TopicPartition] | None, election_type: ElectionType
                            ) -> dict[TopicPartition, ElectionResult]:
        if self.controller is None:  # still starting
            return {tp: ElectionResult(ErrorCode.not_controller) for tp in partitions or ()}
        return await self.controller.elect_leaders(partitions, election_type)

    async def alter_partition_reassignments(self, reassignments: dict[TopicPartition, list[int] | None]
                                            ) -> dict[TopicPartition, Refused | None] | None:
        """None when this broker is not the active controller (NOT_CONTROLLER)."""
        if self.controller is None or not self.controller.is_active:
            return None
        try:
            return await self.controller.alter_partition_reassignments(reassignments)
        except ControllerMovedError:
            return None

    async def list_partition_reassignments(self, partitions: list[TopicPartition] | None
                                           ) -> dict[TopicPartition, ReplicaAssignment] | None:
        if self.controller is None or not self.controller.is_active:
            return None
        try:
            return await self.controller.list_partition_reassignments(partitions)
        except ControllerMovedError:
            return None

    async def _on_topic_config_change(self, topic: str) -> None:
        """Kafka's TopicConfigHandler: the topic's local logs take the new config; the controller, if active here,
        re-reads it (and elects offline partitions when unclean election was turned on)."""
        local_logs, overrides = await self.log_service.refresh_topic_config(topic)
        self.trace.emit(te.TopicConfigChanged, topic=topic, topic_overrides=overrides, local_logs=local_logs)
        if self.controller is not None:
            self.controller.put(controller_events.TopicConfigChange(topic))

    async def _on_broker_config_change(self, entity: str) -> None:
        """Kafka's BrokerConfigHandler: the cluster-wide default's change, or this broker's own, is read again and
        applied; another broker's is not this broker's business."""
        if entity not in (BrokerConfigZNode.default_entity, str(self.broker_id)):
            return
        await self._read_broker_config(None if entity == BrokerConfigZNode.default_entity else self.broker_id)

    async def _load_broker_configs(self) -> None:
        """At start, before the logs open (DynamicBrokerConfig.initialize): the cluster-wide default's and this
        broker's own dynamic configs, so a broker restarted after a change starts with it."""
        for broker_id in (None, self.broker_id):
            await self._read_broker_config(broker_id, at_start=True)

    async def _read_broker_config(self, broker_id: int | None, *, at_start: bool = False) -> None:
        """The cluster-wide default's dynamic config (None) or this broker's, read and applied."""
        entity = BrokerConfigZNode.entity_name(broker_id)
        try:
            dynamic = await broker_config_overrides(self.zk, broker_id)
        except ZNodeDecodeError as exc:
            log.error("ignoring the dynamic config of brokers/%s, it is unreadable: %s", entity, exc)
            return
        if at_start and not dynamic:
            return
        layers = self.config_layers.with_dynamic(default=dynamic) if broker_id is None \
            else self.config_layers.with_dynamic(broker=dynamic)
        self._apply_broker_config(entity, dynamic, layers)

    def _apply_broker_config(self, entity: str, dynamic: dict[str, str], layers: BrokerConfigLayers) -> None:
        """Kafka keeps the broker's config when an update does not validate (it was checked before it was written,
        so only a hand-written znode gets here); otherwise every log takes the new defaults, the controller the
        new unclean.leader.election.enable (electing offline partitions when it was turned on) and the fetchers the
        truncation rule."""
        try:
            defaults = layers.log_defaults()
            layers.truncation_rule()
        except ValueError as exc:  # a pydantic ValidationError too
            log.error("keeping the broker config, the dynamic config of brokers/%s is invalid: %s", entity, exc)
            return
        unclean_before = self.config_layers.unclean_leader_election_enable()
        self.config_layers = layers
        local_logs = self.log_service.update_defaults(defaults)
        unclean = layers.unclean_leader_election_enable()
        if self.controller is not None and unclean != unclean_before:
            self.controller.set_unclean_default(unclean)
        self.fetcher_manager.set_truncation_rule(layers.truncation_rule())
        log.info("applied the dynamic config of brokers/%s: %s", entity, dynamic)
        self.trace.emit(te.BrokerConfigChanged, entity=entity, dynamic_config=dynamic, local_logs=local_logs)

    async def startup(self) -> None:
        self.loop = asyncio.get_running_loop()
        for listener in self.config.bound_listeners:
            check_port_free(listener)
        if self.metrics_server is not None:
            try:
                self.metrics_server.start()
            except MetricsBindError as exc:
                raise StartupError(str(exc)) from None
            log.info("metrics on %s", self.metrics_server.url)

        self._timers = [AsyncioTimer(self.replica_io.produce_purgatory.timer, self.loop),
                        AsyncioTimer(self.replica_io.fetch_purgatory.timer, self.loop),
                        AsyncioTimer(self.replica_io.delete_records_purgatory.timer, self.loop)]
        self.group_manager.start(self.loop)
        self.txn_manager.start(self.loop)
        self.isr_manager.start()
        self._isr_expiration = self.loop.create_task(self._expire_isr_members(), name="isr-expiration")
        self._trace_flusher = self.loop.create_task(self.replication_tracer.flush_periodically(), name="trace-flush")
        await self._start_cluster_plane()
        await self._start_client_listeners()
        self.zk.add_session_listener(self._on_session_event)
        await self.zk.start(say=lambda msg: log.warning("%s", msg))
        await self._on_live_session(lambda: create_top_level_paths(self.zk), "creating the top-level znodes")
        self.cluster_id = await self._on_live_session(lambda: get_or_create_cluster_id(self.zk),
                                                      "reading the cluster id")
        await self._on_live_session(self._load_broker_configs, "reading the dynamic broker configs")
        await self.log_service.startup()  # after ZooKeeper: each log opens with its topic's config
        self._logs_loaded = True
        self._checkpointed_high_watermarks = self.log_service.read_high_watermarks()
        self._high_watermarks_collected = None
        await self._on_live_session(self.producer_ids.start, "claiming a block of producer ids")
        # from here a new session re-registers, even before the controller exists (a new session while starting
        # used to be ignored, and the broker stayed unregistered for good)
        self._registration_wanted = True
        await self._register()
        self.controller = KafkaController(
            self.broker_id, self.zk, self.trace, cluster_listener_name=self.config.inter_broker_listener_name,
            unclean_leader_election_enable=self.config_layers.unclean_leader_election_enable(),
            delete_topic_enable=self.config.delete_topic_enable,
            request_timeout_ms=self.config.controller_socket_timeout_ms,
            auto_leader_rebalance_enable=self.config.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_seconds=self.config.leader_imbalance_check_interval_seconds,
            leader_imbalance_per_broker_percentage=self.config.leader_imbalance_per_broker_percentage)
        self.controller.start()
        self.config_changes.start()
        log.info("broker %d started (cluster %s, epoch %d)", self.broker_id, self.cluster_id,
                 self.replica_manager.broker_epoch)

    async def _start_cluster_plane(self) -> None:
        listener = self.config.cluster_listener
        # gRPC binds with SO_REUSEPORT by default, which would let two brokers share a port silently.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0), *REPLICATION_CHANNEL_OPTIONS])
        add_ControlPlaneServicer_to_server(ControlPlaneService(
            self.role_changes, self.metadata_cache, self.replica_manager, lambda: self.controller, self.trace), server)
        add_AdminServicer_to_server(AdminService(self.replica_manager, self.metadata_cache, lambda: self.controller,
                                                 self.replica_io, self.now_ms), server)
        add_ReplicationServicer_to_server(ReplicationService(self.replica_io, self.replication_tracer, self.now_ms,
                                                             self.txn_marker_writer), server)
        try:
            port = server.add_insecure_port(f"{listener.bind_host}:{listener.port}")
        except RuntimeError as exc:
            raise StartupError(f"listener {listener} cannot bind: {exc}") from None
        if port == 0:
            raise StartupError(f"listener {listener} cannot bind {listener.bind_host}:{listener.port}")
        await server.start()
        self._grpc_server = server

    async def _start_client_listeners(self) -> None:
        try:
            await self.socket_server.start()
        except OSError as exc:
            raise StartupError(f"a client listener ({self.config.listeners}) cannot bind: {exc.strerror}") from None

    async def _on_live_session(self, step, what: str):
        timeout_ms = self.config.zookeeper_connection_timeout_ms or self.config.zookeeper_session_timeout_ms
        try:
            return await on_a_live_session(self.zk, step, what, timeout_ms / 1000,
                                           say=lambda msg: log.warning("%s", msg))
        except SessionNeverReturnedError as exc:
            raise StartupError(str(exc)) from None

    async def _register(self) -> None:
        # a previous process of this broker may still hold the registration until its session expires
        epoch = await self._on_live_session(
            lambda: register_broker(self.zk, self.broker_id, self._registration,
                                    wait_for_stale_s=self.config.zookeeper_session_timeout_ms / 1000 + 1,
                                    say=lambda msg: log.warning("%s", msg)),
            f"registering broker {self.broker_id}")
        self.replica_manager.broker_epoch = epoch
        self.trace.emit(te.BrokerRegistered, broker_epoch=epoch, endpoints=self._registration.endpoints)

    def metrics_snapshot(self) -> BrokerSnapshot:
        """What /metrics reports, copied on the event loop (``on_loop`` calls it there for the scrape thread)."""
        return snapshot_broker(
            broker_id=self.broker_id, replica_manager=self.replica_manager, replica_io=self.replica_io,
            min_insync_replicas=lambda partition: partition.log.config.min_insync_replicas,
            isr_stats=self.isr_manager.stats, socket_server=self.socket_server, metadata_cache=self.metadata_cache,
            controller=self.controller, fetchers=self.fetcher_manager,
            purgatories=[self.replica_io.produce_purgatory, self.replica_io.fetch_purgatory,
                         self.replica_io.delete_records_purgatory,
                         self.group_manager.coordinator.heartbeat_purgatory,
                         self.group_manager.coordinator.join_purgatory],
            cleaner=self.log_service.cleaner)

    # --- ZooKeeper session --------------------------------------------------------------------------------

    def _on_session_event(self, event: SessionEvent) -> None:
        self.trace.emit(te.SessionStateChanged, state=event.value, session_id=self.zk.session_id)
        if self._stopping.is_set():
            return
        if event is SessionEvent.EXPIRED:
            log.warning("broker %d: ZooKeeper session expired", self.broker_id)
            if self.controller is not None:
                self.controller.expire()
        elif event is SessionEvent.NEW_SESSION and self._registration_wanted:
            task = asyncio.get_running_loop().create_task(self._reregister())
            self._reregistrations.add(task)
            task.add_done_callback(self._reregistrations.discard)

    async def _reregister(self) -> None:
        try:
            await self._register()
        except Exception:
            log.exception("broker %d could not re-register after session expiry", self.broker_id)
            return
        if self.controller is not None:
            self.controller.put(controller_events.RegisterBrokerAndReelect())

    # --- replica roles ------------------------------------------------------------------------------------

    def _log_start_moved(self, partition: Partition, role: str) -> None:
        """DeleteRecords moved a leader's log start, or a follower's followed its leader's."""
        try:
            deleted = self.log_service.log_start_moved(partition.log, partition.high_watermark)
        except KafkaStorageError:
            deleted = 0  # on the log dir failure channel already; its handler takes the directory offline
        self.trace.emit(te.LogStartOffsetIncremented, topic=partition.topic, partition=partition.partition,
                        log_start_offset=partition.log.log_start_offset, log_end_offset=partition.log_end_offset,
                        high_watermark=partition.high_watermark, role=role,
                        reason="delete_records" if role == "leader" else "leader_log_start",
                        segments_deleted=deleted)

    def _trace_high_watermark(self, partition: Partition, role: str) -> None:
        self.trace.emit(te.HighWatermarkUpdated, topic=partition.topic, partition=partition.partition,
                        high_watermark=partition.high_watermark, log_end_offset=partition.log_end_offset, role=role)

    async def _expire_isr_members(self) -> None:
        period = self.config.replica_lag_time_max_ms / 2 / 1000
        while True:
            await asyncio.sleep(period)
            try:
                self.replica_io.shrink_isrs(self.now_ms())
            except Exception:
                log.exception("ISR expiration check failed")

    def trace_produce(self, statuses: dict, acks: int) -> None:
        for (topic, partition), status in statuses.items():
            appended = status.error == ErrorCode.none and status.required_offset >= 0
            self.trace.emit(te.ProduceAcknowledged, topic=topic, partition=partition, acks=acks,
                            error=status.error.name, base_offset=status.base_offset if appended else -1,
                            end_offset=status.required_offset if appended else -1)

    # --- log dir failure ----------------------------------------------------------------------------------

    def _on_offline_log_dir(self, log_dir: Path, reason: str) -> None:
        # Told synchronously from deep inside an append; Kafka's LogDirFailureHandler thread takes the directory
        # from a queue, and so does this task, after the failed request has been answered.
        if not self._logs_loaded:
            return  # a failure while loading the logs fails the start-up itself, with its own message
        if self._log_dir_failure_handler is None:
            self._log_dir_failure_handler = self.loop.create_task(self._handle_log_dir_failure(log_dir, reason),
                                                                  name="log-dir-failure-handler")

    async def _handle_log_dir_failure(self, log_dir: Path, reason: str) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure, then LogManager.handleLogDirFailure: stop fetching for and
        serving every replica in the directory (KAFKA_STORAGE_ERROR from now on), stop using its logs, and, with
        no log directory left, halt: no controlled shutdown, no flush, no clean shutdown marker. The ZooKeeper
        registration goes when the session does, and the controller elects new leaders from the other ISR
        members; the logs are recovered when the broker starts again."""
        # logs loaded at start-up but not yet named in a LeaderAndIsr are in the log manager only
        offline = sorted({tp for tp, partition in self.replica_io.hosted.items()
                          if partition.log.directory.parent == log_dir}
                         | {tp for tp, opened in self.log_service.manager.logs.items()
                            if opened.directory.parent == log_dir})
        for tp in offline:
            self.fetcher_manager.remove(tp)
        self.replica_io.mark_offline(offline)
        names = [f"{topic}-{partition}" for topic, partition in offline]
        log.warning("Broker %d stopped fetcher for partitions %s because they are in the failed log directory %s.",
                    self.broker_id, ",".join(names), log_dir)
        self.trace.emit(te.LogDirFailed, log_dir=str(log_dir), error=reason, offline_partitions=names)
        self.log_service.manager.handle_log_dir_failure(log_dir)
        if self.log_service.manager.live_log_dirs:
            # Kafka would keep serving the other directories and tell the controller through
            # /log_dir_event_notification; kafkasim's controller does not act on that, so without it the
            # replicas here would keep their leadership while refusing every request.
            log.critical("Shutdown broker because the log dir %s has failed and kafkasim's controller does not "
                         "handle log dir events (%s)", log_dir, reason)
        else:
            log.critical("Shutdown broker because all log dirs in %s have failed (%s)",
                         ", ".join(map(str, self.log_service.manager.log_dirs)), reason)
        # Kafka halts from its own thread while request threads go on answering; let the KAFKA_STORAGE_ERROR
        # answers already queued reach their clients before the process ends.
        await asyncio.sleep(LOG_DIR_FAILURE_HALT_GRACE_S)
        self.halt(1)

    def halt(self, status: int) -> None:
        """Exit.halt: end the process now. Only the trace and the log are flushed: they tell what happened, and
        `kafkasim up` keeps both outside the log directory (a trace inside a full one just loses its tail)."""
        self.replication_tracer.flush(everything=True)
        self.trace.emit(te.BrokerStopped, clean=False)
        self.trace.close()
        end_process(status)

    # --- stop ---------------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stopping.set()

    async def wait_for_stop(self) -> None:
        await self._stopping.wait()

    async def controlled_shutdown(self) -> bool:
        """Kafka's KafkaServer.controlledShutdown: ask the controller to move this broker's leaderships away, up to
        controlled.shutdown.max.retries times. An attempt succeeds when the answer has no error and no partition
        left; a partition remains when this broker is its only live ISR member (the controller's election fails
        and leaves it led here). After every failed attempt the broker waits controlled.shutdown.retry.backoff.ms,
        as Kafka does (after the last one too); out of attempts it goes on with an unclean shutdown, and the
        controller handles it as a failed broker."""
        config = self.config
        attempts = config.controlled_shutdown_max_retries
        for attempt in range(1, attempts + 1):
            self.trace.emit(te.ControlledShutdownStep, phase="requested", detail=f"attempt {attempt} of {attempts}")
            controller_id, error, remaining, detail = await self._send_controlled_shutdown()
            succeeded = error == ErrorCode.none.value and not remaining
            self.trace.emit(te.ControlledShutdownAttempt, attempt=attempt, max_attempts=attempts,
                            controller=controller_id, error_code=error,
                            remaining=[f"{topic}-{partition}" for topic, partition in remaining],
                            backoff_ms=0 if succeeded else config.controlled_shutdown_retry_backoff_ms,
                            detail=detail)
            if succeeded:
                log.info("Controlled shutdown succeeded")
                self.trace.emit(te.ControlledShutdownStep, phase="succeeded")
                return True
            log.info("Remaining partitions to move: %s",
                     ", ".join(f"{topic}-{partition}" for topic, partition in remaining) or "none")
            log.info("Error from controller: %s (%s)", error, detail)
            await asyncio.sleep(config.controlled_shutdown_retry_backoff_ms / 1000)
            if attempt < attempts:
                log.warning("Retrying controlled shutdown after the previous attempt failed...")
        log.warning("Proceeding to do an unclean shutdown as all the controlled shutdown attempts failed")
        self.trace.emit(te.ControlledShutdownStep, phase="failed", detail=f"after {attempts} attempts")
        return False

    async def _send_controlled_shutdown(self) -> tuple[int, int, list[tuple[str, int]], str]:
        """One attempt: (controller id or -1, error code, the partitions still led here, what happened)."""
        try:
            data, _ = await self.zk.get(ControllerZNode.path)
            controller_id = ControllerZNode.decode(data).brokerid
            raw, _ = await self.zk.get(BrokerIdZNode.path(controller_id))
            registration = BrokerIdZNode.decode(controller_id, raw)
        except Exception as exc:  # no controller right now, it just moved, or its znode is unreadable
            return -1, ErrorCode.not_controller.value, [], f"no controller reachable ({exc!r})"
        endpoint = registration.endpoint(self.config.inter_broker_listener_name)
        if endpoint is None:
            return (controller_id, ErrorCode.not_controller.value, [],
                    f"controller {controller_id} has no cluster endpoint")
        async with grpc.aio.insecure_channel(f"{endpoint[0]}:{endpoint[1]}") as channel:
            try:
                response = await ControlPlaneStub(channel).ControlledShutdown(
                    pb.ControlledShutdownRequest(broker_id=self.broker_id,
                                                 broker_epoch=self.replica_manager.broker_epoch),
                    timeout=self.config.controller_socket_timeout_ms / 1000)
            except grpc.aio.AioRpcError as exc:
                return (controller_id, ErrorCode.network_exception.value, [],
                        f"controller {controller_id}: {exc.code().name}")
        remaining = [(tp.topic, tp.partition) for tp in response.remaining_partitions]
        return (controller_id, response.error_code, remaining,
                f"controller {controller_id} answered {response.error_code}, {len(remaining)} partitions still led "
                f"here")

    async def shutdown(self) -> None:
        self._stopping.set()
        self.role_changes.stopping = True
        clean = True
        if self.controller is not None and self.config.controlled_shutdown_enable:
            clean = await self.controlled_shutdown()
        # Every later step that waits on a peer is bounded; this catches what is not (a blocked loop, a stuck
        # flush): the broker writes every thread's stack to its log and exits rather than hang until killed.
        faulthandler.dump_traceback_later(SHUTDOWN_DEADLINE_S, exit=True)
        try:
            await self.config_changes.stop()
            if self.controller is not None:
                await _bounded("stopping the controller", self.controller.stop())
            await _bounded("closing client connections", self.socket_server.stop())
            # no control request may arrive once the logs and ZooKeeper are closed
            if self._grpc_server is not None:
                await _bounded("stopping the cluster-plane server", self._grpc_server.stop(grace=0.5))
            for timer in self._timers:
                timer.close()
            self.group_manager.close()
            await _bounded("stopping the transaction marker channel", self.txn_manager.close())
            if self._isr_expiration is not None:
                self._isr_expiration.cancel()
            if self._trace_flusher is not None:
                self._trace_flusher.cancel()
            await _bounded("closing replica fetchers", self.fetcher_manager.close())
            await _bounded("stopping the ISR change writer", self.isr_manager.stop())
            # The ZooKeeper session closes (kazoo's threads, a round trip) while the logs flush and checkpoint on
            # the loop: the two are independent.
            # So does the metrics server's stop, in a thread: it waits for the HTTP thread's next poll (up to 0.5 s).
            closing = [asyncio.ensure_future(_bounded("closing the ZooKeeper session", self.zk.close()))]
            if self.metrics_server is not None:
                closing.append(asyncio.ensure_future(
                    _bounded("stopping the metrics server", asyncio.to_thread(self.metrics_server.stop))))
            await self.log_service.shutdown()  # never cut short: it flushes and writes the clean-shutdown marker
            await asyncio.gather(*closing)
            self.replication_tracer.flush(everything=True)
            self.trace.emit(te.BrokerStopped, clean=clean)
            self.trace.close()
        finally:
            faulthandler.cancel_dump_traceback_later()


SHUTDOWN_STEP_TIMEOUT_S = 5.0
SHUTDOWN_DEADLINE_S = 45.0  # above the bounded steps together; `kafkasim down` waits 60 s before SIGKILL
LOG_DIR_FAILURE_HALT_GRACE_S = 0.2


async def _bounded(step: str, work: Awaitable[object]) -> None:
    """A shutdown step that talks to other processes may wait on a peer that is gone; a broker asked to stop
    must still stop (and still flush its logs), so such a step is cut short and named in the log."""
    try:
        await asyncio.wait_for(work, SHUTDOWN_STEP_TIMEOUT_S)
    except TimeoutError:
        log.warning("shutdown: %s took more than %.0f s; going on without it", step, SHUTDOWN_STEP_TIMEOUT_S)


def end_process(status: int) -> None:
    """os._exit once the log and stdio are flushed."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


async def run_broker(config: KafkaConfig) -> int:
    """The broker process's life; it ends the process itself once stopped."""
    keep_freed_memory()
    server = KafkaServer(config)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, server.request_stop)
    try:
        await server.startup()
    except LogDirectoryError as exc:
        server.trace.close()
        raise StartupError(str(exc)) from None
    except Exception:
        server.trace.close()
        raise
    await server.wait_for_stop()
    log.info("broker %d shutting down", config.broker_id)
    await server.shutdown()
    # Everything is flushed, checkpointed and closed, the ZooKeeper session and the trace too. The interpreter's
    # own teardown (asyncio's, the threads', gRPC's core, the objects of a thousand partitions) took most of a
    # second more at 1000 partitions, while the process still looked alive to whoever waits for it to exit.
    log.info("broker %d stopped", config.broker_id)
    end_process(0)
    return 0
