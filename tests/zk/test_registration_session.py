"""Broker registration against a real ZooKeeper whose session expires under it: the registration is made on the
next session instead of failing the broker's start (a CI run once lost a broker that way)."""

import asyncio

import pytest
from kazoo.exceptions import SessionExpiredError

from broker.registration import (
    SessionNeverReturnedError,
    create_top_level_paths,
    on_a_live_session,
    register_broker,
)
from tests.zk_link import ZooKeeperLink
from zk.client import SessionEvent, ZkClient
from zk.znodes import BrokerIdZNode, BrokerRegistration

pytestmark = pytest.mark.processes

REGISTRATION = BrokerRegistration(host="127.0.0.1", port=9092, endpoints=["PLAINTEXT://127.0.0.1:9092"],
                                  listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT"})


async def _until(condition, timeout_s: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)


async def _session_gone(observer: ZkClient, marker: str) -> bool:
    return await observer.exists(marker) is None


def test_a_registration_whose_session_expires_is_made_on_the_next_session(zk_connect):
    server, chroot = zk_connect.split("/", 1)

    async def body():
        observer = ZkClient(zk_connect, 4000)
        await observer.start()
        await create_top_level_paths(observer)
        link = ZooKeeperLink(server)
        await link.start()
        zk = ZkClient(f"127.0.0.1:{link.port}/{chroot}", 1000)
        sessions: list[SessionEvent] = []
        zk.add_session_listener(sessions.append)
        await zk.start()
        try:
            first_session = zk.session_id
            marker = "/session-marker"
            await zk.create(marker, ephemeral=True)
            link.cut()
            await _until(lambda: _async(SessionEvent.DISCONNECTED in sessions), 10, "the client to lose its link")
            # the registration is sent while the session is on its way out: kazoo holds it, then fails it
            registering = asyncio.get_running_loop().create_task(on_a_live_session(
                zk, lambda: register_broker(zk, 1, REGISTRATION), "registering broker 1", 30, say=lambda _: None))
            await _until(lambda: _session_gone(observer, marker), 20, "ZooKeeper to expire the cut-off session")
            assert not registering.done()
            link.cut_off = False
            epoch = await asyncio.wait_for(registering, 30)
            _, stat = await observer.get(BrokerIdZNode.path(1))
            return first_session, zk.session_id, stat, epoch, sessions
        finally:
            await zk.close()
            await observer.close()
            link.close()

    first_session, session, stat, epoch, sessions = asyncio.run(body())
    assert SessionEvent.NEW_SESSION in sessions
    assert session != first_session
    assert stat.ephemeralOwner == session  # registered on the new session, so it lives as long as the broker does
    assert epoch == stat.czxid


def test_a_step_cut_off_by_expiries_is_tried_until_it_succeeds_or_the_timeout_names_what_to_check():
    zk = ZkClient("127.0.0.1:2181/nowhere")  # only named in the message: the steps below do not reach it
    attempts = []

    async def twice_expired():
        attempts.append(1)
        if len(attempts) < 3:
            raise SessionExpiredError()
        return 42

    async def always_expired():
        raise SessionExpiredError()

    assert asyncio.run(on_a_live_session(zk, twice_expired, "registering", 10, say=lambda _: None)) == 42
    assert len(attempts) == 3
    with pytest.raises(SessionNeverReturnedError) as raised:
        asyncio.run(on_a_live_session(zk, always_expired, "registering broker 1", 0.3, say=lambda _: None))
    assert str(raised.value).startswith("registering broker 1: the ZooKeeper session expired")
    assert "127.0.0.1:2181/nowhere" in str(raised.value) and "zookeeper.connection.timeout.ms" in str(raised.value)


async def _async(value: bool) -> bool:
    return value
