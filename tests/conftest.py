from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import RunningCluster, start_cluster
from zk.server import ZooKeeperServer


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
