"""The compose cluster's network as a ``NetworkPlan``, pure: who has which address on the compose network, so
``faults.py`` computes the cuts of a docker-compose cluster exactly as it does for a ``--netns`` one.

The plan's namespace names stand for containers here (``member_containers`` maps them); "clients" are the
network's gateway, the address the host's connections to the published ports come from (Docker's proxy, or
its NAT for the host itself). Clients in other containers, or NATed from other machines, keep their own
addresses and are not cut by ``--from clients``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from cluster.net.faults import FaultError
from cluster.net.plan import NetworkPlan

# not a --netns tag (those are hex): names made from it can never be mistaken for a real namespace
COMPOSE_TAG = "compose"


@dataclass(frozen=True)
class ComposeNetwork:
    """What the Engine API says about the project's network and the containers on it."""

    name: str
    subnet: str
    gateway: str
    zookeeper: str  # the ZooKeeper container's name
    zookeeper_address: str | None
    brokers: Mapping[int, tuple[str, str | None]]  # broker id -> (container name, address or None if detached)


def compose_plan(network: ComposeNetwork, detached_ok: bool = False) -> tuple[NetworkPlan, dict[str, str]]:
    """The plan of the compose network and, for each of its namespace names, the container it stands for.

    A fault needs every member on the network, since a detached or stopped broker has no address to cut
    (``kafkasim net heal --docker`` reconnects it); ``detached_ok`` leaves such brokers out of the plan instead,
    for ``net status``."""
    subnet = ipaddress.ip_network(network.subnet, strict=False)
    detached = [f"broker {b} ({name})" for b, (name, address) in sorted(network.brokers.items()) if address is None]
    brokers = {b: member for b, member in network.brokers.items() if member[1] is not None}
    if network.zookeeper_address is None:
        detached.insert(0, f"zookeeper ({network.zookeeper})")
    elif detached_ok:
        detached = []
    if detached:
        raise FaultError(f"{', '.join(detached)} not on network {network.name}: 'kafkasim net heal --docker' "
                         "reconnects disconnected containers (a stopped one: 'kafkasim start BROKER --docker')")
    addresses = {"gateway": network.gateway, "zookeeper": network.zookeeper_address,
                 **{f"broker {b}": address for b, (_, address) in brokers.items()}}
    outside = [f"{who} {address}" for who, address in addresses.items()
               if ipaddress.ip_address(address) not in subnet]
    if outside:
        raise FaultError(f"{', '.join(outside)} outside network {network.name}'s subnet {network.subnet}")
    plan = NetworkPlan(COMPOSE_TAG, str(subnet), network.gateway, network.zookeeper_address,
                       {b: address for b, (_, address) in sorted(brokers.items())})
    containers = {plan.zookeeper_namespace: network.zookeeper}
    containers.update({plan.broker_namespace(b): name for b, (name, _) in sorted(brokers.items())})
    return plan, containers


def choose_network(attached: Mapping[str, list[str]], zookeeper: str) -> str:
    """The network to act on: the project's network the ZooKeeper container is on (brokers reach it there).
    ``attached`` maps each project network to its containers' names."""
    candidates = sorted(name for name, members in attached.items() if zookeeper in members)
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise FaultError(f"the ZooKeeper container {zookeeper} is on no network of the project: is it running?")
    raise FaultError(f"the ZooKeeper container {zookeeper} is on several networks ({', '.join(candidates)}); "
                     "'kafkasim net --docker' cuts links on a project with one network, as docker-compose.yml has")
