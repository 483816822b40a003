"""Carries out the steps of a nemesis schedule on a cluster of `kafkasim up`: each kind knows how to start its
fault and how to end it, and ``heal`` ends everything, whatever a failed step left behind.

Every action is also written to the tools' trace (``record_fault``), so `kafkasim traces collect` and the
analysis see the faults next to the brokers' own events.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from cluster.admin import read_cluster_state
from cluster.chaos.history import NEMESIS_KINDS
from cluster.chaos.schedule import NemesisStep
from cluster.lifecycle import start_broker, start_zookeeper, stop_zookeeper
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec, stop_process
from traces.faults import TOOLS_TRACE_FILE, record_fault
from zk.client import connected

# kinds that need a part of kafkasim this run's cluster may lack; the message says what to use instead
NEEDS_NETNS = frozenset({"partition", "zk-isolate", "slow"})
NEEDS_OWN_ZOOKEEPER = frozenset({"zk-down"})
NEEDS_LOG_DIR_MOUNT = frozenset({"disk-full"})


class NemesisError(ClusterError):
    """A fault cannot be applied to this cluster; the message says why and what would allow it."""


def unsupported_kinds(kinds: tuple[str, ...], spec: ClusterSpec) -> list[str]:
    """Why each asked-for kind cannot run on ``spec``'s cluster (empty: all can)."""
    reasons = []
    for kind in kinds:
        if kind in NEEDS_NETNS and not _has_netns(spec):
            reasons.append(f"{kind} needs brokers in network namespaces: run as root with --netns")
        elif kind == "slow" and not netem_available(spec):
            reasons.append("slow needs the kernel's netem queueing discipline (CONFIG_NET_SCH_NETEM), which this "
                           "machine lacks")
        if kind in NEEDS_OWN_ZOOKEEPER and spec.external_zookeeper:
            reasons.append(f"{kind} needs the cluster's own ZooKeeper, not {spec.zookeeper}")
        if kind in NEEDS_LOG_DIR_MOUNT and not _has_log_dir_mounts(spec):
            reasons.append(f"{kind} needs size-limited log directories: run as root with --log-dir-size-mib")
    return reasons


def _has_netns(spec: ClusterSpec) -> bool:
    return spec.network is not None


def netem_available(spec: ClusterSpec) -> bool:
    """Whether links can be slowed here: some kernels are built without netem (the slow nemesis then cannot
    run, while cuts still work). Tried once on the first broker's link and removed at once."""
    from cluster.net import system
    from cluster.net.plan import INSIDE_LINK, NetworkPlan

    namespace = NetworkPlan.from_dict(spec.network).broker_namespace(spec.brokers[0].broker_id)
    try:
        system.netem_replace(namespace, INSIDE_LINK, ["delay", "1ms"])
    except ClusterError:
        return False
    system.netem_delete(namespace, INSIDE_LINK)
    return True


def _has_log_dir_mounts(spec: ClusterSpec) -> bool:
    return bool(spec.log_dir_mounts)


class Nemesis:
    def __init__(self, data_dir: Path, say: Callable[[str], None] = lambda _: None) -> None:
        self.data_dir = data_dir
        self.layout = ClusterLayout(data_dir)
        self.spec = self.layout.load()
        self.say = say
        self._victims: dict[int, list[int]] = {}   # step -> brokers it took down, found when it started
        self._zookeeper_port: socket.socket | None = None

    # --- helpers -------------------------------------------------------------------------------------------

    def _fault(self, action: str, broker_id: int = -1, detail: str = "") -> None:
        pid = self.layout.broker_pid(broker_id).read() if broker_id >= 0 else None
        target = f"broker {broker_id}" + (f" (pid {pid})" if pid else "") if broker_id >= 0 else "cluster"
        record_fault(self.data_dir / TOOLS_TRACE_FILE, action, target, broker_id=broker_id, detail=detail)

    def _signal(self, broker_id: int, signum: int) -> bool:
        pid = self.layout.broker_pid(broker_id).read()
        if pid is None:
            return False
        self._fault(signal.Signals(signum).name.lower(), broker_id)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return False
        return True

    def kill9(self, broker_id: int) -> None:
        if self._signal(broker_id, signal.SIGKILL):
            pid_file = self.layout.broker_pid(broker_id)
            stop_process(pid_file, 10.0, signal.SIGKILL)  # reaps the wait for the PID to be gone

    def start_broker(self, broker_id: int) -> None:
        if self.layout.broker_pid(broker_id).read() is None:
            start_broker(self.data_dir, broker_id, wait=True, say=self.say)

    def controller(self) -> int:
        async def read() -> int:
            async with connected(self.spec.zookeeper, connection_timeout_ms=5000) as zk:
                return (await read_cluster_state(zk, topics=[])).controller_id
        return asyncio.run(read())

    def leader(self, topic: str, partition: int) -> int:
        async def read() -> int:
            async with connected(self.spec.zookeeper, connection_timeout_ms=5000) as zk:
                view = (await read_cluster_state(zk, [topic])).partition(topic, partition)
                return -1 if view is None else view.leader
        return asyncio.run(read())

    def registered(self) -> set[int]:
        async def read() -> set[int]:
            async with connected(self.spec.zookeeper, connection_timeout_ms=5000) as zk:
                return {b.broker_id for b in (await read_cluster_state(zk, topics=[])).brokers}
        return asyncio.run(read())

    def shut_down(self, broker_id: int) -> None:
        """SIGTERM: a controlled shutdown, leadership moved away before the broker exits."""
        self._fault("sigterm", broker_id)
        stop_process(self.layout.broker_pid(broker_id), 60.0)

    def _hold_zookeeper_port(self) -> None:
        """While ZooKeeper is down its port is free, and anything picking a free port (another cluster's broker)
        could take it, so ZooKeeper could not come back where every broker looks for it. A bound socket, without
        SO_REUSEADDR and not listening, keeps the port ours: clients still get connection refused."""
        host, port = self.spec.zookeeper.split("/", 1)[0].rsplit(":", 1)
        placeholder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            placeholder.bind((host, int(port)))
        except OSError:
            placeholder.close()
            return
        self._zookeeper_port = placeholder

    def _start_zookeeper(self) -> None:
        if self._zookeeper_port is not None:
            self._zookeeper_port.close()
            self._zookeeper_port = None
        start_zookeeper(self.data_dir, say=self.say)

    def _zookeeper_running(self) -> bool:
        return self.spec.external_zookeeper or self.layout.zookeeper_pid().read() is not None

    # --- steps ---------------------------------------------------------------------------------------------

    def victims(self, step: NemesisStep) -> list[int]:
        """The brokers the step will hit: its targets, or the controller of the moment for ``controller``."""
        return [self.controller()] if step.kind == "controller" else list(step.targets)

    def start(self, step: NemesisStep, victims: list[int]) -> None:
        """Begins the step's fault on the brokers ``victims`` named; a bounce's restarts all happen here."""
        kind = step.kind
        if kind in ("kill", "controller"):
            for broker in victims:
                if broker >= 0:
                    self.kill9(broker)
        elif kind == "pause":
            for broker in victims:
                self._signal(broker, signal.SIGSTOP)
        elif kind == "bounce":
            restarts = int(step.detail.split()[0]) if step.detail[:1].isdigit() else 3
            for _ in range(restarts):
                for broker in victims:
                    self.shut_down(broker)
                    self.start_broker(broker)
        elif kind == "zk-down":
            stop_zookeeper(self.data_dir, say=self.say)
            self._hold_zookeeper_port()
        elif kind == "disk-full" and _has_log_dir_mounts(self.spec):
            from cluster import disk

            for broker in victims:
                disk.fill(self.data_dir, broker, say=self.say)  # the broker halts on its next write
        elif kind in ("partition", "zk-isolate") and _has_netns(self.spec):
            from cluster.net import actions

            for broker in victims:
                actions.isolate(self.data_dir, broker, "brokers" if kind == "partition" else "zookeeper", say=self.say)
        elif kind == "slow" and _has_netns(self.spec):
            from cluster.net import actions

            delay_ms = int(step.detail.split()[1]) if step.detail.startswith("delay ") else 100
            for broker in victims:
                actions.slow(self.data_dir, broker, delay_ms, delay_ms // 5, 0.0, say=self.say)
        elif kind in NEMESIS_KINDS:
            raise NemesisError(f"nemesis {kind} cannot run on this cluster: "
                               + "; ".join(unsupported_kinds((kind,), self.spec)))
        else:
            raise NemesisError(f"unknown nemesis step kind {kind!r}")
        self._victims[step.step] = victims

    def stop(self, step: NemesisStep) -> None:
        victims = self._victims.pop(step.step, list(step.targets))
        if step.kind in ("kill", "controller"):
            for broker in victims:
                if broker >= 0:
                    self.start_broker(broker)
        elif step.kind == "pause":
            for broker in victims:
                self._signal(broker, signal.SIGCONT)
        elif step.kind == "zk-down" and not self._zookeeper_running():
            self._start_zookeeper()
        elif step.kind == "disk-full":
            from cluster import disk

            for broker in victims:
                disk.free(self.data_dir, broker, say=self.say)
                self.start_broker(broker)
        elif step.kind in NEEDS_NETNS:
            from cluster.net import actions

            actions.heal(self.data_dir, say=self.say)

    def heal(self) -> None:
        """Ends every fault: ZooKeeper first (brokers register through it), then paused and stopped brokers."""
        if _has_netns(self.spec):
            from cluster.net import actions

            actions.heal(self.data_dir, say=self.say)
        if not self._zookeeper_running():
            self._start_zookeeper()
        if _has_log_dir_mounts(self.spec):
            from cluster import disk

            for broker in self.spec.brokers:
                disk.free(self.data_dir, broker.broker_id, say=self.say)
        for broker in self.spec.brokers:
            pid = self.layout.broker_pid(broker.broker_id).read()
            if pid is not None:
                os.kill(pid, signal.SIGCONT)
        for broker in self.spec.brokers:
            self.start_broker(broker.broker_id)
        self._victims.clear()
