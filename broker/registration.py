"""Broker registration in ZooKeeper (Kafka's KafkaZkClient.registerBroker, as a small recipe)."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Callable

from collections.abc import Awaitable
from typing import TypeVar

from kazoo.exceptions import NodeExistsError, SessionExpiredError

from broker.config import KafkaConfig
from zk.client import CreateOp, MultiOpError, SetDataOp, ZkClient
from zk.znodes import PERSISTENT_PATHS, BrokerIdZNode, BrokerRegistration, ClusterIdZNode


T = TypeVar("T")
# how often a step cut off by an expired session is tried again while kazoo opens the next session
NEW_SESSION_RETRY_S = 0.1


class BrokerIdInUseError(RuntimeError):
    pass


class SessionNeverReturnedError(RuntimeError):
    pass


async def on_a_live_session(zk: ZkClient, step: Callable[[], Awaitable[T]], what: str, timeout_s: float,
                            say: Callable[[str], None] = print) -> T:
    """Run a start-up step against ZooKeeper, again from the start when the session expires under it.

    Kafka's ZooKeeperClient opens a new session after an expiry and its requests go on there; kazoo does too,
    but answers SessionExpiredError to every request until the new session is connected. A broker starting on
    a loaded machine (session timeouts of 2 s in the classroom profile) would otherwise exit half-started.
    """
    deadline = time.monotonic() + timeout_s
    warned = False
    while True:
        try:
            return await step()
        except SessionExpiredError:
            if time.monotonic() >= deadline:
                raise SessionNeverReturnedError(
                    f"{what}: the ZooKeeper session expired and no new one was opened within {timeout_s:.0f} s "
                    f"(zookeeper.connection.timeout.ms): check that ZooKeeper at {zk.connect} is running") from None
            if not warned:
                say(f"{what}: the ZooKeeper session expired; doing it again on the next session")
                warned = True
            await asyncio.sleep(NEW_SESSION_RETRY_S)


def registration_for(config: KafkaConfig) -> BrokerRegistration:
    advertised = config.advertised
    protocols = config.security_protocol_map
    plaintext = next((lst for lst in advertised if protocols.get(lst.name, lst.name) == "PLAINTEXT"
                      and lst.name != config.inter_broker_listener_name), None)
    return BrokerRegistration(
        host=plaintext.host if plaintext else None, port=plaintext.port if plaintext else -1,
        endpoints=[str(lst) for lst in advertised],
        listener_security_protocol_map={lst.name: protocols.get(lst.name, "PLAINTEXT") for lst in advertised},
        rack=config.broker_rack,
    )


async def create_top_level_paths(zk: ZkClient) -> None:
    for path in PERSISTENT_PATHS:
        await zk.ensure_path(path)


async def get_or_create_cluster_id(zk: ZkClient) -> str:
    data, _ = await zk.get_or_none(ClusterIdZNode.path)
    if data is None:
        # Kafka's cluster id: a random UUID as 22 characters of URL-safe base64
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            await zk.create(ClusterIdZNode.path, ClusterIdZNode.encode(candidate), makepath=True)
        except NodeExistsError:
            pass
        data, _ = await zk.get(ClusterIdZNode.path)
    return ClusterIdZNode.decode(data)


async def register_broker(zk: ZkClient, broker_id: int, registration: BrokerRegistration,
                          wait_for_stale_s: float = 0.0, say: Callable[[str], None] = print) -> int:
    """Creates the ephemeral /brokers/ids/<id>; returns its czxid, which is the broker epoch.

    A registration held by another session may belong to this broker's previous, killed process: it
    disappears when that session expires, so it is waited for (up to ``wait_for_stale_s``) before the
    broker id is declared in use.
    """
    path = BrokerIdZNode.path(broker_id)
    deadline = time.monotonic() + wait_for_stale_s
    while True:
        try:
            # create + setData in one multi-op, as Kafka does, so the znode's version is 1 from the start
            await zk.multi([CreateOp(path, b"", ephemeral=True),
                            SetDataOp(path, BrokerIdZNode.encode(registration), 0)])
            break
        except MultiOpError as exc:
            if not isinstance(exc.cause, NodeExistsError):
                raise exc.cause from None
        _, stat = await zk.get_or_none(path)
        if stat is not None and stat.ephemeralOwner == zk.session_id:
            break
        if stat is not None and time.monotonic() >= deadline:
            raise BrokerIdInUseError(
                f"broker.id {broker_id} is already registered in ZooKeeper by another broker "
                f"(session 0x{stat.ephemeralOwner:x}) that stayed alive for {wait_for_stale_s:.0f} s: give this "
                "broker another broker.id, or stop the other one")
        if stat is not None:
            say(f"broker.id {broker_id} is still registered by session 0x{stat.ephemeralOwner:x}; waiting for it "
                "to expire (a previous process of this broker?)")
            await asyncio.sleep(0.2)
    _, stat = await zk.get(path)
    return stat.czxid
