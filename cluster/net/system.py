"""The adapter that runs ``ip``, ``nft`` and ``tc``: every call checked, every failure shown with its command and
what the tool said. Nothing here decides anything; ``topology.py`` and ``actions.py`` say what to run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from cluster.processes import ClusterError

NETNS_DIR = Path("/run/netns")


class NetCommandError(ClusterError):
    """A network command failed; the message holds the command line and its stderr."""


class NotRootError(ClusterError):
    """Network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)."""


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise NotRootError(f"{what} creates network namespaces, a bridge and firewall rules, which needs root: "
                           "run it as root (sudo), or start a cluster on loopback with 'kafkasim up' alone")
    missing = [tool for tool in ("ip", "nft", "tc") if shutil.which(tool) is None]
    if missing:
        raise ClusterError(f"{what} needs {', '.join(missing)}: install iproute2 and nftables "
                           "(apt-get install iproute2 nftables)")


def run(command: list[str], stdin: str | None = None, check: bool = True) -> str:
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NetCommandError(f"{command[0]} is not installed (apt-get install iproute2 nftables)") from None
    if check and done.returncode != 0:
        shown = " ".join(command) + (f" <<'EOF'\n{stdin}EOF" if stdin else "")
        raise NetCommandError(f"'{shown}' failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout


def in_namespace(namespace: str, command: list[str]) -> list[str]:
    return ["ip", "netns", "exec", namespace, *command]


# --- namespaces and links -----------------------------------------------------------------------------

def namespaces() -> list[str]:
    """Every named network namespace (``ip netns list``; the names are files under /run/netns)."""
    return [line.split()[0] for line in run(["ip", "netns", "list"]).splitlines() if line.strip()]


def add_namespace(namespace: str) -> None:
    run(["ip", "netns", "add", namespace])
    run(["ip", "-n", namespace, "link", "set", "lo", "up"])


def delete_namespace(namespace: str) -> None:
    run(["ip", "netns", "delete", namespace])


def namespace_pids(namespace: str) -> list[int]:
    return [int(pid) for pid in run(["ip", "netns", "pids", namespace], check=False).split()]


def namespace_age_s(namespace: str, now: float) -> float:
    try:
        return now - (NETNS_DIR / namespace).stat().st_mtime
    except OSError:
        return float("inf")


def host_links() -> list[str]:
    return [link["ifname"] for link in json.loads(run(["ip", "-j", "link", "show"]) or "[]")]


def link_exists(name: str) -> bool:
    return name in host_links()


def delete_host_link(name: str) -> None:
    run(["ip", "link", "delete", name])


def host_routes() -> list[str]:
    """The destinations of the host's IPv4 routes, in every table."""
    return [route.get("dst", "") for route in json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"])
                                                           or "[]")]


def add_bridge(namespace: str, bridge: str) -> None:
    run(["ip", "-n", namespace, "link", "add", bridge, "type", "bridge"])
    run(["ip", "-n", namespace, "link", "set", bridge, "up"])


def add_host_link(link: str, port: str, namespace: str, bridge: str, address: str) -> None:
    """A veth pair from the host into the bridge's namespace; the host end gets ``address``."""
    run(["ip", "link", "add", link, "type", "veth", "peer", "name", port, "netns", namespace])
    run(["ip", "-n", namespace, "link", "set", port, "master", bridge, "up"])
    run(["ip", "addr", "add", address, "dev", link])
    run(["ip", "link", "set", link, "up"])


def add_member_link(bridge_namespace: str, bridge: str, port: str, namespace: str, inside: str,
                    address: str) -> None:
    """A veth pair between the bridge's namespace (a bridge port) and a process's namespace (``inside``)."""
    run(["ip", "-n", bridge_namespace, "link", "add", port, "type", "veth", "peer", "name", inside,
         "netns", namespace])
    run(["ip", "-n", bridge_namespace, "link", "set", port, "master", bridge, "up"])
    run(["ip", "-n", namespace, "addr", "add", address, "dev", inside])
    run(["ip", "-n", namespace, "link", "set", inside, "up"])


# --- nftables and netem -------------------------------------------------------------------------------

def nft_apply(namespace: str, script: str) -> None:
    run(in_namespace(namespace, ["nft", "-f", "-"]), stdin=script)


def nft_delete_table(namespace: str, table: str) -> bool:
    """Whether there was a table to delete."""
    if not nft_has_table(namespace, table):
        return False
    run(in_namespace(namespace, ["nft", "delete", "table", "inet", table]))
    return True


def nft_has_table(namespace: str, table: str) -> bool:
    listed = run(in_namespace(namespace, ["nft", "list", "tables", "inet"]))
    return f"table inet {table}" in listed.splitlines()


def nft_set_elements(namespace: str, table: str, set_name: str) -> frozenset[str]:
    """The addresses in the namespace's set, empty when the table does not exist."""
    if not nft_has_table(namespace, table):
        return frozenset()
    listed = json.loads(run(in_namespace(namespace, ["nft", "-j", "list", "set", "inet", table, set_name])))
    for item in listed.get("nftables", []):
        if "set" in item:
            return frozenset(str(element) for element in item["set"].get("elem", []))
    return frozenset()


def netem_replace(namespace: str, device: str, arguments: list[str]) -> None:
    try:
        run(["tc", "-n", namespace, "qdisc", "replace", "dev", device, "root", *arguments])
    except NetCommandError as exc:
        if "qdisc kind is unknown" in str(exc):
            raise NetCommandError(f"this kernel has no netem queueing discipline (CONFIG_NET_SCH_NETEM, module "
                                  f"sch_netem), so links cannot be slowed here; cuts still work. {exc}") from None
        raise


def netem_show(namespace: str, device: str) -> str | None:
    """The device's netem qdisc as tc prints it, None when there is none."""
    for line in run(["tc", "-n", namespace, "qdisc", "show", "dev", device]).splitlines():
        if " netem " in line:
            return "netem " + line.split(" netem ", 1)[1].split(" root ", 1)[-1].strip()
    return None


def netem_delete(namespace: str, device: str) -> bool:
    if netem_show(namespace, device) is None:
        return False
    run(["tc", "-n", namespace, "qdisc", "delete", "dev", device, "root"])
    return True
