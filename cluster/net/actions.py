"""``kafkasim net``: the fault actions on a ``--netns`` cluster. Each reads the cuts in force from the namespaces
themselves (the kernel is the record, so a crashed tool leaves nothing stale behind), computes the new ones with
``faults.py``, writes the fault to the tools' trace, then applies it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cluster.net import faults, system
from cluster.net.plan import INSIDE_LINK, NetworkPlan
from cluster.net.topology import plan_from_spec
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec
from traces.faults import TOOLS_TRACE_FILE, record_fault

Say = Callable[[str], None]

NOT_NETNS = ("this cluster runs on loopback, where links cannot be cut one by one: start it with "
             "'kafkasim up --netns' (as root). For the docker-compose cluster, 'kafkasim disconnect BROKER --docker' "
             "(or 'kafkasim net isolate BROKER --from all --docker') cuts a broker off the compose network, "
             "'kafkasim connect BROKER --docker' puts it back")


def netns_plan(data_dir: Path) -> tuple[ClusterSpec, NetworkPlan]:
    spec = ClusterLayout(data_dir).load()
    plan = plan_from_spec(spec.network)
    if plan is None:
        raise ClusterError(NOT_NETNS)
    system.require_root("kafkasim net")
    if plan.bridge_namespace not in system.namespaces():
        raise ClusterError(f"the network of the cluster in {data_dir} (tag {plan.tag}) is gone, the cluster is "
                           "down: 'kafkasim up --netns' starts one")
    return spec, plan


def current_cuts(plan: NetworkPlan) -> faults.Cuts:
    cuts = {}
    for namespace in plan.member_namespaces.values():
        peers = system.nft_set_elements(namespace, faults.TABLE, faults.BLOCKED_SET)
        if peers:
            cuts[namespace] = peers
    return cuts


def _apply(plan: NetworkPlan, added: faults.Cuts) -> faults.Cuts:
    before = current_cuts(plan)
    after = faults.merge(before, added)
    for namespace, peers in after.items():
        if peers != before.get(namespace):
            system.nft_apply(namespace, faults.ruleset(peers))
    return after


def _record(data_dir: Path, action: str, target: str, broker_id: int = -1, detail: str = "") -> None:
    # recorded before the cut, so the fault precedes every effect it has in the brokers' traces
    record_fault(data_dir / TOOLS_TRACE_FILE, action, target, broker_id=broker_id, detail=detail)


def isolate(data_dir: Path, broker_id: int, peers: str, say: Say = print) -> faults.Cuts:
    _spec, plan = netns_plan(data_dir)
    added = faults.isolate(plan, broker_id, peers)
    _record(data_dir, "isolate", f"broker {broker_id}", broker_id,
            f"from {peers}: drops {', '.join(sorted(plan.who(a) for a in added[plan.broker_namespace(broker_id)]))}")
    cuts = _apply(plan, added)
    say(f"broker {broker_id} cut off from {peers}")
    return cuts


def partition(data_dir: Path, arguments: list[str], say: Say = print) -> faults.Cuts:
    _spec, plan = netns_plan(data_dir)
    sides = faults.parse_sides(arguments, plan.broker_addresses)
    _record(data_dir, "partition", sides.describe(),
            detail="zookeeper on both sides" if sides.zookeeper is None else f"zookeeper on the {sides.zookeeper}")
    cuts = _apply(plan, faults.partition(plan, sides))
    say(f"partitioned: {sides.describe()}"
        + (" (ZooKeeper reachable from both sides)" if sides.zookeeper is None else ""))
    return cuts


def heal(data_dir: Path, say: Say = print) -> list[str]:
    """Every cut and every slow link of the cluster removed."""
    _spec, plan = netns_plan(data_dir)
    _record(data_dir, "heal", "network")
    healed = heal_plan(plan)
    say("healed: " + (", ".join(healed) if healed else "nothing was cut or slowed"))
    return healed


def heal_plan(plan: NetworkPlan) -> list[str]:
    healed = []
    present = set(system.namespaces())
    for name, namespace in plan.member_namespaces.items():
        if namespace not in present:
            continue  # removed already (a `down` or `net clean` that was interrupted): nothing in it to heal
        if system.nft_delete_table(namespace, faults.TABLE):
            healed.append(f"{name} (cuts)")
        if system.netem_delete(namespace, INSIDE_LINK):
            healed.append(f"{name} (slow link)")
    return healed


def slow(data_dir: Path, broker_id: int, delay_ms: int, jitter_ms: int, loss_percent: float,
         say: Say = print) -> str:
    """netem on the egress of the broker's own veth end: everything it sends (answers to clients, fetches,
    ZooKeeper heartbeats) is delayed or lost."""
    _spec, plan = netns_plan(data_dir)
    plan.broker_address(broker_id)
    arguments = faults.netem_arguments(delay_ms, jitter_ms, loss_percent)
    system.netem_replace(plan.broker_namespace(broker_id), INSIDE_LINK, arguments)
    # recorded after, unlike the cuts: a kernel without netem refuses it, and the trace must not show a fault
    # that never was; a delay starts no sharp sequence of events to order anyway
    _record(data_dir, "slow", f"broker {broker_id}", broker_id, " ".join(arguments))
    say(f"broker {broker_id} sends through {' '.join(arguments)}")
    return " ".join(arguments)


def status(data_dir: Path, say: Say = print) -> list[str]:
    _spec, plan = netns_plan(data_dir)
    slowed = {}
    for namespace in plan.member_namespaces.values():
        qdisc = system.netem_show(namespace, INSIDE_LINK)
        if qdisc is not None:
            slowed[namespace] = qdisc
    lines = faults.describe(plan, current_cuts(plan), slowed)
    say(f"network {plan.subnet} (tag {plan.tag}): clients (host) {plan.host_address}, zookeeper "
        f"{plan.zookeeper_address}, " + ", ".join(f"broker {b} {a}" for b, a in sorted(plan.broker_addresses.items())))
    for line in lines or ["nothing is cut or slowed"]:
        say(line)
    return lines


def clean(data_dir: Path, stale_after_s: float, say: Say = print) -> list[str]:
    """After a crash: the recorded cluster's processes stopped by their PID files, its network removed, and
    leftovers of other runs found by name."""
    from cluster.net import topology
    from cluster.processes import stop_process

    system.require_root("kafkasim net clean")
    layout = ClusterLayout(data_dir)
    plan = None
    if layout.spec_path.exists():
        spec = layout.load()
        plan = plan_from_spec(spec.network)
        if plan is not None:
            for broker in spec.brokers:
                if stop_process(layout.broker_pid(broker.broker_id), 5.0):
                    say(f"broker {broker.broker_id} stopped")
            if stop_process(layout.zookeeper_pid(), 5.0):
                say("ZooKeeper stopped")
    return topology.clean(plan, stale_after_s, say)
