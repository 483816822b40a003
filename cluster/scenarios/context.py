"""One scenario run's hold on its cluster: where it lives, what ZooKeeper says, the facts measured so far and
every value a producer had acknowledged. Actions and the observer work through it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cluster.admin import ClusterState, read_cluster_state
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec
from cluster.waiting import poll_until
from traces.events import parse_line
from zk.client import ZkClient, connected

T = TypeVar("T")
HISTORY_FILE = "scenario-history.jsonl"  # every acknowledged write, for the analysis's missing-writes job


class ScenarioError(ClusterError):
    """The scenario itself could not go on (a wait ran out, a broker would not start): exit 2, not a verdict."""


def wait_until(condition: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.05) -> T:
    return poll_until(condition, timeout_s, lambda last: ScenarioError(
        f"waited {timeout_s:.0f} s for {what} in vain (last seen: {last!r})"), interval_s)


@dataclass
class ScenarioRun:
    data_dir: Path
    spec: ClusterSpec
    topics: list[str]
    facts: dict[str, Any] = field(default_factory=dict)
    # topic -> values acknowledged to a producer, in order
    acknowledged: dict[str, list[str]] = field(default_factory=dict)
    producers: dict[str, Any] = field(default_factory=dict)  # label -> a running BackgroundProducer
    frozen: dict[int, int] = field(default_factory=dict)  # broker -> pid of a broker stopped with SIGSTOP
    consumers: dict[str, Any] = field(default_factory=dict)  # "GROUP/N" -> a GroupConsumerProcess
    cut: bool = False  # a network fault is in force: the runner heals it if the story stops before its heal
    transformer: Any = None  # the exactly-once story's TransformerStory (txn_actions): the runner closes its clients

    @property
    def layout(self) -> ClusterLayout:
        return ClusterLayout(self.data_dir)

    @property
    def bootstrap_servers(self) -> str:
        return self.spec.bootstrap_servers

    def zk(self, call: Callable[[ZkClient], Any]) -> Any:
        async def go() -> Any:
            async with connected(self.spec.zookeeper, connection_timeout_ms=10000) as zk:
                return await call(zk)

        return asyncio.run(go())

    def state(self, topics: list[str] | None = None) -> ClusterState:
        return self.zk(lambda zk: read_cluster_state(zk, self.topics if topics is None else topics))

    def running(self, broker_id: int) -> bool:
        return self.layout.broker_pid(broker_id).read() is not None

    def broker_ids(self) -> list[int]:
        return [b.broker_id for b in self.spec.brokers]

    def traces(self, broker_id: int) -> list:
        path = self.layout.trace_file(broker_id)
        if not path.exists():
            return []
        found = []
        for line in path.read_text(errors="replace").splitlines():
            if line.strip():
                try:
                    found.append(parse_line(line))
                except ValueError:
                    continue  # a line being written right now
        return found
