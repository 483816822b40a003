"""Starts a real, standalone Apache ZooKeeper server from the installed distribution, on loopback.

A small tickTime gives classroom-speed session timeouts: ZooKeeper only grants sessions between
2 and 20 ticks unless told otherwise, so the bounds are written explicitly and Kafka's own 18 s default
still fits.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import javaproperties

ZOOKEEPER_JAR = Path(os.environ.get("KAFKASIM_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperSetupError(RuntimeError):
    """ZooKeeper cannot be started here; the message says what to install or change."""


def port_is_free(host: str, port: int) -> bool:
    """Whether a listener could bind the port now. Every listener here (the brokers' two planes, ZooKeeper)
    binds with SO_REUSEADDR, so the probe does too: connections a stopped process closed linger in TIME_WAIT on
    its ports for a minute, and without the option they made `kafkasim down && kafkasim up` report the ports busy."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1", avoid: Collection[int] = ()) -> int:
    """A free port below the kernel's ephemeral range: a port from bind(0) comes from that range, and an
    outgoing connection (a ZooKeeper client, a gRPC channel) may take it before our listener binds it.
    ``avoid``: ports already chosen for listeners that have not bound yet (a probe finds them free)."""
    low, _ = ephemeral_range()
    candidates = [port for port in range(10000, max(10001, low)) if port not in avoid]
    random.shuffle(candidates)
    for port in candidates[:2000]:
        if port_is_free(host, port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def four_letter_word(host: str, port: int, word: bytes = b"ruok", timeout: float = 1.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


@dataclass
class ZooKeeperServer:
    data_dir: Path
    port: int = 0                 # 0: pick a free port
    host: str = "127.0.0.1"
    tick_time_ms: int = 200
    heap_mb: int = 128
    # a command the server runs under, e.g. ("ip", "netns", "exec", NAME); it must exec, so the PID is the server's
    launcher: tuple[str, ...] = ()

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    def check_installed(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperSetupError("no Java runtime found: install one (apt-get install default-jre-headless)")
        if not ZOOKEEPER_JAR.exists():
            raise ZooKeeperSetupError(
                f"{ZOOKEEPER_JAR} not found: install Debian's ZooKeeper (apt-get install zookeeper) "
                "or set KAFKASIM_ZOOKEEPER_JAR to a zookeeper jar whose manifest carries its class path")
        return java

    def write_config(self) -> Path:
        if self.port == 0:
            self.port = free_port(self.host)
        # under a launcher the server may bind in another network namespace, where this probe cannot look
        elif not self.launcher and not port_is_free(self.host, self.port):
            raise ZooKeeperSetupError(
                f"port {self.host}:{self.port} is already in use: stop what holds it or choose another "
                "ZooKeeper port (--zookeeper-port, or 0 for any free port)")
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        # ZooKeeper reads zoo.cfg with java.util.Properties (Latin-1, backslash escapes): a data directory
        # with non-ASCII characters or backslashes must be escaped the way Properties.load expects
        self.config_path.write_text(javaproperties.dumps({
            "tickTime": str(self.tick_time_ms),
            "dataDir": str(self.data_dir / "data"),
            "clientPort": str(self.port),
            "clientPortAddress": self.host,
            "minSessionTimeout": str(2 * self.tick_time_ms),
            "maxSessionTimeout": "60000",
            "maxClientCnxns": "0",
            # the embedded Jetty admin server would take port 8080; nobody here needs it
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,stat,mntr,cons",
        }, timestamp=False), encoding="latin-1")
        return self.config_path

    def command(self) -> list[str]:
        java = self.check_installed()
        return [*self.launcher, java, f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC",
                "-Dzookeeper.admin.enableServer=false", "-cp", f"{self.data_dir}:{ZOOKEEPER_JAR}", MAIN_CLASS,
                str(self.config_path)]

    def spawn(self, log_path: Path) -> subprocess.Popen:
        """Start the server in its own process group; the caller keeps the PID to stop it."""
        command = self.command()
        self.write_config()
        log_file = open(log_path, "ab")
        try:
            return subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log_file.close()

    def wait_ready(self, process: subprocess.Popen | None = None, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise ZooKeeperSetupError(
                    f"ZooKeeper exited with code {process.returncode} at start; see its log in {self.data_dir}")
            try:
                # "imok" only says the process runs; srvr shows a mode once it serves clients
                if (four_letter_word(self.host, self.port, b"ruok") == b"imok"
                        and b"Mode:" in four_letter_word(self.host, self.port, b"srvr")):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise ZooKeeperSetupError(f"ZooKeeper on {self.connect} was not ready after {timeout_s:.0f} s")
