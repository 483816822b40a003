"""Broker registration in ZooKeeper (Kafka's KafkaZkClient.registerBroker, as a small recipe)."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Callable

from kazoo.exceptions import NodeExistsError

from broker.config import KafkaConfig
from zk.client import CreateOp, MultiOpError, SetDataOp, ZkClient
from zk.znodes import PERSISTENT_PATHS, BrokerIdZNode, BrokerRegistration, ClusterIdZNode


class BrokerIdInUseError(RuntimeError):
    pass


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
