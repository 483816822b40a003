"""The controller's ZooKeeper writes, each fenced by the version of /controller_epoch.

Every write is a multi-op whose first op checks /controller_epoch's zkVersion: if another controller
has been elected since, the whole write fails and this controller learns it was deposed (Kafka 2.2+).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from controller.context import TopicPartition
from controller.state_change import ControllerMovedError, PartitionStateWrite
from zk.client import CheckOp, CreateOp, DeleteOp, MultiOpError, Op, SetDataOp, ZkClient, ZnodeStat
from zk.znodes import (
    ControllerEpochZNode,
    LeaderIsrAndControllerEpoch,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
    TopicPartitionZNode,
)


# Kafka's zookeeper.max.in.flight.requests: state writes are pipelined, this many at a time
MAX_IN_FLIGHT = 10
# Reads go further: ZooKeeper answers them from memory, and at ten at a time the controller's re-reads of every
# partition (failover, a dead broker's replicas) took seconds at 1000 partitions on a loaded machine.
MAX_READS_IN_FLIGHT = 100
# partition state znodes created or compare-and-set per multi-op
CREATE_CHUNK = 100


@dataclass
class WriteResults:
    written: dict[TopicPartition, int] = field(default_factory=dict)  # partition -> new zkVersion
    retry: list[TopicPartition] = field(default_factory=list)         # someone wrote first: re-read, decide again


class ControllerEpochFencedError(ControllerMovedError):
    """ZooKeeper refused a write because /controller_epoch is no longer at the zkVersion this controller was elected
    at (BADVERSION on the multi-op's check): another controller was elected since. Kafka raises
    ControllerMovedException("Controller epoch zkVersion check fails. Expected zkVersion = ...") here
    (KafkaZkClient.unwrapResponseWithControllerEpochCheck)."""

    def __init__(self, write: str, controller_epoch: int, expected_epoch_zk_version: int) -> None:
        super().__init__(f"controller epoch zkVersion check failed for {write}: expected zkVersion "
                         f"{expected_epoch_zk_version} (controller epoch {controller_epoch})")
        self.write = write
        self.controller_epoch = controller_epoch
        self.expected_epoch_zk_version = expected_epoch_zk_version


def describe_write(ops: list[Op]) -> str:
    """``create /brokers/topics/u/partitions/0 (+1 more)``: what a refused multi-op would have done."""
    verbs = {CreateOp: "create", SetDataOp: "set", DeleteOp: "delete", CheckOp: "check"}
    if not ops:
        return "nothing"
    first = f"{verbs[type(ops[0])]} {ops[0].path}"
    return first if len(ops) == 1 else f"{first} (+{len(ops) - 1} more)"


class FencedZkWriter:
    def __init__(self, zk: ZkClient, epoch_zk_version: int, controller_epoch: int = -1) -> None:
        self.zk = zk
        self.epoch_zk_version = epoch_zk_version
        self.controller_epoch = controller_epoch

    async def multi(self, ops: list[Op]) -> list[object]:
        try:
            results = await self.zk.multi([CheckOp(ControllerEpochZNode.path, self.epoch_zk_version), *ops])
        except MultiOpError as exc:
            if exc.failed_index == 0:
                raise ControllerEpochFencedError(describe_write(ops), self.controller_epoch,
                                                 self.epoch_zk_version) from None
            raise exc.cause from None
        return results[1:]

    async def set_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch,
                                  expected_zk_version: int) -> int:
        """Compare-and-set; returns the new zkVersion. Raises BadVersionError when someone wrote first."""
        path = TopicPartitionStateZNode.path(topic, partition)
        (stat,) = await self.multi([SetDataOp(path, TopicPartitionStateZNode.encode(state), expected_zk_version)])
        assert isinstance(stat, ZnodeStat)
        return stat.version

    async def create_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch) -> int:
        ops: list[Op] = []
        for parent in (TopicPartitionsZNode.path(topic), TopicPartitionZNode.path(topic, partition)):
            if await self.zk.exists(parent) is None:
                ops.append(CreateOp(parent))
        ops.append(CreateOp(TopicPartitionStateZNode.path(topic, partition), TopicPartitionStateZNode.encode(state)))
        await self.multi(ops)
        return 0

    async def write_partition_states(self, writes: list[PartitionStateWrite]) -> WriteResults:
        """Performs one state-machine step's writes, pipelined (each its own fenced multi-op, as Kafka's
        controller sends them). A write refused because the znode moved on (BADVERSION) or already
        exists is reported for retry; a deposed controller raises ControllerMovedError."""
        results = WriteResults()
        limit = asyncio.Semaphore(MAX_IN_FLIGHT)

        async def one(write: PartitionStateWrite) -> None:
            async with limit:
                try:
                    if write.expected_zk_version is None:
                        version = await self.create_partition_state(write.tp[0], write.tp[1], write.state)
                    else:
                        version = await self.set_partition_state(write.tp[0], write.tp[1], write.state,
                                                                 write.expected_zk_version)
                except (BadVersionError, NodeExistsError):
                    results.retry.append(write.tp)
                    return
                results.written[write.tp] = version

        async def chunk(creates: list[PartitionStateWrite]) -> None:
            async with limit:
                try:
                    await self.multi([op for w in creates for op in self._create_ops(w)])
                except (NodeExistsError, NoNodeError):
                    pass  # someone was first with one of them: each partition on its own below
                else:
                    results.written.update((w.tp, 0) for w in creates)
                    return
            await asyncio.gather(*(one(w) for w in creates))

        async def update_chunk(updates: list[PartitionStateWrite]) -> None:
            async with limit:
                try:
                    stats = await self.multi([SetDataOp(TopicPartitionStateZNode.path(*w.tp),
                                                        TopicPartitionStateZNode.encode(w.state), w.expected_zk_version)
                                              for w in updates])
                except (BadVersionError, NoNodeError):
                    pass  # one of them moved on: each on its own below, so only that one is decided again
                else:
                    for w, stat in zip(updates, stats, strict=True):
                        assert isinstance(stat, ZnodeStat)
                        results.written[w.tp] = stat.version
                    return
            await asyncio.gather(*(one(w) for w in updates))

        creates = [w for w in writes if w.expected_zk_version is None]
        updates = [w for w in writes if w.expected_zk_version is not None]
        for topic in sorted({w.tp[0] for w in creates}):
            if await self.zk.exists(TopicPartitionsZNode.path(topic)) is None:
                try:
                    await self.multi([CreateOp(TopicPartitionsZNode.path(topic))])
                except NodeExistsError:
                    pass
        # New partitions go CREATE_CHUNK to a multi-op: three round trips per partition (two existence checks and
        # the create) made creating 1000 partitions take ten seconds.
        # Compare-and-sets go the same way (an election after a broker died writes a third of the partitions).
        chunks = [creates[i:i + CREATE_CHUNK] for i in range(0, len(creates), CREATE_CHUNK)]
        update_chunks = [updates[i:i + CREATE_CHUNK] for i in range(0, len(updates), CREATE_CHUNK)]
        outcomes = await asyncio.gather(*(chunk(c) for c in chunks), *(update_chunk(c) for c in update_chunks),
                                        return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        results.retry.sort()
        return results

    @staticmethod
    def _create_ops(write: PartitionStateWrite) -> list[Op]:
        """A new partition's znode and its state znode (the topic's partitions znode exists already)."""
        topic, partition = write.tp
        return [CreateOp(TopicPartitionZNode.path(topic, partition)),
                CreateOp(TopicPartitionStateZNode.path(topic, partition), TopicPartitionStateZNode.encode(write.state))]

    async def delete_paths(self, paths: list[str]) -> None:
        """Deletes what exists of ``paths`` (children before parents) in one fenced multi-op."""
        limit = asyncio.Semaphore(MAX_READS_IN_FLIGHT)

        async def ops_of(path: str) -> list[Op]:
            async with limit:
                return await self._delete_ops(path)

        # pipelined: a failover finds hundreds of ISR change notifications after a busy spell
        ops: list[Op] = [op for path_ops in await asyncio.gather(*(ops_of(p) for p in paths)) for op in path_ops]
        if ops:
            try:
                await self.multi(ops)
            except NoNodeError:
                # someone removed part of it meanwhile; what is left is retried path by path
                for path in paths:
                    rest = await self._delete_ops(path)
                    if rest:
                        await self.multi(rest)

    async def _delete_ops(self, path: str) -> list[Op]:
        try:
            children = await self.zk.get_children(path)
        except NoNodeError:
            return []
        ops: list[Op] = []
        for child in children:
            ops.extend(await self._delete_ops(f"{path}/{child}"))
        ops.append(DeleteOp(path))
        return ops


__all__ = ["BadVersionError", "ControllerEpochFencedError", "ControllerMovedError", "FencedZkWriter",
           "NodeExistsError"]
