"""A fresh cluster of its own for a bench, and what the benches read from its ZooKeeper."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.log.cleaner.cpu_group import remove_groups_of_stopped_brokers
from cluster.admin import read_cluster_state
from cluster.lifecycle import up
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec, PidFile, stop_process
from zk.admin import create_topic
from zk.client import connected


async def _read_state(connect: str, topics: list[str] | None):
    async with connected(connect) as zk:
        return await read_cluster_state(zk, topics)


def cluster_state(connect: str, topics: list[str] | None = None):
    """Controller and partitions of ``topics`` as ZooKeeper holds them now."""
    return asyncio.run(_read_state(connect, topics))


async def _create(connect: str, name: str, partitions: int, replication_factor: int) -> None:
    async with connected(connect) as zk:
        await create_topic(zk, name, partitions, replication_factor)


def create_topic_in_zookeeper(connect: str, name: str, partitions: int = 3, replication_factor: int = 3) -> None:
    asyncio.run(_create(connect, name, partitions, replication_factor))


@contextmanager
def temporary_cluster(brokers: int = 3, profile: str = "classroom", say: Callable[[str], None] = lambda _: None,
                      overrides: dict[str, str] | None = None, prefix: str = "kafkasim-bench-"
                      ) -> Iterator[tuple[ClusterSpec, ClusterLayout]]:
    """A fresh cluster in a temporary data directory. However the block ends (a failed start included),
    every broker is killed by the PID in its PID file, then ZooKeeper is stopped by its own."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        data_dir = Path(tmp)
        layout = ClusterLayout(data_dir)
        try:
            yield up(data_dir, brokers=brokers, profile=profile, base_port=0, say=say, overrides=overrides), layout
        finally:
            for pid_path in sorted(data_dir.glob("broker-*/broker.pid")):
                pid = PidFile(pid_path).read()
                if pid is not None:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            stop_process(layout.zookeeper_pid(), 10.0)
            remove_groups_of_stopped_brokers()  # the brokers were killed: theirs was not removed at their shutdown


def poll_until(condition, timeout_s: float, what: str = "the condition", interval_s: float = 0.01):
    """``condition()``'s first truthy result; a ClusterError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(interval_s)
    raise ClusterError(f"gave up after {timeout_s:.0f} s waiting for {what}")
