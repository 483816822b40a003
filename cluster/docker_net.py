"""``kafkasim net ... --docker``: the network faults of a ``--netns`` cluster, made on the docker-compose cluster by
nft rules (and tc netem) inside each container's network namespace. ``cluster/net/faults.py`` computes the cuts
from the compose network's addresses (``cluster/net/compose.py``); the rules in force are read back from the
containers, so nothing is remembered on the host.

Two ways into a container's namespace:

- from the host, ``nsenter --net=/proc/<pid>/ns/net nft ...``: the host's nft and tc, any image (ZooKeeper's
  too); needs root on the machine the engine runs on;
- a short-lived helper container, ``--network container:<id> --cap-add NET_ADMIN``, running nft and tc from the
  kafkasim image (the Dockerfile installs them): enough to be allowed to use the engine, also a remote one.

The first is taken when it can be, the second otherwise; ``KAFKASIM_DOCKER_NET=host|helper`` forces one.
``isolate --from all`` stays a ``docker network disconnect`` (which also cuts clients in other containers);
``heal`` deletes every kafkasim table and netem qdisc and reconnects disconnected brokers.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from cluster.docker_ops import PROJECT_LABEL, SERVICE_LABEL, DockerCluster, _env
from cluster.net import faults
from cluster.net.compose import ComposeNetwork, choose_network, compose_plan
from cluster.net.plan import NetworkPlan, PlanError
from cluster.net.system import NetCommandError, run
from cluster.processes import ClusterError
from traces.faults import record_fault

Say = Callable[[str], None]
MODE_VARIABLE = "KAFKASIM_DOCKER_NET"
HOST_TOOLS = ("nsenter", "nft", "tc")
NO_NETEM = ("this kernel has no netem queueing discipline (CONFIG_NET_SCH_NETEM, module sch_netem), so links "
            "cannot be slowed here; cuts still work")


# --- into a container's network namespace -------------------------------------------------------------------

class HostEntry:
    """``nsenter`` into the namespace of the container's first process, with the host's tools."""

    how = "nsenter from the host"

    def run(self, container, command: list[str], stdin: str | None = None) -> str:
        container.reload()
        pid = container.attrs["State"].get("Pid") or 0
        if not pid:
            raise ClusterError(f"container {container.name} is not running: it has no network namespace")
        return run(["nsenter", f"--net=/proc/{pid}/ns/net", *command], stdin=stdin)


class HelperContainer:
    """A throw-away container of the kafkasim image in the target's namespace, with NET_ADMIN for nft and tc."""

    how = "a helper container"

    def __init__(self, client, image: str) -> None:
        self.client = client
        self.image = image

    def run(self, container, command: list[str], stdin: str | None = None) -> str:
        from docker.errors import APIError, ContainerError, ImageNotFound

        # the script travels as an argument: the SDK's run() has no stdin; sh's $0 is the first one after -c's
        shell = ["sh", "-c", 'printf "%s" "$0" | "$@"', stdin or "", *command]
        try:
            out = self.client.containers.run(
                self.image, shell, network_mode=f"container:{container.id}", cap_add=["NET_ADMIN"], user="0",
                entrypoint=[], healthcheck={"test": ["NONE"]}, labels={"kafkasim.helper": "net"}, remove=True,
                stdout=True, stderr=False)
        except ContainerError as exc:
            said = (exc.stderr or b"").decode(errors="replace").strip()
            if exc.exit_status == 127 or "not found" in said:
                raise ClusterError(
                    f"the kafkasim image {self.image} has no {command[0]} (built before the Dockerfile installed "
                    "nftables and iproute2): rebuild it ('docker compose build' or scripts/build-images.sh), or "
                    "run kafkasim as root on the engine's host, which enters the namespaces with nsenter") from None
            raise NetCommandError(f"'{' '.join(command)}' in {container.name}'s network namespace failed (exit "
                                  f"{exc.exit_status}): {said}") from None
        except (ImageNotFound, APIError) as exc:
            raise ClusterError(f"cannot run a helper container of {self.image} in {container.name}'s network "
                               f"namespace: {getattr(exc, 'explanation', None) or exc}") from None
        return out.decode(errors="replace") if isinstance(out, bytes) else str(out)


def host_entry_missing(client, pid: int) -> list[str]:
    """What keeps kafkasim from entering a container's namespace from the host; empty when nothing does."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    missing += [f"the {tool} command" for tool in HOST_TOOLS if shutil.which(tool) is None]
    base_url = getattr(getattr(client, "api", None), "base_url", "")
    if not base_url.startswith("http+docker://"):  # a unix socket: the engine runs on this machine
        missing.append(f"a local Docker engine (this one is {base_url})")
    elif pid and not os.path.exists(f"/proc/{pid}/ns/net"):
        missing.append("the containers' processes in this machine's /proc (is the engine in another VM?)")
    return missing


def choose_entry(cluster: DockerCluster, mode: str | None = None):
    """nsenter from the host where it works, else the helper container; ``mode`` (or KAFKASIM_DOCKER_NET)
    forces one and says what is missing."""
    mode = (mode or os.environ.get(MODE_VARIABLE) or "auto").lower()
    if mode not in ("auto", "host", "helper"):
        raise ClusterError(f"{MODE_VARIABLE} takes host, helper or auto, got {mode!r}")
    brokers = cluster.brokers()
    running = [c for c in brokers.values() if c.status in ("running", "paused")]
    if not running:
        raise ClusterError(f"no broker container of project {cluster.project} is running")
    if mode != "helper":
        missing = host_entry_missing(cluster.client, running[0].attrs["State"].get("Pid") or 0)
        if not missing:
            return HostEntry()
        if mode == "host":
            raise ClusterError(f"{MODE_VARIABLE}=host needs {', '.join(missing)}; unset it to use a helper "
                               "container of the kafkasim image instead")
    return HelperContainer(cluster.client, running[0].image.id)


# --- the compose network --------------------------------------------------------------------------------------

class DockerNet:
    """The cuts and slow links of one compose project, read from and written into its containers."""

    def __init__(self, cluster: DockerCluster, entry=None) -> None:
        self.cluster = cluster
        self.entry = entry or choose_entry(cluster)

    def zookeeper(self):
        others = [c for c in self.cluster.client.containers.list(
            all=True, filters={"label": f"{PROJECT_LABEL}={self.cluster.project}"}) if "KAFKA_BROKER_ID" not in _env(c)]
        named = [c for c in others if "zookeeper" in c.labels.get(SERVICE_LABEL, "")]
        if len(named) == 1 or len(others) == 1:
            return (named or others)[0]
        raise ClusterError(f"cannot tell ZooKeeper's container among {', '.join(c.name for c in others) or 'none'} "
                           f"in project {self.cluster.project}: name its service zookeeper")

    def network(self) -> tuple[ComposeNetwork, dict[str, object]]:
        """The project's network as ``compose_plan`` takes it, and every member container by name."""
        zookeeper = self.zookeeper()
        brokers = self.cluster.brokers()
        networks = {n.name: n for n in self.cluster.client.networks.list(
            filters={"label": f"{PROJECT_LABEL}={self.cluster.project}"})}
        attached = {name: [c.name for c in (zookeeper, *brokers.values())
                           if name in c.attrs["NetworkSettings"]["Networks"]] for name in networks}
        name = choose_network(attached, zookeeper.name)
        ipam = (networks[name].attrs.get("IPAM") or {}).get("Config") or [{}]
        ipv4 = next((config for config in ipam if "." in config.get("Subnet", "")), None)
        if ipv4 is None:
            raise ClusterError(f"network {name} has no IPv4 subnet; kafkasim's cuts are IPv4 rules")

        def address(container) -> str | None:
            return (container.attrs["NetworkSettings"]["Networks"].get(name) or {}).get("IPAddress") or None

        gateway = ipv4.get("Gateway") or str(next(ipaddress.ip_network(ipv4["Subnet"], strict=False).hosts()))
        network = ComposeNetwork(name, ipv4["Subnet"], gateway, zookeeper.name, address(zookeeper),
                                 {b: (c.name, address(c)) for b, c in brokers.items()})
        members = {zookeeper.name: zookeeper, **{c.name: c for c in brokers.values()}}
        return network, members

    def plan(self, detached_ok: bool = False) -> tuple[NetworkPlan, dict[str, object], ComposeNetwork]:
        """The plan and, by plan namespace name, the container it stands for."""
        network, members = self.network()
        try:
            plan, names = compose_plan(network, detached_ok)
        except faults.FaultError as exc:
            raise ClusterError(str(exc)) from None
        return plan, {namespace: members[name] for namespace, name in names.items()}, network

    # --- nft and tc inside a container ---------------------------------------------------------------------

    @staticmethod
    def _alive(container) -> bool:
        container.reload()
        return container.status in ("running", "paused")  # a paused container keeps its namespace

    def has_table(self, container) -> bool:
        listed = self.entry.run(container, ["nft", "list", "tables", "inet"])
        return f"table inet {faults.TABLE}" in listed.splitlines()

    def blocked(self, container) -> frozenset[str]:
        if not self._alive(container) or not self.has_table(container):
            return frozenset()
        listed = json.loads(self.entry.run(container, ["nft", "-j", "list", "set", "inet", faults.TABLE,
                                                       faults.BLOCKED_SET]))
        for item in listed.get("nftables", []):
            if "set" in item:
                return frozenset(str(element) for element in item["set"].get("elem", []))
        return frozenset()

    def current_cuts(self, containers: dict[str, object]) -> faults.Cuts:
        cuts = {}
        for namespace, container in containers.items():
            peers = self.blocked(container)
            if peers:
                cuts[namespace] = peers
        return cuts

    def apply(self, containers: dict[str, object], added: faults.Cuts) -> faults.Cuts:
        before = self.current_cuts(containers)
        after = faults.merge(before, added)
        for namespace, peers in after.items():
            if peers != before.get(namespace):
                self.entry.run(containers[namespace], ["nft", "-f", "-"], stdin=faults.ruleset(peers))
        return after

    def device(self, container, address: str) -> str:
        """The interface that holds ``address`` in the container (eth0 on a one-network project)."""
        for link in json.loads(self.entry.run(container, ["ip", "-j", "-4", "addr", "show"]) or "[]"):
            if any(info.get("local") == address for info in link.get("addr_info", [])):
                return link["ifname"]
        raise ClusterError(f"no interface of {container.name} holds {address}")

    def netem_show(self, container, device: str) -> str | None:
        for line in self.entry.run(container, ["tc", "qdisc", "show", "dev", device]).splitlines():
            if " netem " in line:
                return "netem " + line.split(" netem ", 1)[1].split(" root ", 1)[-1].strip()
        return None

    def netem_replace(self, container, device: str, arguments: list[str]) -> None:
        try:
            self.entry.run(container, ["tc", "qdisc", "replace", "dev", device, "root", *arguments])
        except NetCommandError as exc:
            if "qdisc kind is unknown" in str(exc) or "Unknown qdisc" in str(exc):
                raise ClusterError(f"{NO_NETEM}. {exc}") from None
            raise

    def interfaces(self, container) -> list[str]:
        return [link["ifname"] for link in json.loads(self.entry.run(container, ["ip", "-j", "link", "show"]) or "[]")
                if link["ifname"] != "lo"]

    # --- the actions ---------------------------------------------------------------------------------------

    def record(self, action: str, target: str, broker_id: int = -1, detail: str = "") -> None:
        # before the cut, as for --netns: the fault precedes every effect it has in the brokers' traces
        record_fault(self.cluster.tools_trace, action, target, broker_id=broker_id, detail=detail)

    def isolate(self, broker_id: int, peers: str, say: Say = print) -> faults.Cuts:
        self.cluster.container(broker_id)
        if peers == "all":
            # off the network altogether: clients in other containers and on other machines lose it too
            self.cluster.disconnect(broker_id)
            say(f"broker {broker_id} cut off from all (disconnected from the compose network)")
            return {}
        plan, containers, _network = self.plan()
        added = faults.isolate(plan, broker_id, peers)
        namespace = plan.broker_namespace(broker_id)
        self.record("isolate", f"broker {broker_id} (container {containers[namespace].name})", broker_id,
                    f"from {peers}: drops {', '.join(sorted(plan.who(a) for a in added[namespace]))}")
        cuts = self.apply(containers, added)
        say(f"broker {broker_id} cut off from {peers}")
        return cuts

    def partition(self, arguments: list[str], say: Say = print) -> faults.Cuts:
        plan, containers, _network = self.plan()
        sides = faults.parse_sides(arguments, plan.broker_addresses)
        self.record("partition", sides.describe(),
                    detail="zookeeper on both sides" if sides.zookeeper is None
                    else f"zookeeper on the {sides.zookeeper}")
        cuts = self.apply(containers, faults.partition(plan, sides))
        say(f"partitioned: {sides.describe()}"
            + (" (ZooKeeper reachable from both sides)" if sides.zookeeper is None else ""))
        return cuts

    def slow(self, broker_id: int, delay_ms: int, jitter_ms: int, loss_percent: float, say: Say = print) -> str:
        """netem on the egress of the broker container's interface on the compose network."""
        arguments = faults.netem_arguments(delay_ms, jitter_ms, loss_percent)
        plan, containers, _network = self.plan()
        address = plan.broker_address(broker_id)
        container = containers[plan.broker_namespace(broker_id)]
        self.netem_replace(container, self.device(container, address), arguments)
        # recorded after, as for --netns: a kernel without netem refuses it, and the trace must not show it
        self.record("slow", f"broker {broker_id} (container {container.name})", broker_id, " ".join(arguments))
        say(f"broker {broker_id} sends through {' '.join(arguments)}")
        return " ".join(arguments)

    def heal(self, say: Say = print) -> list[str]:
        self.record("heal", f"network of compose project {self.cluster.project}")
        network, members = self.network()
        healed = []
        names = {network.zookeeper: "zookeeper",
                 **{name: f"broker {b}" for b, (name, _) in sorted(network.brokers.items())}}
        for name in names:  # ZooKeeper, then the brokers by id
            container = members[name]
            if not self._alive(container):
                continue  # a stopped container's namespace, and its rules, went with it
            if self.has_table(container):
                self.entry.run(container, ["nft", "delete", "table", "inet", faults.TABLE])
                healed.append(f"{names[name]} (cuts)")
            for device in self.interfaces(container):
                if self.netem_show(container, device) is not None:
                    self.entry.run(container, ["tc", "qdisc", "delete", "dev", device, "root"])
                    healed.append(f"{names[name]} (slow link)")
        for broker_id, (_name, address) in sorted(network.brokers.items()):
            if address is None and self._detached(broker_id, network.name):
                self.cluster.connect(broker_id)
                healed.append(f"broker {broker_id} (reconnected)")
        say("healed: " + (", ".join(healed) if healed else "nothing was cut or slowed"))
        return healed

    def _detached(self, broker_id: int, network: str) -> bool:
        """Off the network, not merely stopped (a stopped container keeps its networks, without an address)."""
        return network not in self.cluster.container(broker_id).attrs["NetworkSettings"]["Networks"]

    def status(self, say: Say = print) -> list[str]:
        plan, containers, network = self.plan(detached_ok=True)
        slowed = {}
        for namespace, container in containers.items():
            if self._alive(container):
                for device in self.interfaces(container):
                    qdisc = self.netem_show(container, device)
                    if qdisc is not None:
                        slowed[namespace] = qdisc
        lines = faults.describe(plan, self.current_cuts(containers), slowed)
        lines += [f"broker {b} is disconnected from {network.name}" for b, (name, address)
                  in sorted(network.brokers.items()) if address is None and self._detached(b, network.name)]
        lines += [f"broker {b} is not running" for b, (name, address) in sorted(network.brokers.items())
                  if address is None and not self._detached(b, network.name)]
        say(f"network {network.name} {plan.subnet} (rules made by {self.entry.how}): clients (host, via the "
            f"gateway) {plan.host_address}, zookeeper {plan.zookeeper_address}, "
            + ", ".join(f"broker {b} {a}" for b, a in sorted(plan.broker_addresses.items())))
        for line in lines or ["nothing is cut or slowed"]:
            say(line)
        return lines


def run_net_command(command: str, project: str | None, tools_dir: Path, broker_id: int | None = None,
                    peers: str | None = None, sides: list[str] | None = None, delay_ms: int = 0, jitter_ms: int = 0,
                    loss_percent: float = 0.0) -> int:
    """``kafkasim net isolate|partition|heal|slow|status --docker``."""
    cluster = DockerCluster.find(project, tools_dir)
    net = DockerNet(cluster)
    try:
        if command == "isolate":
            net.isolate(broker_id, peers)
        elif command == "partition":
            net.partition(sides or [])
        elif command == "heal":
            net.heal()
        elif command == "slow":
            net.slow(broker_id, delay_ms, jitter_ms, loss_percent)
        elif command == "status":
            net.status()
        else:
            raise ClusterError(f"kafkasim net {command} has no --docker form: 'kafkasim net heal --docker' removes "
                               "every rule, and 'docker compose down -v' the whole cluster")
    except (faults.FaultError, PlanError) as exc:
        raise ClusterError(str(exc)) from None
    return 0
