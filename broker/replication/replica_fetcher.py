"""Followers: one fetcher per leader broker (Kafka's ReplicaFetcherThread, one per source broker), an
asyncio task that first truncates newly followed partitions by the configured rule, then long-polls the
leader over the cluster plane, one fetch at a time on a stream it keeps open, and appends what comes back
byte for byte."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import grpc
from kio.schema.errors import ErrorCode

from broker.log.errors import KafkaLogError, KafkaStorageError
from broker.replication.fetch_session import FetchPosition, FollowerFetchSession
from broker.replication.partition import Partition
from broker.replication.truncation import TruncationRule, truncation_step
from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import ReplicationStub
from traces import events as te
from traces.writer import TraceWriter

log = logging.getLogger(__name__)
# HTTP/2 starts each stream with a 64 KiB window and 16 KiB frames: a 1 MiB fetch response then waits for
# many WINDOW_UPDATE round trips through gRPC's poller. Open windows and frames to a whole fetch response.
REPLICATION_CHANNEL_OPTIONS = [("grpc.http2.lookahead_bytes", 16 << 20), ("grpc.http2.max_frame_size", 4 << 20)]

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class FetcherSettings:
    broker_id: int
    max_wait_ms: int
    min_bytes: int
    partition_max_bytes: int
    response_max_bytes: int
    backoff_ms: int
    socket_timeout_ms: int
    truncation_rule: TruncationRule


@dataclass
class PartitionFetchState:
    partition: Partition
    leader_epoch: int
    fetch_offset: int
    truncating: bool = True
    delayed_until: float = 0.0
    # Kafka's FetcherLagMetrics: the leader's high watermark minus our LEO after the last fetch (0 until then)
    lag: int = 0


class ReplicaFetcher:
    def __init__(self, leader_id: int, address: str, settings: FetcherSettings, trace: TraceWriter,
                 on_follower_progress: Callable[[Partition], None],
                 on_log_start_moved: Callable[[Partition], None] = lambda partition: None) -> None:
        self.leader_id = leader_id
        self.address = address
        self.settings = settings
        self.trace = trace
        self._on_progress = on_follower_progress
        self._on_log_start_moved = on_log_start_moved
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._wake = asyncio.Event()
        self._channel = grpc.aio.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 2 * settings.response_max_bytes + (1 << 20)),
                              *REPLICATION_CHANNEL_OPTIONS])
        self._stub = ReplicationStub(self._channel)
        self._stream: grpc.aio.StreamStreamCall | None = None
        self.session = FollowerFetchSession()  # one per stream: a new stream opens a new, full session
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{leader_id}")

    def add(self, partition: Partition) -> None:
        self.partitions[partition.topic_partition] = PartitionFetchState(
            partition, partition.leader_epoch, partition.high_watermark)
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._drop_stream()
        await self._channel.close()

    async def _run(self) -> None:
        while True:
            try:
                if any(s.truncating for s in self.partitions.values()):
                    await self._truncate()
                await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except (grpc.aio.AioRpcError, TimeoutError, ConnectionError) as exc:
                reason = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else repr(exc)
                log.info("fetch from leader %d at %s failed: %s; retrying in %d ms", self.leader_id, self.address,
                         reason, self.settings.backoff_ms)
                await asyncio.sleep(self.settings.backoff_ms / 1000)
            except KafkaStorageError as exc:
                # a truncation hit the failed disk; the log dir failure handler removes these partitions
                log.warning("replica fetcher for leader %d: %s", self.leader_id, exc)
                await asyncio.sleep(self.settings.backoff_ms / 1000)
            except Exception:
                log.exception("replica fetcher for leader %d failed; retrying", self.leader_id)
                await asyncio.sleep(self.settings.backoff_ms / 1000)

    # --- truncation -------------------------------------------------------------------------------

    async def _truncate(self) -> None:
        rule = self.settings.truncation_rule
        asking: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        for tp, state in list(self.partitions.items()):
            if not state.truncating:
                continue
            latest = state.partition.log.leader_epoch_cache.latest_epoch
            if rule is TruncationRule.HIGH_WATERMARK or latest is None:
                self._truncate_to(state, state.partition.high_watermark, rule)
            else:
                asking[tp] = (state, latest)
        if not asking:
            return
        request = pb.OffsetsForLeaderEpochRequest(replica_id=self.settings.broker_id, partitions=[
            pb.EpochRequestPartition(topic=tp[0], partition=tp[1], current_leader_epoch=state.leader_epoch,
                                     leader_epoch=epoch)
            for tp, (state, epoch) in asking.items()])
        response = await self._stub.OffsetsForLeaderEpoch(request, timeout=self.settings.socket_timeout_ms / 1000)
        for answer in response.partitions:
            tp = (answer.topic, answer.partition)
            state = asking[tp][0] if tp in asking else None
            if state is None or self.partitions.get(tp) is not state:
                continue  # removed or re-added with a new epoch while we asked
            if answer.error_code != ErrorCode.none.value:
                self._on_error(state, answer.error_code)
                continue
            partition = state.partition
            step = truncation_step(rule, leader_epoch=answer.leader_epoch, leader_end_offset=answer.end_offset,
                                   high_watermark=partition.high_watermark, log_end_offset=partition.log_end_offset,
                                   local_end_offset_for=partition.log.leader_epoch_cache.end_offset_for)
            self._truncate_to(state, step.offset, rule, done=step.done)

    def _truncate_to(self, state: PartitionFetchState, offset: int, rule: TruncationRule, done: bool = True) -> None:
        partition = state.partition
        before = partition.log_end_offset
        if offset < before:
            size_before, high_watermark_before = partition.log.size_in_bytes, partition.high_watermark
            partition.truncate_to(offset)
            self._high_watermark_may_have_moved(partition, high_watermark_before)
            log.info("%s-%d: truncated from %d to %d (%s) before following leader %d in epoch %d",
                     partition.topic, partition.partition, before, partition.log_end_offset, rule.value,
                     self.leader_id, state.leader_epoch)
            self.trace.emit(te.FollowerTruncated, topic=partition.topic, partition=partition.partition,
                            rule=rule.value, leader=self.leader_id, leader_epoch=state.leader_epoch,
                            from_offset=before, to_offset=partition.log_end_offset,
                            bytes_dropped=size_before - partition.log.size_in_bytes)
        # still walking back (KIP-279): ask again about our new latest epoch, unless the cache has none
        state.truncating = not done and partition.log.leader_epoch_cache.latest_epoch is not None
        state.fetch_offset = partition.log_end_offset

    # --- fetching ---------------------------------------------------------------------------------

    async def _fetch_once(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        max_bytes = self.settings.partition_max_bytes
        # one pass over the followed partitions: which are ready, and where each stands
        ready: dict[TopicPartition, PartitionFetchState] = {}
        wanted: dict[TopicPartition, FetchPosition] = {}
        for tp, s in self.partitions.items():
            if s.truncating or s.delayed_until > now:
                continue
            ready[tp] = s
            partition = s.partition
            wanted[tp] = FetchPosition(s.fetch_offset, partition.log.log_start_offset, s.leader_epoch,
                                       partition.high_watermark, max_bytes)
        if not ready:
            # Nothing to fetch (leadership moved, or backing off): hold no stream open on the leader, which
            # would otherwise have to cancel it when it stops.
            self._drop_stream()
            self._wake.clear()
            next_due = min((s.delayed_until for s in self.partitions.values() if not s.truncating), default=None)
            wait = self.settings.backoff_ms / 1000 if next_due is None else max(0.0, next_due - now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(wait, 0.01))
            return
        session = self.session
        if self._stream is None:
            session.reset()
        # the session names only what changed since the leader last heard of it, and what left it (forgotten)
        asked = session.build(wanted)
        request = pb.ReplicaFetchRequest(
            replica_id=self.settings.broker_id, max_wait_ms=self.settings.max_wait_ms,
            min_bytes=self.settings.min_bytes, max_bytes=self.settings.response_max_bytes,
            session_id=asked.session_id, session_epoch=asked.session_epoch,
            partitions=[pb.ReplicaFetchPartition(
                topic=tp[0], partition=tp[1], fetch_offset=p.fetch_offset, log_start_offset=p.log_start_offset,
                current_leader_epoch=p.current_leader_epoch, partition_max_bytes=p.partition_max_bytes,
                high_watermark=p.high_watermark)
                for tp, p in asked.partitions.items()],
            forgotten=[pb.TopicPartition(topic=tp[0], partition=tp[1]) for tp in asked.forgotten])
        try:
            response = await self._exchange(request)
        except BaseException:
            session.reset()
            raise
        session.answered(response.error_code, response.session_id)
        if response.error_code != ErrorCode.none.value:
            log.info("fetch session with leader %d refused (error %d); starting a full one", self.leader_id,
                     response.error_code)
            return
        # a partition left out of the answer had nothing new: no records, the same HW and log start
        for data in response.partitions:
            tp = (data.topic, data.partition)
            state = self.partitions.get(tp)
            if state is None or state is not ready.get(tp) or state.fetch_offset != wanted[tp].fetch_offset:
                continue  # the partition moved on while the fetch was in flight
            self._process(state, data)

    async def _exchange(self, request: pb.ReplicaFetchRequest) -> pb.ReplicaFetchResponse:
        """One fetch on the stream to the leader, opened on first use. Any failure drops the stream, and the
        next fetch opens a fresh one."""
        if self._stream is None:
            self._stream = self._stub.Fetch()
        stream = self._stream
        timeout = (self.settings.max_wait_ms + self.settings.socket_timeout_ms) / 1000
        try:
            await stream.write(request)
            response = await asyncio.wait_for(stream.read(), timeout)
        except BaseException:
            self._drop_stream()
            raise
        if response is grpc.aio.EOF:
            self._drop_stream()
            raise ConnectionError(f"leader {self.leader_id} ended the fetch stream")
        return response

    def _drop_stream(self) -> None:
        self.session.reset()
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    def _process(self, state: PartitionFetchState, data: pb.ReplicaFetchPartitionData) -> None:
        partition = state.partition
        code = data.error_code
        if code == ErrorCode.none.value:
            before_hw, before_start = partition.high_watermark, partition.log.log_start_offset
            try:
                if data.records:
                    partition.append_records_to_follower(data.records, data.high_watermark, data.log_start_offset)
                else:
                    partition.update_follower_high_watermark(data.high_watermark, data.log_start_offset)
            except KafkaLogError as exc:
                log.warning("%s-%d: cannot append what leader %d sent: %s", partition.topic, partition.partition,
                            self.leader_id, exc)
                state.delayed_until = asyncio.get_running_loop().time() + self.settings.backoff_ms / 1000
                return
            state.fetch_offset = partition.log_end_offset
            state.lag = max(0, data.high_watermark - partition.log_end_offset)
            if partition.high_watermark != before_hw or data.records:
                self._on_progress(partition)
            if partition.log.log_start_offset != before_start:
                # the leader's log start moved (DeleteRecords): ours followed, the segments below it go
                self._on_log_start_moved(partition)
            return
        if code == ErrorCode.offset_out_of_range.value:
            # Our LEO is outside the leader's log: above its end (truncate to it) or below its start (restart there).
            if data.log_end_offset < partition.log_end_offset:
                self._truncate_to(state, data.log_end_offset, self.settings.truncation_rule)
            else:
                high_watermark_before = partition.high_watermark
                partition.truncate_fully_and_start_at(data.log_start_offset)
                self._high_watermark_may_have_moved(partition, high_watermark_before)
                state.fetch_offset = partition.log_end_offset
            return
        self._on_error(state, code)

    def _high_watermark_may_have_moved(self, partition: Partition, before: int) -> None:
        """A truncation below the HW lowers it (one past the log start raises it): told as progress is, so the HW
        checkpoint, which skips collecting while no HW moved, writes the new one, and the trace shows it."""
        if partition.high_watermark != before:
            self._on_progress(partition)

    def _on_error(self, state: PartitionFetchState, code: int) -> None:
        partition = state.partition
        if code == ErrorCode.fenced_leader_epoch.value:
            # The leader is in a newer epoch than we were told: wait for the controller's LeaderAndIsr.
            log.warning("%s-%d: fenced by leader %d (our epoch %d is old); waiting for LeaderAndIsr",
                        partition.topic, partition.partition, self.leader_id, state.leader_epoch)
            self.remove(partition.topic_partition)
            return
        state.delayed_until = asyncio.get_running_loop().time() + self.settings.backoff_ms / 1000


class ReplicaFetcherManager:
    """Keeps one fetcher per leader broker, adding and removing partitions as LeaderAndIsr decides."""

    def __init__(self, settings: FetcherSettings, trace: TraceWriter,
                 address_of: Callable[[int], str | None], on_follower_progress: Callable[[Partition], None],
                 on_log_start_moved: Callable[[Partition], None] = lambda partition: None) -> None:
        self.settings = settings
        self.trace = trace
        self._address_of = address_of
        self._on_progress = on_follower_progress
        self._on_log_start_moved = on_log_start_moved
        self.fetchers: dict[int, ReplicaFetcher] = {}

    def set_truncation_rule(self, rule: TruncationRule) -> None:
        """kafkasim.replica.truncation.rule changed dynamically: every fetcher uses it at its next truncation."""
        self.settings = replace(self.settings, truncation_rule=rule)
        for fetcher in self.fetchers.values():
            fetcher.settings = replace(fetcher.settings, truncation_rule=rule)

    def add(self, partition: Partition) -> bool:
        self.remove(partition.topic_partition)
        leader = partition.leader
        if leader < 0:
            return False  # offline partition: nobody to fetch from until the controller elects a leader
        address = self._address_of(leader)
        if address is None:
            log.warning("%s-%d: leader %d has no known cluster endpoint; not fetching", partition.topic,
                        partition.partition, leader)
            return False
        fetcher = self.fetchers.get(leader)
        if fetcher is None or fetcher.address != address:
            if fetcher is not None:
                asyncio.get_running_loop().create_task(fetcher.close())
            fetcher = self.fetchers[leader] = ReplicaFetcher(leader, address, self.settings, self.trace,
                                                             self._on_progress, self._on_log_start_moved)
        fetcher.add(partition)
        return True

    def remove(self, tp: TopicPartition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(tp)

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        for fetcher in self.fetchers.values():
            if tp in fetcher.partitions:
                return fetcher.partitions[tp]
        return None

    async def close(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.close()
        self.fetchers = {}
