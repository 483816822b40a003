"""Building and removing a ``--netns`` cluster's network from its plan, and finding what a crashed run left."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster.net import system
from cluster.net.plan import INSIDE_LINK, NetworkPlan, PlanError, overlapping, tag_of
from cluster.processes import ClusterError

Say = Callable[[str], None]


def check_free(plan: NetworkPlan) -> None:
    """Refuses a plan whose names exist or whose subnet the host already routes (two clusters on one subnet
    would each answer for the other's addresses)."""
    taken = [ns for ns in plan.namespaces if ns in system.namespaces()]
    if taken or system.link_exists(plan.host_link):
        raise ClusterError(f"network names of tag {plan.tag} exist already ({', '.join(taken) or plan.host_link}): "
                           "'kafkasim net clean' removes leftovers")
    clashes = overlapping(plan.subnet, system.host_routes())
    if clashes:
        raise ClusterError(f"subnet {plan.subnet} overlaps networks this host already routes ({', '.join(clashes)}),"
                           " perhaps another --netns cluster: choose another with --subnet, e.g. 10.78.0.0/24")


def build(plan: NetworkPlan) -> None:
    """Namespaces, the bridge, one veth pair per process and one for the host. On failure, what was made is
    removed again before the error goes up."""
    try:
        system.add_namespace(plan.bridge_namespace)
        system.add_bridge(plan.bridge_namespace, plan.bridge)
        system.add_host_link(plan.host_link, plan.host_port, plan.bridge_namespace, plan.bridge,
                             f"{plan.host_address}/{plan.prefix_length}")
        members = [(plan.zookeeper_namespace, plan.zookeeper_port, plan.zookeeper_address)]
        members += [(plan.broker_namespace(b), plan.broker_port(b), address)
                    for b, address in sorted(plan.broker_addresses.items())]
        for namespace, port, address in members:
            system.add_namespace(namespace)
            system.add_member_link(plan.bridge_namespace, plan.bridge, port, namespace, INSIDE_LINK,
                                   f"{address}/{plan.prefix_length}")
    except BaseException:  # an interrupt (Ctrl-C, SIGTERM) too: a campaign stopped mid-build left namespaces behind
        remove(plan)
        raise


def remove(plan: NetworkPlan) -> list[str]:
    """Deletes the host's veth and every namespace of the plan (their veths, bridge, nft tables and qdiscs go
    with them); returns what it removed. The host link goes first and explicitly: as the peer of a link in a
    deleted namespace it would also vanish, but only some time later."""
    return remove_names([plan.host_link] if system.link_exists(plan.host_link) else [],
                        [ns for ns in plan.namespaces if ns in system.namespaces()])


def remove_names(links: list[str], namespaces: list[str]) -> list[str]:
    removed, problems = [], []
    for link in links:
        try:
            system.delete_host_link(link)
            removed.append(f"link {link}")
        except system.NetCommandError as exc:
            problems.append(str(exc))
    for namespace in namespaces:
        busy = system.namespace_pids(namespace)
        if busy:
            # a namespace lives on, nameless, while a process is in it: say so rather than leak it quietly
            problems.append(f"namespace {namespace} still has processes {busy}: stop them, then run "
                            "'kafkasim net clean' again")
            continue
        try:
            system.delete_namespace(namespace)
            removed.append(f"namespace {namespace}")
        except system.NetCommandError as exc:
            problems.append(str(exc))
    if problems:
        raise ClusterError("could not remove everything:\n  " + "\n  ".join(problems))
    return removed


@dataclass
class Leftovers:
    """kafkasim's namespaces and host links on this machine, grouped by cluster tag."""

    namespaces: dict[str, list[str]] = field(default_factory=dict)
    links: dict[str, list[str]] = field(default_factory=dict)

    @property
    def tags(self) -> set[str]:
        return set(self.namespaces) | set(self.links)


def find_by_prefix() -> Leftovers:
    found = Leftovers()
    for namespace in system.namespaces():
        if (tag := tag_of(namespace)) is not None:
            found.namespaces.setdefault(tag, []).append(namespace)
    for link in system.host_links():
        if (tag := tag_of(link)) is not None:
            found.links.setdefault(tag, []).append(link)
    return found


def idle_tags(found: Leftovers, stale_after_s: float, keep: set[str]) -> list[str]:
    """Tags no process uses any more and that are older than ``stale_after_s``: a cluster being started right now
    (namespaces made, processes not yet in them) or still running elsewhere is never taken for a leftover."""
    now = time.time()
    idle = []
    for tag in sorted(found.tags - keep):
        namespaces = found.namespaces.get(tag, [])
        if any(system.namespace_pids(ns) for ns in namespaces):
            continue
        if any(system.namespace_age_s(ns, now) < stale_after_s for ns in namespaces):
            continue
        idle.append(tag)
    return idle


def clean(plan: NetworkPlan | None, stale_after_s: float, say: Say) -> list[str]:
    """What the spec records, then every idle leftover found by the kafkasim prefix."""
    removed = remove(plan) if plan is not None else []
    found = find_by_prefix()
    for tag in idle_tags(found, stale_after_s, keep=set()):
        removed += remove_names(found.links.get(tag, []), found.namespaces.get(tag, []))
    for line in removed:
        say(f"removed {line}")
    if not removed:
        say("nothing to remove: no kafkasim namespace or link is left over")
    return removed


def plan_from_spec(raw: dict | None) -> NetworkPlan | None:
    if raw is None:
        return None
    try:
        return NetworkPlan.from_dict(raw)
    except (KeyError, TypeError, PlanError) as exc:
        raise ClusterError(f"the network recorded in cluster.json is unreadable ({exc}): "
                           "'kafkasim net clean' still finds leftovers by name") from None
