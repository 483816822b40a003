"""The network plan of a ``kafkasim up --netns`` cluster, pure: names and addresses from a tag, a subnet and the
broker ids. Nothing here touches the system; ``cluster/net/system.py`` carries the plan out.

Every name starts with kafkasim's prefix and carries the cluster's tag, so two clusters (or the leftovers of a
crashed run) never clash and ``kafkasim net clean`` can find leftovers by name alone.

Layout: the bridge lives in a namespace of its own (``kafkasim-<tag>-net``), not on the host. A host bridge's
traffic between two of its ports goes through the host's FORWARD chain when br_netfilter is loaded, and Docker
sets that chain's policy to DROP: brokers could not reach each other. The host joins the bridge through one veth
pair, its end carrying the host address, so clients on the host reach every broker's advertised address and
nothing is routed anywhere else.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass

NAMESPACE_PREFIX = "kafkasim-"
LINK_PREFIX = "ksim"
IFNAMSIZ = 15  # Linux interface names are at most 15 characters
DEFAULT_SUBNET = "10.77.0.0/24"
TAG_LENGTH = 6
# the host end of the host's veth pair, the namespaces, and the veth inside each namespace
_TAG = f"[0-9a-f]{{{TAG_LENGTH}}}"
NAMESPACE_PATTERN = re.compile(rf"^{NAMESPACE_PREFIX}({_TAG})-(net|zk|b\d+)$")
HOST_LINK_PATTERN = re.compile(rf"^{LINK_PREFIX}({_TAG})h$")
INSIDE_LINK = "eth0"
ZOOKEEPER_PORT = 2181
# the first broker address is this far into the subnet (.1 is the host, .2 ZooKeeper), so broker 3 is .13
BROKER_OFFSET = 10


class PlanError(ValueError):
    """The requested network cannot be laid out; the message says what to choose instead."""


def new_tag() -> str:
    return secrets.token_hex(TAG_LENGTH // 2)


@dataclass(frozen=True)
class NetworkPlan:
    """What ``cluster.json`` records under ``network``: enough for every later command to find everything."""

    tag: str
    subnet: str
    host_address: str
    zookeeper_address: str
    broker_addresses: dict[int, str]

    @property
    def prefix_length(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen

    @property
    def bridge_namespace(self) -> str:
        return f"{NAMESPACE_PREFIX}{self.tag}-net"

    @property
    def zookeeper_namespace(self) -> str:
        return f"{NAMESPACE_PREFIX}{self.tag}-zk"

    def broker_namespace(self, broker_id: int) -> str:
        return f"{NAMESPACE_PREFIX}{self.tag}-b{broker_id}"

    @property
    def bridge(self) -> str:
        return f"{LINK_PREFIX}{self.tag}"

    @property
    def host_link(self) -> str:
        """The host's end of its veth pair; it carries the host address."""
        return f"{LINK_PREFIX}{self.tag}h"

    @property
    def host_port(self) -> str:
        """The other end of the host's pair: a port of the bridge."""
        return f"{LINK_PREFIX}{self.tag}hp"

    @property
    def zookeeper_port(self) -> str:
        return f"{LINK_PREFIX}{self.tag}zk"

    def broker_port(self, broker_id: int) -> str:
        return f"{LINK_PREFIX}{self.tag}b{broker_id}"

    def broker_address(self, broker_id: int) -> str:
        try:
            return self.broker_addresses[broker_id]
        except KeyError:
            raise PlanError(f"broker {broker_id} is not part of this cluster (brokers: "
                            f"{', '.join(map(str, sorted(self.broker_addresses)))})") from None

    @property
    def member_namespaces(self) -> dict[str, str]:
        """Each process's namespace (ZooKeeper first), by the name ``net status`` uses for it."""
        names = {"zookeeper": self.zookeeper_namespace}
        names.update({f"broker {b}": self.broker_namespace(b) for b in sorted(self.broker_addresses)})
        return names

    @property
    def namespaces(self) -> list[str]:
        return [self.bridge_namespace, *self.member_namespaces.values()]

    def who(self, address: str) -> str:
        """The name of whoever has ``address`` in this plan."""
        if address == self.host_address:
            return "clients"
        if address == self.zookeeper_address:
            return "zookeeper"
        for broker_id, own in self.broker_addresses.items():
            if own == address:
                return f"broker {broker_id}"
        return address

    def as_dict(self) -> dict:
        # JSON keys are strings; from_dict turns the broker ids back into numbers
        return asdict(self) | {"broker_addresses": {str(b): a for b, a in self.broker_addresses.items()}}

    @classmethod
    def from_dict(cls, raw: dict) -> NetworkPlan:
        return cls(raw["tag"], raw["subnet"], raw["host_address"], raw["zookeeper_address"],
                   {int(b): a for b, a in raw["broker_addresses"].items()})


def plan_network(subnet: str, broker_ids: list[int], tag: str) -> NetworkPlan:
    """Host .1, ZooKeeper .2, broker N at .(10 + N) of ``subnet``."""
    try:
        network = ipaddress.ip_network(subnet, strict=True)
    except ValueError as exc:
        raise PlanError(f"--subnet {subnet!r} is not a network address with a prefix, e.g. {DEFAULT_SUBNET} "
                        f"({exc})") from None
    if network.version != 4:
        raise PlanError(f"--subnet {subnet} is IPv6; kafkasim lays out an IPv4 subnet, e.g. {DEFAULT_SUBNET}")
    if not re.fullmatch(_TAG, tag):
        raise PlanError(f"tag {tag!r} must be {TAG_LENGTH} lowercase hex digits")
    highest = BROKER_OFFSET + max(broker_ids, default=0)
    if highest >= network.num_addresses - 1:
        fitting = 32 - (highest + 1).bit_length()
        raise PlanError(f"--subnet {subnet} has no room for broker {max(broker_ids)} (it would be host "
                        f"{highest} of {network.num_addresses - 2}): choose a /{fitting} or larger")
    plan = NetworkPlan(tag, str(network), str(network[1]), str(network[2]),
                       {b: str(network[BROKER_OFFSET + b]) for b in broker_ids})
    too_long = [name for name in (plan.bridge, plan.host_link, plan.host_port, plan.zookeeper_port,
                                  *map(plan.broker_port, broker_ids)) if len(name) > IFNAMSIZ]
    if too_long:
        raise PlanError(f"interface names {too_long} would exceed Linux's {IFNAMSIZ} characters: "
                        "use broker ids below 10000")
    return plan


def overlapping(subnet: str, routed: list[str]) -> list[str]:
    """Which of the host's routed networks ``subnet`` would collide with (the default route never does)."""
    wanted = ipaddress.ip_network(subnet)
    clashes = []
    for destination in routed:
        if destination == "default":
            continue
        try:
            network = ipaddress.ip_network(destination, strict=False)
        except ValueError:
            continue
        if network.version == wanted.version and network.overlaps(wanted):
            clashes.append(destination)
    return clashes


def free_subnet(routed: list[str], pick: Callable[[list[str]], str] = secrets.choice) -> str:
    """A /24 under 10.231.0.0/16, from .40 up, that none of ``routed`` overlaps: for a tool that starts a
    --netns cluster of its own (a scenario) beside others on the machine. Picked at random among the free ones,
    so two tools starting at once rarely reach for the same one (``check_free`` refuses the loser)."""
    free = [subnet for third in range(40, 256) if not overlapping(subnet := f"10.231.{third}.0/24", routed)]
    if not free:
        raise PlanError("every /24 from 10.231.40.0 to 10.231.255.0 is routed on this host already: stop a "
                        "--netns cluster ('kafkasim down', 'kafkasim net clean') or give a --subnet")
    return pick(free)


def tag_of(name: str) -> str | None:
    """The cluster tag in one of kafkasim's namespace or host-link names, None for anything else."""
    match = NAMESPACE_PATTERN.match(name) or HOST_LINK_PATTERN.match(name)
    return match.group(1) if match else None
