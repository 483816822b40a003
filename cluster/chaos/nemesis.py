"""Carries out the steps of a nemesis schedule on a cluster of `kafkasim up`: each kind knows how to start its
fault and how to end it, and ``heal`` ends everything, whatever a failed step left behind.

Every action is also written to the tools' trace (``record_fault``), so `kafkasim traces collect` and the
analysis see the faults next to the brokers' own events.
"""

from __future__ import annotations

import asyncio
import os
import signal
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
        if kind in NEEDS_OWN_ZOOKEEPER and spec.external_zookeeper:
            reasons.append(f"{kind} needs the cluster's own ZooKeeper, not {spec.zookeeper}")
        if kind in NEEDS_LOG_DIR_MOUNT and not _has_log_dir_mounts(spec):
            reasons.append(f"{kind} needs size-limited log directories: run as root with --log-dir-size-mib")
    return reasons


def _has_netns(spec: ClusterSpec) -> bool:
    return bool(getattr(spec, "netns", None))


def _has_log_dir_mounts(spec: ClusterSpec) -> bool:
    return bool(getattr(spec, "log_dir_size_mib", 0))


class Nemesis:
    def __init__(self, data_dir: Path, say: Callable[[str], None] = lambda _: None) -> None:
        self.data_dir = data_dir
        self.layout = ClusterLayout(data_dir)
        self.spec = self.layout.load()
        self.say = say
        self._victims: dict[int, list[int]] = {}   # step -> brokers it took down, found when it started

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

    def _kill9(self, broker_id: int) -> None:
        if self._signal(broker_id, signal.SIGKILL):
            pid_file = self.layout.broker_pid(broker_id)
            stop_process(pid_file, 10.0, signal.SIGKILL)  # reaps the wait for the PID to be gone

    def _start(self, broker_id: int) -> None:
        if self.layout.broker_pid(broker_id).read() is None:
            start_broker(self.data_dir, broker_id, wait=True, say=self.say)

    def controller(self) -> int:
        async def read() -> int:
            async with connected(self.spec.zookeeper, connection_timeout_ms=5000) as zk:
                return (await read_cluster_state(zk, topics=[])).controller_id
        return asyncio.run(read())

    def _zookeeper_running(self) -> bool:
        return self.spec.external_zookeeper or self.layout.zookeeper_pid().read() is not None

    # --- steps ---------------------------------------------------------------------------------------------

    def start(self, step: NemesisStep) -> list[int]:
        """Begins the step's fault; returns the brokers it hit (the controller's id for ``controller``)."""
        kind = step.kind
        if kind == "kill":
            for broker in step.targets:
                self._kill9(broker)
            victims = list(step.targets)
        elif kind == "controller":
            victims = [self.controller()]
            if victims[0] >= 0:
                self._kill9(victims[0])
        elif kind == "pause":
            victims = [b for b in step.targets if self._signal(b, signal.SIGSTOP)]
        elif kind == "bounce":
            victims = list(step.targets)
            restarts = int(step.detail.split()[0]) if step.detail[:1].isdigit() else 3
            for _ in range(restarts):
                for broker in victims:
                    self._fault("clean-bounce", broker)
                    stop_process(self.layout.broker_pid(broker), 60.0)  # SIGTERM: controlled shutdown
                    self._start(broker)
        elif kind == "zk-down":
            stop_zookeeper(self.data_dir, say=self.say)
            victims = []
        elif kind in NEMESIS_KINDS:
            raise NemesisError(f"nemesis {kind} cannot run on this cluster: "
                               + "; ".join(unsupported_kinds((kind,), self.spec)))
        else:
            raise NemesisError(f"unknown nemesis step kind {kind!r}")
        self._victims[step.step] = victims
        return victims

    def stop(self, step: NemesisStep) -> None:
        victims = self._victims.pop(step.step, list(step.targets))
        if step.kind in ("kill", "controller"):
            for broker in victims:
                if broker >= 0:
                    self._start(broker)
        elif step.kind == "pause":
            for broker in victims:
                self._signal(broker, signal.SIGCONT)
        elif step.kind == "zk-down" and not self._zookeeper_running():
            start_zookeeper(self.data_dir, say=self.say)

    def heal(self) -> None:
        """Ends every fault: ZooKeeper first (brokers register through it), then paused and stopped brokers."""
        if not self._zookeeper_running():
            start_zookeeper(self.data_dir, say=self.say)
        for broker in self.spec.brokers:
            pid = self.layout.broker_pid(broker.broker_id).read()
            if pid is not None:
                os.kill(pid, signal.SIGCONT)
        for broker in self.spec.brokers:
            self._start(broker.broker_id)
        self._victims.clear()
