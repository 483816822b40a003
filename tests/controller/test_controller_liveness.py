"""The controller's event loop against a real ZooKeeper: whatever a ZooKeeper failure does to one event, the
controller keeps processing the next ones, so a broker whose session came back can still be elected."""

import asyncio
from collections.abc import Callable

import pytest

from broker.registration import create_top_level_paths
from controller import events as ev
from controller.controller import KafkaController
from traces.writer import TraceWriter
from zk.client import SessionEvent, ZkClient
from zk.znodes import ControllerEpochZNode, ControllerZNode
from tests.zk_link import ZooKeeperLink

pytestmark = pytest.mark.processes


async def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)


def test_controller_that_loses_zookeeper_inside_an_event_is_elected_again_on_a_new_session(zk_connect, tmp_path):
    async def body() -> tuple[int, bytes | None]:
        zk = ZkClient(zk_connect, 4000)
        await zk.start()
        await create_top_level_paths(zk)
        controller = KafkaController(1, zk, TraceWriter(tmp_path / "trace.jsonl", 1, enabled=False),
                                     cluster_listener_name="CLUSTER")
        handled = []
        controller.on_state_change = lambda: handled.append(controller.is_active)
        controller.start()
        try:
            await _until(lambda: handled[:1] == [True], 10, "broker 1 to become controller")
            # The session ends while the controller works on an event, so the event fails and so does
            # the clean-up of its own /controller that follows the failure.
            await zk.close()
            controller.put(ev.TopicDeletion())
            await _until(lambda: not controller.is_active, 10, "the controller to resign")
            # What the broker does on a new session: re-register, then take part in the election again.
            await zk.start()
            controller.put(ev.RegisterBrokerAndReelect())
            await _until(lambda: controller.is_active, 10, "broker 1 to be elected again on its new session")
            data, _ = await zk.get(ControllerZNode.path)
            return controller.ctx.epoch, data
        finally:
            await controller.stop()
            await zk.close()

    epoch, data = asyncio.run(body())
    assert epoch == 2
    assert ControllerZNode.decode(data).brokerid == 1


def test_a_controller_deleted_while_a_broker_was_disconnected_is_replaced_by_that_broker(zk_connect, tmp_path):
    server, chroot = zk_connect.split("/", 1)

    async def body() -> int:
        other = ZkClient(zk_connect, 4000)
        await other.start()
        await create_top_level_paths(other)
        await other.create(ControllerEpochZNode.path, ControllerEpochZNode.encode(1))
        await other.create(ControllerZNode.path, ControllerZNode.encode(2), ephemeral=True)
        link = ZooKeeperLink(server)
        await link.start()
        zk = ZkClient(f"127.0.0.1:{link.port}/{chroot}", 6000)
        await zk.start()
        sessions = []
        zk.add_session_listener(sessions.append)
        controller = KafkaController(1, zk, TraceWriter(tmp_path / "trace.jsonl", 1, enabled=False),
                                     cluster_listener_name="CLUSTER")
        handled = []
        controller.on_state_change = lambda: handled.append(controller.active_controller_id)
        controller.start()
        try:
            await _until(lambda: handled[:1] == [2], 10, "broker 1 to see broker 2 as the controller")
            link.cut()
            await _until(lambda: SessionEvent.DISCONNECTED in sessions, 10, "broker 1 to lose its connection")
            await other.close()  # broker 2 goes; its /controller with it, unseen by broker 1
            link.cut_off = False
            await _until(lambda: SessionEvent.RECONNECTED in sessions, 10, "broker 1 to reconnect")
            await _until(lambda: controller.is_active, 10, "broker 1 to take over as controller")
            return controller.ctx.epoch
        finally:
            await controller.stop()
            await zk.close()
            link.close()

    assert asyncio.run(body()) == 2
