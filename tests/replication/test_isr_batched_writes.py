"""The leader's ISR writes, batched: the proposals of one loop turn go to ZooKeeper as multi-ops of
compare-and-sets; a multi whose partition lost a version race is written again partition by partition, so only
that one is refused (and re-read), the others committed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kazoo.exceptions import BadVersionError
from kazoo.protocol.states import ZnodeStat

from broker.replication import isr_manager
from broker.replication.isr_manager import IsrChangeManager
from broker.replication.partition import IsrProposal
from traces.writer import TraceWriter
from zk.client import MultiOpError, SetDataOp
from zk.znodes import LeaderIsrAndControllerEpoch, TopicPartitionStateZNode

TOPIC = "t"


def _stat(version: int) -> ZnodeStat:
    return ZnodeStat(0, 0, 0, 0, version, 0, 0, 0, 0, 0, 0)


class FakeZk:
    """State znodes with versions; multi is all-or-nothing as ZooKeeper's."""

    def __init__(self, partitions: int) -> None:
        state = LeaderIsrAndControllerEpoch(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=1)
        self.nodes = {TopicPartitionStateZNode.path(TOPIC, p): [TopicPartitionStateZNode.encode(state), 0]
                      for p in range(partitions)}
        self.multis = self.sets = 0

    async def multi(self, ops):
        self.multis += 1
        for index, op in enumerate(ops):
            assert isinstance(op, SetDataOp)
            if self.nodes[op.path][1] != op.version:
                raise MultiOpError(index, BadVersionError(), ops)
        return [await self._set(op.path, op.data) for op in ops]

    async def set(self, path, data, version):
        self.sets += 1
        if self.nodes[path][1] != version:
            raise BadVersionError()
        return await self._set(path, data)

    async def _set(self, path, data):
        node = self.nodes[path]
        node[0], node[1] = data, node[1] + 1
        return _stat(node[1])

    async def get_or_none(self, path):
        data, version = self.nodes[path]
        return data, _stat(version)

    async def create(self, *args, **kwargs):
        return None


class StubPartition:
    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.isr: tuple[int, ...] = (1, 2)
        self.pending_isr: tuple[int, ...] | None = None
        self.zk_version = 0
        self.leader_epoch = 0
        self.local_broker_id = 1
        self.followers: dict = {}
        self.log_end_offset = 0
        self.replica_lag_time_max_ms = 3000
        self.failed: list[IsrProposal] = []

    def propose(self, isr: tuple[int, ...]) -> IsrProposal:
        self.pending_isr = isr
        return IsrProposal(TOPIC, self.partition, 1, self.leader_epoch, isr, self.zk_version, 1)

    def isr_change_committed(self, proposal: IsrProposal, version: int, now_ms: int) -> bool:
        self.isr, self.zk_version, self.pending_isr = proposal.isr, version, None
        return False

    def isr_change_failed(self, proposal: IsrProposal) -> None:
        self.failed.append(proposal)
        self.pending_isr = None


class StubReplicaIO:
    def __init__(self, partitions: list[StubPartition]) -> None:
        self.hosted = {(TOPIC, p.partition): p for p in partitions}

    def wake(self, tp, hw_moved) -> None:
        pass


def _manager(tmp_path: Path, zk: FakeZk, partitions: list[StubPartition]) -> IsrChangeManager:
    return IsrChangeManager(zk, StubReplicaIO(partitions), TraceWriter(tmp_path / "trace.jsonl", 1, enabled=False),
                            lambda: 0, blackout_ms=100, interval_ms=1000)


def test_one_turns_proposals_are_written_as_multi_ops(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(isr_manager, "CHUNK", 100)
    zk = FakeZk(250)
    partitions = [StubPartition(p) for p in range(250)]

    async def scenario() -> None:
        manager = _manager(tmp_path, zk, partitions)
        for partition in partitions:
            manager.submit(partition.propose((1, 2, 3)))
        await manager.drain()
        assert manager.multi_writes == 3

    asyncio.run(scenario())
    assert (zk.multis, zk.sets) == (3, 0)
    assert all(p.isr == (1, 2, 3) and p.zk_version == 1 and not p.failed for p in partitions)
    for p in range(250):
        data, version = zk.nodes[TopicPartitionStateZNode.path(TOPIC, p)]
        assert version == 1 and TopicPartitionStateZNode.decode(TOPIC, p, data).isr == [1, 2, 3]


def test_a_batch_that_loses_a_version_race_is_retried_partition_by_partition(tmp_path: Path):
    zk = FakeZk(10)
    partitions = [StubPartition(p) for p in range(10)]
    # the controller wrote partition 4 first (a shrink of its own): our version for it is stale
    controller_state = LeaderIsrAndControllerEpoch(leader=1, leader_epoch=0, isr=[1], controller_epoch=1)
    zk.nodes[TopicPartitionStateZNode.path(TOPIC, 4)] = [TopicPartitionStateZNode.encode(controller_state), 1]

    async def scenario() -> None:
        manager = _manager(tmp_path, zk, partitions)
        for partition in partitions:
            manager.submit(partition.propose((1, 2, 3)))
        await manager.drain()
        assert manager.stats.failed_updates == 1

    asyncio.run(scenario())
    assert zk.multis == 1 and zk.sets == 10  # the refused multi, then each on its own
    assert [p.partition for p in partitions if p.failed] == [4]
    # the others are written; partition 4 adopted what ZooKeeper holds (same leader and epoch: the controller's ISR)
    assert all(p.isr == (1, 2, 3) and p.zk_version == 1 for p in partitions if p.partition != 4)
    assert partitions[4].isr == (1,) and partitions[4].zk_version == 1
    data, version = zk.nodes[TopicPartitionStateZNode.path(TOPIC, 4)]
    assert version == 1 and TopicPartitionStateZNode.decode(TOPIC, 4, data).isr == [1]


def test_a_partition_proposed_twice_in_one_turn_goes_in_the_next_batch(tmp_path: Path):
    zk = FakeZk(2)
    partitions = [StubPartition(p) for p in range(2)]

    async def scenario() -> None:
        manager = _manager(tmp_path, zk, partitions)
        manager.submit(partitions[0].propose((1, 2, 3)))
        manager.submit(partitions[1].propose((1, 2, 3)))
        manager.submit(IsrProposal(TOPIC, 0, 1, 0, (1, 2, 3), 1, 1))  # made on the first's version, as if committed
        await manager.drain()

    asyncio.run(scenario())
    assert zk.multis == 1 and zk.sets == 1
    assert zk.nodes[TopicPartitionStateZNode.path(TOPIC, 0)][1] == 2
