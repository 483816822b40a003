"""The controller's batched state-znode writes (controller/zk_writes.py) against a real ZooKeeper: a batch of
hundreds goes out as fenced multi-ops of up to CREATE_CHUNK partitions; a deposed controller's batch changes
nothing; a partition refused inside a batch is reported for retry while the rest are written, and the
controller decides it again from what ZooKeeper then holds."""

from __future__ import annotations

import asyncio

import pytest

from controller.channel import ControlRequestBatch
from controller.context import ControllerContext, PartitionLeadership, TopicPartition
from controller.controller import KafkaController
from controller.state_change import ControllerMovedError, PartitionStateWrite
from controller.zk_writes import CREATE_CHUNK, ControllerEpochFencedError, FencedZkWriter, WriteResults
from tests.harness import zk_call
from traces import events as te
from zk.client import CreateOp, ZkClient
from zk.znodes import (
    BrokerRegistration,
    LeaderIsrAndControllerEpoch,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
    TopicPartitionZNode,
)

pytestmark = pytest.mark.processes

TOPIC = "t"
# more than two multi-ops' worth, so the batch spans chunks and the last one is partial
PARTITIONS = 2 * CREATE_CHUNK + 50
REFUSED = CREATE_CHUNK + 37  # in the middle chunk
OLD_EPOCH = 1


def initial_state(partition: int) -> LeaderIsrAndControllerEpoch:
    leader = 1 + partition % 3
    return LeaderIsrAndControllerEpoch(leader=leader, leader_epoch=0, isr=[1, 2, 3], controller_epoch=OLD_EPOCH)


async def make_partitions(zk: ZkClient, topic: str = TOPIC, count: int = PARTITIONS) -> None:
    """/controller_epoch at zkVersion 0 and ``count`` state znodes at zkVersion 0, written as a controller would."""
    if await zk.exists("/controller_epoch") is None:
        await zk.create("/controller_epoch", str(OLD_EPOCH).encode())
    await zk.create(TopicPartitionsZNode.path(topic), makepath=True)
    for start in range(0, count, CREATE_CHUNK):
        await zk.multi([op for p in range(start, min(start + CREATE_CHUNK, count)) for op in (
            CreateOp(TopicPartitionZNode.path(topic, p)),
            CreateOp(TopicPartitionStateZNode.path(topic, p), TopicPartitionStateZNode.encode(initial_state(p))))])


async def snapshot(zk: ZkClient, topic: str = TOPIC, count: int = PARTITIONS) -> dict[int, tuple[bytes, int] | None]:
    """Every state znode's bytes and zkVersion (None where it does not exist)."""
    async def one(p: int) -> tuple[bytes, int] | None:
        data, stat = await zk.get_or_none(TopicPartitionStateZNode.path(topic, p))
        return None if data is None else (data, stat.version)

    return dict(enumerate(await asyncio.gather(*(one(p) for p in range(count)))))


def moved_leaders(epoch: int = OLD_EPOCH) -> list[PartitionStateWrite]:
    """An offline election for every partition, each a compare-and-set on zkVersion 0."""
    writes = []
    for p in range(PARTITIONS):
        old = initial_state(p)
        new = old.with_changes(leader=1 + (p + 1) % 3, leader_epoch=1, controller_epoch=epoch)
        writes.append(PartitionStateWrite((TOPIC, p), new, 0, old.leader, "offline", (1, 2, 3)))
    return writes


def new_partitions(topic: str, count: int) -> list[PartitionStateWrite]:
    return [PartitionStateWrite((topic, p), initial_state(p), None, -1, "initial", (1, 2, 3), is_new=True)
            for p in range(count)]


async def elect_new_controller(zk: ZkClient) -> None:
    """What a newly elected controller does first: bump /controller_epoch, which moves its zkVersion to 1."""
    await zk.set("/controller_epoch", str(OLD_EPOCH + 1).encode(), version=0)


def test_a_deposed_controllers_batch_fails_fenced_and_changes_no_state_znode(zk_connect):
    async def body(zk: ZkClient):
        await make_partitions(zk)
        before = await snapshot(zk)
        deposed = FencedZkWriter(zk, epoch_zk_version=0)
        await elect_new_controller(zk)
        with pytest.raises(ControllerMovedError):
            await deposed.write_partition_states(moved_leaders())
        # new partitions too: not even the topic's partitions znode may appear
        with pytest.raises(ControllerMovedError):
            await deposed.write_partition_states(new_partitions("fresh", CREATE_CHUNK + 10))
        return before, await snapshot(zk), await zk.exists(TopicPartitionsZNode.path("fresh"))

    before, after, fresh = zk_call(zk_connect, body)
    assert after == before and all(v is not None and v[1] == 0 for v in after.values())
    assert fresh is None


def test_a_deposed_controllers_refused_write_names_the_write_its_epoch_and_the_zk_version_it_expected(zk_connect):
    async def body(zk: ZkClient):
        await make_partitions(zk)
        deposed = FencedZkWriter(zk, epoch_zk_version=0, controller_epoch=OLD_EPOCH)
        await elect_new_controller(zk)
        with pytest.raises(ControllerEpochFencedError) as refused:
            await deposed.write_partition_states(new_partitions("fresh", 1))
        return refused.value

    refused = zk_call(zk_connect, body)
    assert refused.write == f"create {TopicPartitionsZNode.path('fresh')}"
    assert (refused.controller_epoch, refused.expected_epoch_zk_version) == (OLD_EPOCH, 0)


def test_fencing_wins_over_the_per_partition_fallback(zk_connect):
    """A deposed controller whose batch also holds a refused partition must not fall back to writing the others
    one by one: each of those writes is fenced as well, and the batch fails as deposed, not as a retry."""
    async def body(zk: ZkClient):
        await make_partitions(zk)
        path = TopicPartitionStateZNode.path(TOPIC, REFUSED)
        await zk.set(path, TopicPartitionStateZNode.encode(initial_state(REFUSED).with_changes(isr=[1, 2])), version=0)
        before = await snapshot(zk)
        deposed = FencedZkWriter(zk, epoch_zk_version=0)
        await elect_new_controller(zk)
        with pytest.raises(ControllerMovedError):
            await deposed.write_partition_states(moved_leaders())
        return before, await snapshot(zk)

    before, after = zk_call(zk_connect, body)
    assert after == before


def test_a_write_refused_inside_a_batch_is_reported_for_retry_and_the_others_are_written(zk_connect):
    writes = moved_leaders()
    someone_elses = initial_state(REFUSED).with_changes(isr=[1, 2])  # e.g. the leader shrank the ISR meanwhile

    async def body(zk: ZkClient):
        await make_partitions(zk)
        await zk.set(TopicPartitionStateZNode.path(TOPIC, REFUSED), TopicPartitionStateZNode.encode(someone_elses),
                     version=0)
        results = await FencedZkWriter(zk, epoch_zk_version=0).write_partition_states(writes)
        return results, await snapshot(zk)

    results, after = zk_call(zk_connect, body)
    assert isinstance(results, WriteResults)
    assert results.retry == [(TOPIC, REFUSED)]
    assert results.written == {(TOPIC, p): 1 for p in range(PARTITIONS) if p != REFUSED}
    for write in writes:
        data, version = after[write.tp[1]]
        if write.tp[1] == REFUSED:
            assert TopicPartitionStateZNode.decode(TOPIC, REFUSED, data) == someone_elses and version == 1
        else:
            assert TopicPartitionStateZNode.decode(*write.tp, data) == write.state and version == 1


def test_a_create_refused_inside_a_batch_is_reported_for_retry_and_the_others_are_created(zk_connect):
    count, taken = CREATE_CHUNK + 30, 42
    writes = new_partitions("fresh", count)
    first = initial_state(taken).with_changes(leader=3, isr=[3])

    async def body(zk: ZkClient):
        await zk.create("/controller_epoch", str(OLD_EPOCH).encode())
        # someone (a controller of the past, say) created one partition's state already
        await zk.create(TopicPartitionStateZNode.path("fresh", taken), TopicPartitionStateZNode.encode(first),
                        makepath=True)
        results = await FencedZkWriter(zk, epoch_zk_version=0).write_partition_states(writes)
        return results, await snapshot(zk, "fresh", count)

    results, after = zk_call(zk_connect, body)
    assert results.retry == [("fresh", taken)]
    assert results.written == {("fresh", p): 0 for p in range(count) if p != taken}
    assert TopicPartitionStateZNode.decode("fresh", taken, after[taken][0]) == first
    assert all(TopicPartitionStateZNode.decode("fresh", p, after[p][0]) == initial_state(p)
               for p in range(count) if p != taken)


class RecordedTrace:
    controller_epoch = OLD_EPOCH

    def __init__(self) -> None:
        self.events: list[tuple[type, dict]] = []

    def emit(self, event_type: type, **fields) -> None:
        self.events.append((event_type, fields))


class RecordedChannel:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str, object]] = []

    def send(self, broker: int, method: str, request: object) -> None:
        self.sent.append((broker, method, request))


class RacedWriter(FencedZkWriter):
    """A writer whose first batch is overtaken on one partition: just before it goes out, that partition's leader
    shrinks its ISR (a compare-and-set of its own, as Kafka's brokers write ISR changes)."""

    def __init__(self, zk: ZkClient, epoch_zk_version: int, raced: TopicPartition,
                 state: LeaderIsrAndControllerEpoch) -> None:
        super().__init__(zk, epoch_zk_version)
        self.raced, self.state = raced, state
        self.batches: list[list[TopicPartition]] = []

    async def write_partition_states(self, writes: list[PartitionStateWrite]) -> WriteResults:
        if not self.batches:
            await self.zk.set(TopicPartitionStateZNode.path(*self.raced), TopicPartitionStateZNode.encode(self.state),
                              version=0)
        self.batches.append([w.tp for w in writes])
        return await super().write_partition_states(writes)


def test_the_controller_decides_a_refused_partition_again_from_zookeeper_and_writes_it(zk_connect):
    """Broker 1 died, leader of a third of the partitions. Just before the controller's batch reaches ZooKeeper,
    one of them moves on there (its ISR written as [1, 3]: broker 1's last ISR shrink, say). The controller re-reads
    that partition, elects 3 rather than 2 from the ISR it now has, and writes it: no partition is lost to the race."""
    raced = (TOPIC, 0)  # partition 0 is led by broker 1
    shrunk = initial_state(0).with_changes(isr=[1, 3])

    async def body(zk: ZkClient):
        await make_partitions(zk)
        registration = BrokerRegistration(host="127.0.0.1", port=9092, endpoints=["PLAINTEXT://127.0.0.1:9092"])
        ctx = ControllerContext(epoch=OLD_EPOCH, epoch_zk_version=0,
                                live_brokers={2: registration, 3: registration}, broker_epochs={2: 2, 3: 3},
                                assignments={TOPIC: {p: [1, 2, 3] for p in range(PARTITIONS)}})
        ctx.leadership = {(TOPIC, p): PartitionLeadership(initial_state(p), 0) for p in range(PARTITIONS)}
        trace = RecordedTrace()
        controller = KafkaController(2, zk, trace, cluster_listener_name="CLUSTER")  # type: ignore[arg-type]
        writer = RacedWriter(zk, 0, raced, shrunk)
        controller.ctx, controller._writer = ctx, writer
        channel = RecordedChannel()
        batch = ControlRequestBatch(2, ctx, channel)  # type: ignore[arg-type]
        await controller._trigger_online_partitions(batch)
        batch.send()
        return writer.batches, trace.events, channel.sent, ctx, await snapshot(zk)

    batches, events, sent, ctx, after = zk_call(zk_connect, body)
    led_by_1 = [(TOPIC, p) for p in range(PARTITIONS) if initial_state(p).leader == 1]
    assert batches == [led_by_1, [raced]], "one batch for all, then the refused partition alone"
    final = TopicPartitionStateZNode.decode(TOPIC, 0, after[0][0])
    assert (final.leader, final.isr, final.leader_epoch, after[0][1]) == (3, [3], 1, 2)
    assert ctx.leadership[raced] == PartitionLeadership(final, 2)
    for tp in led_by_1:
        state = TopicPartitionStateZNode.decode(*tp, after[tp[1]][0])
        assert state.leader in (2, 3) and state.leader_epoch == 1
    elected = [fields for kind, fields in events if kind is te.LeaderElected]
    assert sorted((f["topic"], f["partition"]) for f in elected) == led_by_1, "one trace event per partition"
    assert next(f for f in elected if f["partition"] == 0)["zk_version"] == 2
    # one LeaderAndIsr and one UpdateMetadata per live broker, the refused partition in them with what was written
    assert sorted((b, name) for b, name, _ in sent) == [(2, "LeaderAndIsr"), (2, "UpdateMetadata"),
                                                         (3, "LeaderAndIsr"), (3, "UpdateMetadata")]
    for _, _, request in sent:
        states = {(s.topic, s.partition): s for s in request.partition_states}
        assert set(states) == set(led_by_1)
        assert (states[raced].leader, list(states[raced].isr), states[raced].zk_version) == (3, [3], 2)
