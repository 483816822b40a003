"""The watched cache of ZooKeeper's cluster state agrees with a full read, after topics come and leaders move."""

from __future__ import annotations

import asyncio
import signal

import pytest

from cluster.admin import read_cluster_state
from cluster.dashboard.zk_watch import WatchedClusterState
from tests.harness import RunningCluster
from zk.admin import create_topic
from zk.client import connected

pytestmark = [pytest.mark.processes]


def test_the_watched_state_follows_a_new_topic_and_a_killed_leader(cluster: RunningCluster):
    async def run() -> None:
        async with connected(cluster.zk_connect) as zk:
            changes: list[int] = []
            watched = WatchedClusterState(zk, lambda: changes.append(1))

            async def agree(timeout_s: float = 20.0) -> None:
                deadline = asyncio.get_running_loop().time() + timeout_s
                while True:
                    mine, full = await watched.read(), await read_cluster_state(zk)
                    if mine.as_dict() == full.as_dict():
                        return
                    assert asyncio.get_running_loop().time() < deadline, (mine.as_dict(), full.as_dict())
                    await asyncio.sleep(0.05)

            await agree()
            await create_topic(zk, "w", 4, 3)
            while not all(p.leader >= 0 for p in (await read_cluster_state(zk, ["w"])).partitions):
                await asyncio.sleep(0.05)
            await agree()
            assert len((await watched.read()).partitions) == 4
            changes.clear()
            leader = (await read_cluster_state(zk, ["w"])).partitions[0].leader
            cluster.signal(leader, signal.SIGKILL)
            cluster.killed.add(leader)
            while leader in {b.broker_id for b in (await read_cluster_state(zk, [])).brokers} or \
                    (await read_cluster_state(zk, ["w"])).partitions[0].leader == leader:
                await asyncio.sleep(0.05)
            await agree()
            assert changes, "no watch fired"
            assert leader not in {b.broker_id for b in (await watched.read()).brokers}

    asyncio.run(run())
