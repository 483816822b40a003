"""The typed client against a real ZooKeeper server."""

import asyncio
import threading

import pytest
from kazoo.exceptions import BadVersionError, NoNodeError

from controller.zk_writes import ControllerMovedError, FencedZkWriter
from zk.client import CheckOp, CreateOp, MultiOpError, SetDataOp, ZkClient, ZkUnavailableError
from tests.harness import zk_call
from zk.server import free_port
from zk.znodes import LeaderIsrAndControllerEpoch, TopicPartitionStateZNode

pytestmark = pytest.mark.processes


def run(zk_connect, body):
    return zk_call(zk_connect, body)


def test_chroot_is_created_and_conditional_writes_check_the_version(zk_connect):
    async def body(zk):
        await zk.create("/n", b"a")
        stat = await zk.set("/n", b"b", version=0)
        assert stat.version == 1
        with pytest.raises(BadVersionError):
            await zk.set("/n", b"c", version=0)
        return (await zk.get("/n"))[0]
    assert run(zk_connect, body) == b"b"


def test_a_multi_op_is_all_or_nothing_and_names_the_failed_op(zk_connect):
    async def body(zk):
        await zk.create("/epoch", b"1")
        with pytest.raises(MultiOpError) as info:
            await zk.multi([CreateOp("/created"), CheckOp("/epoch", 5)])
        assert info.value.failed_index == 1 and isinstance(info.value.cause, BadVersionError)
        return await zk.exists("/created")
    assert run(zk_connect, body) is None


def test_watches_are_delivered_on_the_event_loop_thread(zk_connect):
    async def body(zk):
        loop_thread = threading.get_ident()
        seen = asyncio.Event()
        threads = []

        def on_change(event):
            threads.append(threading.get_ident())
            seen.set()

        await zk.get_or_none("/watched", watch=on_change)
        await zk.create("/watched", b"x")
        await asyncio.wait_for(seen.wait(), 10)
        return threads, loop_thread
    threads, loop_thread = run(zk_connect, body)
    assert threads == [loop_thread]


def test_fenced_writes_fail_once_another_controller_bumped_the_epoch(zk_connect):
    state = LeaderIsrAndControllerEpoch(leader=1, leader_epoch=0, isr=[1], controller_epoch=1)

    async def body(zk):
        await zk.create("/controller_epoch", b"1")
        await zk.create(TopicPartitionStateZNode.path("t", 0), TopicPartitionStateZNode.encode(state),
                        makepath=True)
        old = FencedZkWriter(zk, epoch_zk_version=0)
        assert await old.set_partition_state("t", 0, state.with_changes(leader_epoch=1), 0) == 1
        await zk.multi([SetDataOp("/controller_epoch", b"2", 0)])  # a new controller was elected
        with pytest.raises(ControllerMovedError):
            await old.set_partition_state("t", 0, state.with_changes(leader_epoch=2), 1)
        data, stat = await zk.get(TopicPartitionStateZNode.path("t", 0))
        return TopicPartitionStateZNode.decode("t", 0, data), stat.version
    written, version = run(zk_connect, body)
    assert written.leader_epoch == 1 and version == 1


def test_unreachable_zookeeper_fails_with_a_message_after_retrying():
    messages = []

    async def main():
        zk = ZkClient(f"127.0.0.1:{free_port()}", session_timeout_ms=2000, connection_timeout_ms=2500)
        await zk.start(say=messages.append)
    with pytest.raises(ZkUnavailableError, match=r"did not answer within zookeeper.connection.timeout.ms=2500"):
        asyncio.run(main())
    assert messages and "waiting for ZooKeeper" in messages[0]


def test_missing_node_raises_no_node(zk_connect):
    async def body(zk):
        with pytest.raises(NoNodeError):
            await zk.get("/absent")
        return await zk.get_or_none("/absent")
    assert run(zk_connect, body) == (None, None)
