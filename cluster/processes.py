"""Launching and stopping kafkasim's own processes (ZooKeeper and brokers) in a data directory.

Every process runs in its own session (process group) with a PID file that also records the process's
start time, so a stop never hits an unrelated process that reused the PID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import javaproperties
import psutil

from zk.server import ZooKeeperServer, free_port, port_is_free

DEFAULT_DATA_DIR = "kafkasim-data"


def default_data_dir() -> Path:
    return Path(os.environ.get("KAFKASIM_DATA_DIR", DEFAULT_DATA_DIR)).resolve()


class ClusterError(RuntimeError):
    """A cluster command cannot do what was asked; the message says what to do instead."""


def _start_time(pid: int) -> str | None:
    """When the process started, to tell it from a later process that got the same PID."""
    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        return None


@dataclass
class PidFile:
    path: Path

    def write(self, pid: int) -> None:
        self.path.write_text(f"{pid} {_start_time(pid) or ''}\n")

    def read(self) -> int | None:
        """The PID, only while that very process is still alive."""
        try:
            pid_text, _, started = self.path.read_text().strip().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            return None
        try:
            process = psutil.Process(pid)
            if started and f"{process.create_time():.2f}" != started:
                return None
            if process.status() == psutil.STATUS_ZOMBIE:
                return None  # it has exited; only its parent has not reaped it yet
        except psutil.Error:
            return None
        return pid

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


@dataclass
class BrokerSpec:
    broker_id: int
    client_port: int
    cluster_port: int
    host: str = "127.0.0.1"
    metrics_port: int = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.client_port}"


@dataclass
class ClusterSpec:
    zookeeper: str
    external_zookeeper: bool
    profile: str
    brokers: list[BrokerSpec]
    overrides: dict[str, str] = field(default_factory=dict)
    tick_time_ms: int = 200
    # a --netns cluster's network plan (cluster/net/plan.py), so later commands find its namespaces
    network: dict | None = None

    def namespace(self, broker_id: int | None) -> str | None:
        """The network namespace a broker (None: ZooKeeper) runs in; None on loopback."""
        if self.network is None:
            return None
        from cluster.net.plan import NetworkPlan

        plan = NetworkPlan.from_dict(self.network)
        return plan.zookeeper_namespace if broker_id is None else plan.broker_namespace(broker_id)
    # the tmpfs mounted on each broker's log dir by `up --log-dir-size-mib` (cluster.disk.LogDirMount as JSON)
    log_dir_mounts: list[dict] = field(default_factory=list)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def broker(self, broker_id: int) -> BrokerSpec:
        for spec in self.brokers:
            if spec.broker_id == broker_id:
                return spec
        raise ClusterError(f"broker {broker_id} is not part of this cluster "
                           f"(brokers: {', '.join(str(b.broker_id) for b in self.brokers)})")


class ClusterLayout:
    """Where everything of one cluster lives inside its data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    @property
    def spec_path(self) -> Path:
        return self.data_dir / "cluster.json"

    def zookeeper_dir(self) -> Path:
        return self.data_dir / "zookeeper"

    def broker_dir(self, broker_id: int) -> Path:
        return self.data_dir / f"broker-{broker_id}"

    def zookeeper_pid(self) -> PidFile:
        return PidFile(self.zookeeper_dir() / "zookeeper.pid")

    def broker_pid(self, broker_id: int) -> PidFile:
        return PidFile(self.broker_dir(broker_id) / "broker.pid")

    def broker_config(self, broker_id: int) -> Path:
        return self.broker_dir(broker_id) / "server.properties"

    def broker_log(self, broker_id: int) -> Path:
        return self.broker_dir(broker_id) / "broker.log"

    def trace_file(self, broker_id: int) -> Path:
        return self.broker_dir(broker_id) / "trace.jsonl"

    def save(self, spec: ClusterSpec) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.spec_path.write_text(json.dumps(asdict(spec), indent=2) + "\n")

    def load(self) -> ClusterSpec:
        try:
            raw = json.loads(self.spec_path.read_text())
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {self.data_dir}: start one with 'kafkasim up' "
                               "(or pass --data-dir / set KAFKASIM_DATA_DIR)") from None
        raw["brokers"] = [BrokerSpec(**b) for b in raw["brokers"]]
        return ClusterSpec(**raw)


def choose_ports(count: int, base_port: int, host: str = "127.0.0.1") -> list[tuple[int, int, int]]:
    """(client, cluster, metrics port) per broker: base, base+1, ..., base+100, ... and base+200, ...;
    0 = any free ports."""
    if base_port == 0:
        chosen: list[int] = []
        while len(chosen) < 3 * count:
            chosen.append(free_port(host, avoid=chosen))
        return list(zip(chosen[::3], chosen[1::3], chosen[2::3], strict=True))
    ports = [(base_port + i, base_port + 100 + i, base_port + 200 + i) for i in range(count)]
    busy = [p for ports_of_one in ports for p in ports_of_one if not port_is_free(host, p)]
    if busy:
        raise ClusterError(f"ports {busy} on {host} are in use: stop what holds them, or choose other ports "
                           "with --base-port N (or --base-port 0 for any free ports)")
    return ports


def broker_properties(spec: ClusterSpec, broker: BrokerSpec, layout: ClusterLayout) -> dict[str, str]:
    props = {
        "broker.id": str(broker.broker_id),
        "listeners": f"PLAINTEXT://{broker.host}:{broker.client_port},CLUSTER://{broker.host}:{broker.cluster_port}",
        "log.dirs": str(layout.broker_dir(broker.broker_id) / "logs"),
        "zookeeper.connect": spec.zookeeper,
        "kafkasim.trace.file": str(layout.trace_file(broker.broker_id)),
        "kafkasim.profile": spec.profile,
    }
    if broker.metrics_port:
        props["kafkasim.metrics.port"] = str(broker.metrics_port)
    props.update(spec.overrides)
    return props


def metrics_url(broker: BrokerSpec) -> str | None:
    """Where the broker serves Prometheus text; None when `up` gave it no metrics port (an older cluster.json)."""
    return f"http://{broker.host}:{broker.metrics_port}/metrics" if broker.metrics_port else None


def write_properties(path: Path, props: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # dumps escapes what Properties.load would misread (separators, #, backslashes, newlines, non-ASCII
    # as \uXXXX), so the file is ASCII and Kafka's own Latin-1 reader takes it too
    text = javaproperties.dumps(props, comments=" written by kafkasim up; Kafka broker property names",
                                timestamp=False)
    path.write_text(text, encoding="latin-1")


def in_namespace(namespace: str | None) -> list[str]:
    """The launcher prefix for a process in a network namespace. ``ip netns exec`` execs the command, so the PID
    Popen returns is the process itself, as the PID file and the process-group signals need."""
    return [] if namespace is None else ["ip", "netns", "exec", namespace]


def spawn_broker(layout: ClusterLayout, broker_id: int) -> int:
    """Starts the broker in the background; a --netns cluster's broker in its own namespace, whoever starts it."""
    pid_file = layout.broker_pid(broker_id)
    if pid_file.read() is not None:
        raise ClusterError(f"broker {broker_id} is already running (pid {pid_file.read()})")
    config = layout.broker_config(broker_id)
    namespace = layout.load().namespace(broker_id) if layout.spec_path.exists() else None
    with open(layout.broker_log(broker_id), "ab") as log_file:
        process = subprocess.Popen([*in_namespace(namespace), sys.executable, "-m", "broker", "--config", str(config)],
                                   stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    pid_file.write(process.pid)
    return process.pid


def spawn_zookeeper(layout: ClusterLayout, port: int, tick_time_ms: int, host: str = "127.0.0.1",
                    namespace: str | None = None) -> ZooKeeperServer:
    pid_file = layout.zookeeper_pid()
    if pid_file.read() is not None:
        raise ClusterError(f"ZooKeeper of {layout.data_dir} is already running (pid {pid_file.read()})")
    server = ZooKeeperServer(layout.zookeeper_dir(), port=port, host=host, tick_time_ms=tick_time_ms,
                             launcher=tuple(in_namespace(namespace)))
    layout.zookeeper_dir().mkdir(parents=True, exist_ok=True)
    process = server.spawn(layout.zookeeper_dir() / "zookeeper.log")
    pid_file.write(process.pid)
    server.wait_ready(process)
    return server


def signal_process(pid_file: PidFile, signum: int) -> int | None:
    pid = pid_file.read()
    if pid is None:
        return None
    os.kill(pid, signum)
    return pid


def stop_process(pid_file: PidFile, timeout_s: float, signum: int = signal.SIGTERM) -> bool:
    """SIGTERM (or ``signum``), wait, then SIGKILL the process group. Returns whether it was running."""
    pid = pid_file.read()
    if pid is None:
        pid_file.clear()
        return False
    try:
        os.kill(pid, signal.SIGCONT)  # a paused process cannot act on SIGTERM
        os.kill(pid, signum)
    except ProcessLookupError:
        pid_file.clear()
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and pid_file.read() is not None:
        time.sleep(0.05)
    if pid_file.read() is not None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while pid_file.read() is not None and time.monotonic() < deadline + 5:
            time.sleep(0.05)
    try:
        # a broker this process started (a restart by the chaos nemesis) stays a zombie until reaped, and a zombie
        # still holds its network namespace, which then cannot be removed
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: its own parent reaps it
    pid_file.clear()
    return True
