"""Benchmarks on real processes, each in a cluster of its own (``temporary_cluster``).

``kafkasim bench foundation``: start-up time, failover time against the session timeout, and idle broker
memory. Prints figures; asserts nothing. ``kafkasim bench client`` is in ``cluster/bench_client.py``."""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cluster.admin import read_cluster_state
from cluster.lifecycle import up
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec, PidFile, stop_process
from zk.admin import create_topic
from zk.client import connected


async def _state(connect: str, topics: list[str] | None = None):
    async with connected(connect) as zk:
        return await read_cluster_state(zk, topics)


async def _create(connect: str, name: str) -> None:
    async with connected(connect) as zk:
        await create_topic(zk, name, 3, 3)


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


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def poll_until(condition, timeout_s: float, what: str = "the condition", interval_s: float = 0.01):
    """``condition()``'s first truthy result; a ClusterError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(interval_s)
    raise ClusterError(f"gave up after {timeout_s:.0f} s waiting for {what}")


def _leader_failover(spec: ClusterSpec, layout: ClusterLayout) -> float:
    """kill -9 of a partition leader that is not the controller -> new leader in ZooKeeper."""
    state = asyncio.run(_state(spec.zookeeper, ["bench"]))
    victim = next(p for p in state.partitions if p.leader != state.controller_id)
    pid = layout.broker_pid(victim.leader).read()
    assert pid is not None
    started = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    poll_until(lambda: asyncio.run(_state(spec.zookeeper, ["bench"])).partition("bench", victim.partition).leader
          not in (-1, victim.leader), 60)
    return time.monotonic() - started


def _controller_failover(spec: ClusterSpec, layout: ClusterLayout) -> float:
    controller = asyncio.run(_state(spec.zookeeper, [])).controller_id
    pid = layout.broker_pid(controller).read()
    assert pid is not None
    started = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    poll_until(lambda: asyncio.run(_state(spec.zookeeper, [])).controller_id not in (-1, controller), 60)
    return time.monotonic() - started


def run_foundation_bench(rounds: int = 3) -> int:
    profile_session_ms = {"classroom": 2000}
    startup, leader_moves, controller_moves, rss = [], [], [], []
    for _ in range(rounds):
        began = time.monotonic()
        with temporary_cluster(3, "classroom") as (spec, layout):
            startup.append(time.monotonic() - began)
            asyncio.run(_create(spec.zookeeper, "bench"))
            connect = spec.zookeeper
            poll_until(lambda c=connect: all(p.leader >= 0 for p in asyncio.run(_state(c, ["bench"])).partitions), 30)
            time.sleep(3)  # idle memory means idle: let start-up allocations settle
            for broker in spec.brokers:
                pid = layout.broker_pid(broker.broker_id).read()
                if pid is not None:
                    rss.append(_rss_mb(pid))
            leader_moves.append(_leader_failover(spec, layout))
            controller_moves.append(_controller_failover(spec, layout))
    session_s = profile_session_ms["classroom"] / 1000

    def summary(values: list[float], unit: str = "s") -> str:
        return (f"median {statistics.median(values):.2f} {unit}, min {min(values):.2f}, max {max(values):.2f} "
                f"({len(values)} runs)")

    print("kafkasim foundation benchmark (3 brokers, classroom profile, zookeeper.session.timeout.ms=2000)")
    print(f"  up -> ready 3-broker cluster incl. ZooKeeper:   {summary(startup)}   target < 5 s")
    print(f"  kill -9 leader -> new leader in ZooKeeper:      {summary(leader_moves)}   "
          f"target < session {session_s:.1f} s + 0.5 s")
    print(f"  kill -9 controller -> new controller elected:   {summary(controller_moves)}")
    print(f"  resident memory per idle broker:               {summary(rss, 'MB')}   target < 80 MB")
    return 0
