"""Real runs for the analysis tests: a real ZooKeeper, broker processes, a producer that keeps a history
of what the cluster acknowledged, faults injected through the harness (recorded in tools-trace.jsonl)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient

from cluster.traces_cmd import collect
from tests.harness import RunningCluster, read_traces, wait_until
from tests.replication.support import (
    SESSION_S,
    make_topic,
    partition_state,
    produce_acknowledged,
    wait_for_identical_replicas,
    wait_for_isr,
    wait_for_leader,
)
from traces import events as te
from traces.history import HistoryWriter
from zk.znodes import TopicPartitionStateZNode

HISTORY_FILE = "workload-history.jsonl"


@dataclass(frozen=True)
class ZkState:
    leader: int
    leader_epoch: int
    isr: list[int]
    version: int


class Producer:
    """Writes batches to the broker we name and records every acknowledged value with its offset."""

    def __init__(self, cluster: RunningCluster, topic: str) -> None:
        self.cluster = cluster
        self.topic = topic
        self.history = HistoryWriter(cluster.data_dir / HISTORY_FILE)
        self.sent = 0

    def produce(self, broker_id: int, values: list[bytes]) -> int:
        result = produce_acknowledged(self.cluster, broker_id, self.topic, values, acks=-1, timeout_s=30)
        self.history.acknowledged_many(self.topic, 0, [(result.base_offset + i, v) for i, v in enumerate(values)])
        self.sent += len(values)
        return result.base_offset

    def batches(self, broker_id: int, count: int, prefix: str) -> None:
        for n in range(count):
            self.produce(broker_id, [f"{prefix}-{n}-{i}".encode() for i in range(5)])


class StateWatcher:
    """Watches a partition state znode from outside the cluster (kazoo's DataWatch): every state it sees,
    by znode version. Watches can miss a change that is overwritten quickly, so this is a sample of
    ZooKeeper's history, but each sample is exactly what ZooKeeper stored at that version."""

    def __init__(self, connect: str, topic: str) -> None:
        self.seen: dict[int, ZkState] = {}
        self._lock = threading.Lock()
        self.client = KazooClient(hosts=connect)
        self.client.start(timeout=15)
        self.client.DataWatch(TopicPartitionStateZNode.path(topic, 0), self._on_change)

    def _on_change(self, data: bytes | None, stat) -> None:
        if data is not None:
            state = json.loads(data)
            with self._lock:
                self.seen[stat.version] = ZkState(state["leader"], state["leader_epoch"], state["isr"], stat.version)

    def stop(self) -> dict[int, ZkState]:
        self.client.stop()
        self.client.close()
        with self._lock:
            return dict(self.seen)


def zk_state(cluster: RunningCluster, topic: str) -> ZkState:
    data, stat = cluster.raw(TopicPartitionStateZNode.path(topic, 0))
    state = TopicPartitionStateZNode.decode(topic, 0, data)
    return ZkState(state.leader, state.leader_epoch, list(state.isr), stat.version)


def traced_versions(cluster: RunningCluster, topic: str) -> set[int]:
    """The znode versions the traces on disk account for (controller and leader writes)."""
    events = [e for b in cluster.spec.brokers for e in read_traces(cluster.layout.trace_file(b.broker_id))]
    return {e.zk_version for e in events
            if isinstance(e, te.LeaderElected | te.IsrChanged) and e.topic == topic and e.partition == 0}


def settle_and_collect(cluster: RunningCluster, topic: str, out: Path) -> ZkState:
    """Waits until the traces hold the znode's current version, stops every broker and collects the run."""
    final = zk_state(cluster, topic)
    wait_until(lambda: final.version in traced_versions(cluster, topic), 15,
               f"the traces to reach version {final.version} of {topic}-0's state")
    assert zk_state(cluster, topic) == final, "the partition state changed while the run was settling"
    cluster.stop_all()
    collect([cluster.data_dir], out)
    return final


@dataclass(frozen=True)
class FailoverRun:
    run_dir: Path
    topic: str
    first_leader: int
    second_leader: int
    produced: int
    final: ZkState
    watched: dict[int, ZkState] = field(default_factory=dict)


def failover_run(cluster: RunningCluster, out: Path, topic: str = "orders") -> FailoverRun:
    """3 brokers, one partition on all three; produce, SIGKILL the leader, produce to the new one, restart
    the old leader and let it rejoin the ISR, produce again. Beside it, quiet partitions of an internal topic and
    of a topic named to sort first, as a real cluster has them: the figures must still lead with ``topic``."""
    make_topic(cluster, "__consumer_offsets", [1, 2, 3], partitions=3)
    make_topic(cluster, "a-quiet", [1, 2, 3], partitions=3)
    make_topic(cluster, topic, [1, 2, 3])
    watcher = StateWatcher(cluster.zk_connect, topic)
    producer = Producer(cluster, topic)
    first = partition_state(cluster, topic).leader
    producer.batches(first, 10, "before")
    wait_for_identical_replicas(cluster, topic, [1, 2, 3], 15)
    cluster.kill9(first)
    view = wait_until(lambda: (v := partition_state(cluster, topic)).leader not in (-1, first) and v,
                      SESSION_S + 20, f"a new leader for {topic}-0")
    second = wait_for_leader(cluster, topic, view.leader, 15).leader
    producer.batches(second, 10, "during")
    cluster.start(first)
    wait_for_isr(cluster, topic, [1, 2, 3], 30)
    producer.batches(second, 5, "after")
    wait_for_identical_replicas(cluster, topic, [1, 2, 3], 15)
    producer.history.close()
    final = settle_and_collect(cluster, topic, out)
    return FailoverRun(out, topic, first, second, producer.sent, final, watcher.stop())
