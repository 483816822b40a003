"""Broker registration in ZooKeeper (Kafka's KafkaZkClient.registerBroker, as a small recipe)."""

from __future__ import annotations

import base64
import uuid

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


async def register_broker(zk: ZkClient, broker_id: int, registration: BrokerRegistration) -> int:
    """Creates the ephemeral /brokers/ids/<id>; returns its czxid, which is the broker epoch."""
    path = BrokerIdZNode.path(broker_id)
    try:
        # create + setData in one multi-op, as Kafka does, so the znode's version is 1 from the start
        await zk.multi([CreateOp(path, b"", ephemeral=True),
                        SetDataOp(path, BrokerIdZNode.encode(registration), 0)])
    except MultiOpError as exc:
        if isinstance(exc.cause, NodeExistsError):
            _, stat = await zk.get(path)
            if stat.ephemeralOwner != zk.session_id:
                raise BrokerIdInUseError(
                    f"broker.id {broker_id} is already registered in ZooKeeper by another broker "
                    f"(session 0x{stat.ephemeralOwner:x}): give this broker another broker.id, or stop the other "
                    "one") from None
        else:
            raise exc.cause from None
    _, stat = await zk.get(path)
    return stat.czxid
