from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import RunningCluster, start_cluster
from zk.server import ZooKeeperServer


def _interrupt_on_sigterm(signum, frame) -> None:
    """A run killed with SIGTERM (a CI timeout, ``timeout``, a supervisor) unwinds as Ctrl-C does: pytest tears the
    fixtures down, stopping the processes they started by PID and removing namespaces and mounts. A second SIGTERM
    kills at once; a child forked from this process (not exec'ed) keeps the plain default."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if os.getpid() != _SESSION_PID:
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise KeyboardInterrupt(f"signal {signum} (SIGTERM)")


_SESSION_PID = os.getpid()
_previous_sigterm_handler = None


def pytest_configure(config: pytest.Config) -> None:
    global _previous_sigterm_handler
    _previous_sigterm_handler = signal.signal(signal.SIGTERM, _interrupt_on_sigterm)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _previous_sigterm_handler is not None:
        signal.signal(signal.SIGTERM, _previous_sigterm_handler)


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real ZooKeeper for the session; every test works under its own chroot."""
    data_dir = tmp_path_factory.mktemp("zookeeper")
    server = ZooKeeperServer(data_dir, port=0, tick_time_ms=200)
    process = server.spawn(data_dir / "zookeeper.log")
    try:
        server.wait_ready(process)
        yield server.connect
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def zk_connect(zk_server: str) -> str:
    return f"{zk_server}/t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def cluster_factory(tmp_path: Path, zk_server: str) -> Iterator:
    started: list[RunningCluster] = []

    def make(brokers: int = 3, profile: str = "classroom", overrides: dict[str, str] | None = None) -> RunningCluster:
        running = start_cluster(tmp_path / f"c{len(started)}", zk_server, brokers, profile, overrides)
        started.append(running)
        return running

    yield make
    for running in started:
        running.stop_all()


@pytest.fixture
def cluster(cluster_factory) -> RunningCluster:
    return cluster_factory()
