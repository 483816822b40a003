"""Writes a leader's ISR changes to ZooKeeper the Kafka 2.x way: a compare-and-set of the partition state
znode on the version the leader last saw, then, batched, an /isr_change_notification/isr_change_<seq>
znode that tells the controller to refresh and broadcast the new ISR.

The proposals made in one turn of the loop (a fetch answer's expands, an isr-expiration pass's shrinks, a
thousand after a broker's restart or a leadership move) are written together: multi-ops of up to
``CHUNK`` compare-and-sets, a few in flight, as the controller writes its own (``controller/zk_writes.py``).
A multi is all or nothing: when one of its partitions lost a version race, each is written again on its own,
so only that one is refused, re-read and left to the controller."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NoNodeError

from broker.metrics.topic_stats import IsrStats
from broker.replication.partition import IsrProposal
from broker.replication.replica_manager import ReplicaIO, TopicPartition
from broker.replication.replication_tracing import replica_lags
from traces import events as te
from traces.writer import TraceWriter
from zk.client import MultiOpError, SetDataOp, ZkClient, ZnodeStat
from zk.znodes import (
    IsrChangeNotificationZNode,
    LeaderIsrAndControllerEpoch,
    TopicPartitionStateZNode,
    ZNodeDecodeError,
)

log = logging.getLogger(__name__)
CHUNK = 100        # compare-and-sets per multi-op
MAX_IN_FLIGHT = 5  # multi-ops at once


class IsrChangeManager:
    def __init__(self, zk: ZkClient, replica_io: ReplicaIO, trace: TraceWriter, now_ms: Callable[[], int], *,
                 blackout_ms: int, interval_ms: int) -> None:
        self.zk = zk
        self.replica_io = replica_io
        self.trace = trace
        self.now_ms = now_ms
        self.blackout_ms = blackout_ms
        self.interval_ms = interval_ms
        self.stats = IsrStats()
        self._changed: set[TopicPartition] = set()
        self._last_change_ms = 0
        self._last_propagation_ms = 0
        self._tasks: set[asyncio.Task] = set()
        self._propagator: asyncio.Task | None = None
        self._queued: list[IsrProposal] = []
        self._writer: asyncio.Task | None = None
        self.multi_writes = 0  # multi-ops written (tests, logs)

    def start(self) -> None:
        self._last_propagation_ms = self.now_ms()
        self._propagator = asyncio.get_running_loop().create_task(self._propagate_forever(), name="isr-propagation")

    async def stop(self) -> None:
        for task in [*self._tasks, self._propagator]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def submit(self, proposal: IsrProposal) -> None:
        self._queued.append(proposal)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_queued(), name="isr-writes")
            self._tasks.add(self._writer)
            self._writer.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Until every proposal submitted so far is written or refused."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write_queued(self) -> None:
        await asyncio.sleep(0)  # the rest of this turn's proposals join the batch
        limit = asyncio.Semaphore(MAX_IN_FLIGHT)

        async def chunk(proposals: list[IsrProposal]) -> None:
            async with limit:
                await self._write_chunk(proposals)

        while self._queued:
            queued, self._queued = self._queued, []
            batch: dict[tuple[str, int], IsrProposal] = {}
            for proposal in queued:
                tp = (proposal.topic, proposal.partition)
                if tp in batch:
                    self._queued.append(proposal)  # one znode twice in a multi cannot be: the next batch
                else:
                    batch[tp] = proposal
            proposals = list(batch.values())
            await asyncio.gather(*(chunk(proposals[i:i + CHUNK]) for i in range(0, len(proposals), CHUNK)))

    async def _write_chunk(self, proposals: list[IsrProposal]) -> None:
        if len(proposals) == 1:
            await self._write(proposals[0])
            return
        ops = [SetDataOp(TopicPartitionStateZNode.path(p.topic, p.partition),
                         TopicPartitionStateZNode.encode(_state(p)), p.zk_version) for p in proposals]
        try:
            stats = await self.zk.multi(ops)
        except MultiOpError as exc:
            if isinstance(exc.cause, (BadVersionError, NoNodeError)):
                # one of them lost a race (the controller wrote first): each on its own, so only it is refused
                await asyncio.gather(*(self._write(p) for p in proposals))
                return
            self._all_failed(proposals, exc.cause)
            return
        except Exception as exc:
            self._all_failed(proposals, exc)
            return
        self.multi_writes += 1
        for proposal, stat in zip(proposals, stats, strict=True):
            assert isinstance(stat, ZnodeStat)
            self._committed(proposal, stat)

    def _all_failed(self, proposals: list[IsrProposal], exc: BaseException) -> None:
        log.error("ISR changes of %d partitions failed (%r); will retry on the next check", len(proposals), exc)
        for proposal in proposals:
            self._partition_failed(proposal)

    async def _write(self, proposal: IsrProposal) -> None:
        tp = (proposal.topic, proposal.partition)
        path = TopicPartitionStateZNode.path(*tp)
        try:
            stat = await self.zk.set(path, TopicPartitionStateZNode.encode(_state(proposal)), proposal.zk_version)
        except (BadVersionError, NoNodeError):
            self.stats.failed_updates += 1
            await self._obey_zookeeper(proposal)
            return
        except Exception:
            log.exception("ISR change of %s-%d to %s failed; will retry on the next check", *tp, list(proposal.isr))
            self._partition_failed(proposal)
            return
        self._committed(proposal, stat)

    def _committed(self, proposal: IsrProposal, stat: ZnodeStat) -> None:
        tp = (proposal.topic, proposal.partition)
        partition = self.replica_io.hosted.get(tp)
        if partition is None:
            return
        old_isr = list(partition.isr)
        changed = sorted(set(old_isr) ^ set(proposal.isr))
        lags = replica_lags(partition, changed, self.now_ms())
        moved = partition.isr_change_committed(proposal, stat.version, self.now_ms())
        kind = "expand" if len(proposal.isr) > len(old_isr) else "shrink"
        if partition.isr == proposal.isr:  # Kafka marks IsrShrinksPerSec / IsrExpandsPerSec once the ISR is ours
            if kind == "expand":
                self.stats.expands += 1
            else:
                self.stats.shrinks += 1
        log.info("%s-%d: ISR %s -> %s (%s, zkVersion %d)", *tp, old_isr, list(proposal.isr), kind, stat.version)
        reason = (f"not caught up for more than replica.lag.time.max.ms={partition.replica_lag_time_max_ms}"
                  if kind == "shrink" else "reached the high watermark and the leader epoch's start offset")
        self.trace.emit(te.IsrChanged, topic=tp[0], partition=tp[1], kind=kind, old_isr=old_isr,
                        new_isr=list(proposal.isr), leader_epoch=proposal.leader_epoch, zk_version=stat.version,
                        reason=reason, lags=lags)
        if moved:
            self.replica_io.wake(tp, True)
        self._changed.add(tp)
        self._last_change_ms = self.now_ms()

    def _partition_failed(self, proposal: IsrProposal) -> None:
        partition = self.replica_io.hosted.get((proposal.topic, proposal.partition))
        if partition is not None:
            partition.isr_change_failed(proposal)

    async def _obey_zookeeper(self, proposal: IsrProposal) -> None:
        """Our zkVersion is stale: the controller changed the state. Re-read it; if we still lead in the same
        epoch, take its ISR and version; otherwise a LeaderAndIsr is on its way and decides."""
        self._partition_failed(proposal)
        tp = (proposal.topic, proposal.partition)
        data, stat = await self.zk.get_or_none(TopicPartitionStateZNode.path(*tp))
        partition = self.replica_io.hosted.get(tp)
        if data is None or partition is None:
            return
        try:
            current = TopicPartitionStateZNode.decode(*tp, data)
        except ZNodeDecodeError as exc:
            log.error("%s", exc)
            return
        if (current.leader, current.leader_epoch) == (partition.local_broker_id, partition.leader_epoch):
            partition.isr, partition.zk_version = tuple(current.isr), stat.version
        log.info("%s-%d: ISR change refused (stale zkVersion %d); ZooKeeper has %s at version %d", *tp,
                 proposal.zk_version, current.isr, stat.version)

    async def _propagate_forever(self) -> None:
        period = max(0.05, min(2.5, self.blackout_ms / 1000))
        while True:
            await asyncio.sleep(period)
            try:
                await self.maybe_propagate()
            except Exception:
                log.exception("ISR change notification failed; retrying")

    async def maybe_propagate(self) -> None:
        now = self.now_ms()
        if not self._changed:
            return
        if now - self._last_change_ms < self.blackout_ms and now - self._last_propagation_ms < self.interval_ms:
            return
        changed, self._changed = sorted(self._changed), set()
        await self.zk.create(IsrChangeNotificationZNode.prefix, IsrChangeNotificationZNode.encode(changed),
                             sequence=True)
        self._last_propagation_ms = now


def _state(proposal: IsrProposal) -> LeaderIsrAndControllerEpoch:
    return LeaderIsrAndControllerEpoch(leader=proposal.leader, leader_epoch=proposal.leader_epoch,
                                       isr=list(proposal.isr), controller_epoch=proposal.controller_epoch)
