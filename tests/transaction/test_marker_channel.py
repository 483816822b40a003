"""The marker channel's retry rules, with a local writer standing where a partition leader's append would be and
the cluster's leaders given by the test: partitions without a leader are retried until they have one, a partition
whose leader is this broker is written directly, a fenced coordinator stops, and so does one that lost its state
partition."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.transaction.coordinator import TxnMarkerRequest
from broker.transaction.marker_channel import TransactionMarkerChannelManager

BROKER = 1
REQUEST = TxnMarkerRequest("tx", 4000, 3, True, 7, 2, frozenset({("orders", 0), ("orders", 1)}))


class Leaders:
    """Partition leaders and what each local append answers, changed by the test as it goes."""

    def __init__(self) -> None:
        self.leaders: dict[tuple[str, int], int | None] = {("orders", 0): None, ("orders", 1): BROKER}
        self.answers: dict[tuple[str, int], ErrorCode] = {}
        self.written: list[tuple[tuple[str, int], bool, int]] = []
        self.current = True

    def write(self, markers, _wall_clock_ms, done) -> None:
        [marker] = markers
        outcome = {}
        for tp in marker.partitions:
            outcome[tp] = self.answers.get(tp, ErrorCode.none)
            if outcome[tp] == ErrorCode.none:
                self.written.append((tp, marker.commit, marker.coordinator_epoch))
        done([outcome])


def channel(leaders: Leaders, completed: list) -> TransactionMarkerChannelManager:
    return TransactionMarkerChannelManager(
        BROKER, leaders.leaders.get, lambda _broker: None, leaders, is_current=lambda _r: leaders.current,
        on_complete=completed.append, partition_exists=lambda tp: tp in leaders.leaders)


async def wait_for(condition, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_a_partition_without_a_leader_is_retried_until_it_has_one_then_the_transaction_completes():
    async def run() -> None:
        leaders, completed = Leaders(), []
        markers = channel(leaders, completed)
        markers.send(REQUEST)
        await wait_for(lambda: leaders.written == [(("orders", 1), True, 7)])
        await asyncio.sleep(0.3)
        assert completed == []  # orders-0 still has no marker
        leaders.leaders[("orders", 0)] = BROKER
        await wait_for(lambda: completed == [REQUEST])
        assert sorted(leaders.written) == [(("orders", 0), True, 7), (("orders", 1), True, 7)]
        await markers.close()
    asyncio.run(run())


def test_retriable_errors_are_retried_and_a_fenced_coordinator_stops():
    async def run() -> None:
        leaders, completed = Leaders(), []
        leaders.leaders[("orders", 0)] = BROKER
        leaders.answers[("orders", 0)] = ErrorCode.not_enough_replicas
        markers = channel(leaders, completed)
        markers.send(REQUEST)
        await asyncio.sleep(0.3)
        assert completed == []
        leaders.answers[("orders", 0)] = ErrorCode.transaction_coordinator_fenced
        await wait_for(lambda: not markers._tasks)
        assert completed == []
    asyncio.run(run())


def test_a_coordinator_that_lost_the_state_partition_stops_sending():
    async def run() -> None:
        leaders, completed = Leaders(), []
        markers = channel(leaders, completed)
        markers.send(REQUEST)
        await asyncio.sleep(0.2)
        leaders.current = False
        leaders.leaders[("orders", 0)] = BROKER
        await wait_for(lambda: not markers._tasks)
        assert completed == [] and (("orders", 0), True, 7) not in leaders.written
    asyncio.run(run())


def test_a_deleted_topic_does_not_hold_the_transaction_back():
    async def run() -> None:
        leaders, completed = Leaders(), []
        markers = channel(leaders, completed)
        markers.send(REQUEST)
        await asyncio.sleep(0.2)
        del leaders.leaders[("orders", 0)]
        await wait_for(lambda: completed == [REQUEST])
    asyncio.run(run())
