"""The network faults of a ``--netns`` cluster as data, pure: who stops hearing whom, the nftables ruleset that
makes it so in one namespace, the netem arguments of a slow broker, and the sides of a partition.

A cut is a set of peer addresses a namespace drops, in both directions, in its own ``table inet kafkasim``.
Faults add to these sets; ``kafkasim net heal`` deletes the tables. Packets are dropped, not rejected, as a
broken switch or cable would: TCP connections hang until their timeouts instead of failing at once, which is
what ZooKeeper sessions and ``replica.lag.time.max.ms`` are there to notice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cluster.net.plan import NetworkPlan

TABLE = "kafkasim"
BLOCKED_SET = "blocked"
ISOLATE_FROM = ("zookeeper", "brokers", "clients", "all")
ZOOKEEPER_NAMES = ("zk", "zookeeper")

# namespace -> peer addresses it drops
Cuts = dict[str, frozenset[str]]


class FaultError(ValueError):
    """A fault cannot be made as asked; the message says how to ask instead."""


def isolate(plan: NetworkPlan, broker_id: int, peers: str) -> Cuts:
    """The cuts that keep ``broker_id`` from hearing ``peers`` (zookeeper, brokers, clients or all) and them
    from hearing it; made in the broker's namespace alone, since all its traffic passes there."""
    if peers not in ISOLATE_FROM:
        raise FaultError(f"--from takes one of {', '.join(ISOLATE_FROM)}, got {peers!r}")
    own = plan.broker_address(broker_id)
    addresses: set[str] = set()
    if peers in ("zookeeper", "all"):
        addresses.add(plan.zookeeper_address)
    if peers in ("brokers", "all"):
        addresses.update(a for a in plan.broker_addresses.values() if a != own)
    if peers in ("clients", "all"):
        addresses.add(plan.host_address)
    if not addresses:
        raise FaultError(f"broker {broker_id} is the only broker: there are no other brokers to cut it from")
    return {plan.broker_namespace(broker_id): frozenset(addresses)}


@dataclass(frozen=True)
class Sides:
    """The two sides of a partition: broker ids, and whether ZooKeeper is on that side."""

    left: frozenset[int]
    right: frozenset[int]
    zookeeper: str | None = None  # "left", "right", or None: reachable from both sides

    def describe(self) -> str:
        def side(brokers: frozenset[int], name: str) -> str:
            members = [str(b) for b in sorted(brokers)] + (["zk"] if self.zookeeper == name else [])
            return ",".join(members)
        return f"{side(self.left, 'left')} | {side(self.right, 'right')}"


def parse_sides(arguments: list[str], broker_ids: Iterable[int]) -> Sides:
    """``1,2 3`` or ``1,2,zk 3``; one side alone (``1``) leaves every other broker on the other side.
    ZooKeeper stays reachable from both sides unless a side names it (``zk`` or ``zookeeper``)."""
    known = set(broker_ids)
    if not 1 <= len(arguments) <= 2:
        raise FaultError(f"a partition has two sides, e.g. 'kafkasim net partition 1,2 3' (got {len(arguments)} "
                         "arguments); give one side alone to put every other broker on the other")
    sides: list[set[int]] = []
    zookeeper = None
    seen: set[int] = set()
    for index, text in enumerate(arguments):
        members: set[int] = set()
        for item in (part.strip() for part in text.split(",")):
            if item.lower() in ZOOKEEPER_NAMES:
                if zookeeper is not None:
                    raise FaultError("ZooKeeper is named on both sides; name it on one side, or on none to keep "
                                     "it reachable from both")
                zookeeper = ("left", "right")[index]
                continue
            if not item.isdigit():
                raise FaultError(f"{item!r} in side {text!r} is neither a broker id nor zk; a side is a "
                                 "comma-separated list like 1,2 or 1,zk")
            broker = int(item)
            if broker not in known:
                raise FaultError(f"broker {broker} is not part of this cluster "
                                 f"(brokers: {', '.join(map(str, sorted(known)))})")
            if broker in seen:
                raise FaultError(f"broker {broker} is named twice; each broker is on one side")
            seen.add(broker)
            members.add(broker)
        sides.append(members)
    if len(sides) == 1:
        sides.append(known - sides[0])
    left, right = sides
    if not left or not right:
        raise FaultError("each side of a partition needs at least one broker "
                         f"(brokers: {', '.join(map(str, sorted(known)))})")
    missing = known - left - right
    if missing:
        raise FaultError(f"brokers {sorted(missing)} are on neither side: list every broker, or give one side "
                         "alone to put the rest on the other")
    return Sides(frozenset(left), frozenset(right), zookeeper)


def partition(plan: NetworkPlan, sides: Sides) -> Cuts:
    """Every member of one side drops every member of the other, ZooKeeper included when a side names it."""
    def addresses(brokers: frozenset[int], name: str) -> set[str]:
        found = {plan.broker_address(b) for b in brokers}
        if sides.zookeeper == name:
            found.add(plan.zookeeper_address)
        return found

    left, right = addresses(sides.left, "left"), addresses(sides.right, "right")
    cuts: Cuts = {}
    for brokers, name, other in ((sides.left, "left", right), (sides.right, "right", left)):
        for broker in brokers:
            cuts[plan.broker_namespace(broker)] = frozenset(other)
        if sides.zookeeper == name:
            cuts[plan.zookeeper_namespace] = frozenset(other)
    return cuts


def merge(current: Mapping[str, frozenset[str]], added: Mapping[str, frozenset[str]]) -> Cuts:
    """Faults accumulate: a namespace keeps dropping what it dropped and drops the new peers too."""
    merged = dict(current)
    for namespace, peers in added.items():
        merged[namespace] = merged.get(namespace, frozenset()) | peers
    return merged


def ruleset(peers: Iterable[str]) -> str:
    """An nft script that replaces the namespace's kafkasim table with one dropping ``peers`` both ways.

    ``add`` before ``delete`` makes the delete succeed when there was no table yet; nft applies the whole
    script as one transaction, so no packet sees a half-built table."""
    elements = ", ".join(sorted(peers))
    return "\n".join([
        f"add table inet {TABLE}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        f"  set {BLOCKED_SET} {{ type ipv4_addr; elements = {{ {elements} }} }}",
        # before conntrack and everything else in the namespace: established connections are cut too
        "  chain input { type filter hook input priority -400; policy accept; "
        f"ip saddr @{BLOCKED_SET} drop; }}",
        "  chain output { type filter hook output priority -400; policy accept; "
        f"ip daddr @{BLOCKED_SET} drop; }}",
        "}",
        "",
    ])


def netem_arguments(delay_ms: int, jitter_ms: int = 0, loss_percent: float = 0.0) -> list[str]:
    """The ``tc qdisc replace ... root netem`` arguments for a slow, lossy link."""
    if delay_ms < 0 or jitter_ms < 0:
        raise FaultError("--delay-ms and --jitter-ms cannot be negative")
    if jitter_ms > delay_ms:
        raise FaultError(f"--jitter-ms {jitter_ms} is larger than --delay-ms {delay_ms}: netem would need "
                         "negative delays")
    if not 0 <= loss_percent <= 100:
        raise FaultError(f"--loss is a percentage between 0 and 100, got {loss_percent}")
    if delay_ms == 0 and loss_percent == 0:
        raise FaultError("nothing to slow down: give --delay-ms above 0 or --loss above 0 "
                         "('kafkasim net heal' removes a slow link)")
    arguments = ["netem", "delay", f"{delay_ms}ms"]
    if jitter_ms:
        arguments.append(f"{jitter_ms}ms")
    if loss_percent:
        arguments += ["loss", f"{loss_percent:g}%"]
    return arguments


def describe(plan: NetworkPlan, cuts: Mapping[str, frozenset[str]], slow: Mapping[str, str]) -> list[str]:
    """One line per process that is cut off or slowed, in plan order; empty when the network is whole."""
    lines = []
    for name, namespace in plan.member_namespaces.items():
        peers = cuts.get(namespace, frozenset())
        if peers:
            lines.append(f"{name} drops traffic with {', '.join(sorted(plan.who(a) for a in peers))}")
        if namespace in slow:
            lines.append(f"{name} sends through {slow[namespace]}")
    return lines
