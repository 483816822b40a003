"""What the replication scenarios share: a raw Kafka-protocol client aimed at one chosen broker (kafka-python's
protocol classes, so the test decides who receives a write instead of a client's metadata), topics with a
chosen assignment, each replica's log read from its segment files, and waits on traces and ZooKeeper state.

Every wait has a deadline and polls a condition; nothing sleeps for a fixed time.
"""

from __future__ import annotations

import signal
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.protocol.consumer.offsets import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatch
from kio.schema.errors import ErrorCode

from broker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from broker.log.record_batch import HEADER_SIZE, parse_header
from broker.log.records import Record, build_batch
from cluster.admin import PartitionView
from zk.admin import create_topic
from tests.harness import RunningCluster, wait_until, zk_call
from traces import events as te

SESSION_S = 2.0  # the classroom profile's zookeeper.session.timeout.ms
NONE = ErrorCode.none.value
NOT_LEADER_OR_FOLLOWER = ErrorCode.not_leader_or_follower.value
NOT_ENOUGH_REPLICAS = ErrorCode.not_enough_replicas.value
NOT_ENOUGH_REPLICAS_AFTER_APPEND = ErrorCode.not_enough_replicas_after_append.value
FENCED_LEADER_EPOCH = ErrorCode.fenced_leader_epoch.value
UNKNOWN_LEADER_EPOCH = ErrorCode.unknown_leader_epoch.value
# what a client retries after refreshing its metadata: the leader moved, or has not heard of its election yet
RETRIABLE_ROUTING = {e.value for e in (ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available,
                                       ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch,
                                       ErrorCode.fenced_leader_epoch)}

PRODUCE_VERSION = 8
LIST_OFFSETS_VERSION = 5
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
LATEST_TIMESTAMP = -1


# --- a client for one broker -------------------------------------------------------------------------

class BrokerConnection:
    """One TCP connection to a broker's client listener; requests are answered in order."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout_s: float = 35.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.correlation_id = 0

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def call(self, request: Any, version: int, response_class: Any) -> Any:
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id="replication-scenarios")
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        size = struct.unpack(">i", self._read(4))[0]
        response = response_class.decode(self._read(size), version=version, header=True)
        assert response.header.correlation_id == self.correlation_id
        return response

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            data += chunk
        return data


def connect(cluster: RunningCluster, broker_id: int, timeout_s: float = 35.0) -> BrokerConnection:
    broker = cluster.spec.broker(broker_id)
    # a --netns cluster's broker listens on its namespace address, a loopback cluster's on 127.0.0.1
    return BrokerConnection(broker.client_port, host=broker.host, timeout_s=timeout_s)


@dataclass(frozen=True)
class ProduceResult:
    error_code: int
    base_offset: int


def record_set(values: Iterable[bytes]) -> bytes:
    """One uncompressed v2 batch, as a producer sends it (base offset 0, no leader epoch)."""
    now = int(time.time() * 1000)
    return build_batch([Record(None, value, now) for value in values])


def produce(cluster: RunningCluster, broker_id: int, topic: str, values: list[bytes], *, acks: int,
            partition: int = 0, timeout_ms: int = 20000) -> ProduceResult:
    """One batch to the broker we chose, whatever the metadata says; Produce v8."""
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=record_set(values))])])
    with connect(cluster, broker_id, timeout_s=timeout_ms / 1000 + 10) as conn:
        response = conn.call(request, PRODUCE_VERSION, ProduceResponse)
    answer = response.responses[0].partition_responses[0]
    return ProduceResult(answer.error_code, answer.base_offset)


def produce_acknowledged(cluster: RunningCluster, broker_id: int, topic: str, values: list[bytes], *, acks: int,
                         partition: int = 0, timeout_s: float = 15.0) -> ProduceResult:
    """Retries while the broker does not know yet that it leads (its LeaderAndIsr may still be on the way)."""
    def attempt() -> ProduceResult | None:
        result = produce(cluster, broker_id, topic, values, acks=acks, partition=partition)
        if result.error_code in RETRIABLE_ROUTING:
            return None
        assert result.error_code == NONE, f"produce to broker {broker_id} failed with error {result.error_code}"
        return result

    return wait_until(attempt, timeout_s, f"broker {broker_id} to accept a write to {topic}-{partition}")


def offset_for_leader_epoch(cluster: RunningCluster, broker_id: int, topic: str, *, current_leader_epoch: int,
                            leader_epoch: int, partition: int = 0) -> tuple[int, int, int]:
    """(error, epoch, end offset): the client-plane OffsetForLeaderEpoch v3 a KIP-320 consumer sends."""
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=topic, partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=partition, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch)])])
    with connect(cluster, broker_id) as conn:
        response = conn.call(request, OFFSET_FOR_LEADER_EPOCH_VERSION, OffsetForLeaderEpochResponse)
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.leader_epoch, answer.end_offset


def list_latest_offset(cluster: RunningCluster, broker_id: int, topic: str, *, current_leader_epoch: int,
                       partition: int = 0) -> tuple[int, int, int]:
    """(error, offset, leader epoch) of ListOffsets v5 LATEST (the high watermark) with KIP-320 fencing."""
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=partition, current_leader_epoch=current_leader_epoch,
                timestamp=LATEST_TIMESTAMP)])])
    with connect(cluster, broker_id) as conn:
        response = conn.call(request, LIST_OFFSETS_VERSION, ListOffsetsResponse)
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.offset, answer.leader_epoch


# --- topics and ZooKeeper state ----------------------------------------------------------------------

def make_topic(cluster: RunningCluster, topic: str, replicas: list[int], config: dict[str, str] | None = None,
               partitions: int = 1) -> None:
    """A topic whose every partition has exactly ``replicas`` (in this order: the first is the preferred
    leader), created through ZooKeeper; returns once every partition has that leader and full ISR."""
    assignment = {p: list(replicas) for p in range(partitions)}
    zk_call(cluster.zk_connect, lambda zk: create_topic(zk, topic, partitions, len(replicas), config,
                                                        assignment=assignment))
    wait_until(lambda: len(ps := cluster.state([topic]).partitions) == partitions
               and all(p.leader == replicas[0] and sorted(p.isr) == sorted(replicas) for p in ps),
               15, f"{topic} to be led by {replicas[0]} with ISR {replicas}")
    # every replica applied its LeaderAndIsr (so the leader accepts writes and followers fetch)
    for broker in replicas:
        wait_until(lambda b=broker: len({e.partition for e in cluster.traces(b)
                                         if isinstance(e, te.ReplicaRoleChanged) and e.topic == topic}) == partitions,
                   10, f"broker {broker} to take its role for {topic}")


def partition_state(cluster: RunningCluster, topic: str, partition: int = 0) -> PartitionView:
    view = cluster.state([topic]).partition(topic, partition)
    assert view is not None, f"{topic}-{partition} has no state znode"
    return view


def wait_for_leader(cluster: RunningCluster, topic: str, leader: int, timeout_s: float,
                    partition: int = 0) -> PartitionView:
    """ZooKeeper names ``leader`` and that broker has applied the LeaderAndIsr for that epoch."""
    view = wait_until(lambda: (v := partition_state(cluster, topic, partition)).leader == leader and v, timeout_s,
                      f"broker {leader} to be elected leader of {topic}-{partition}")
    wait_until(lambda: any(isinstance(e, te.ReplicaRoleChanged) and e.topic == topic and e.partition == partition
                           and e.role == "leader" and e.leader_epoch >= view.leader_epoch
                           for e in cluster.traces(leader)),
               10, f"broker {leader} to become leader of {topic}-{partition} in epoch {view.leader_epoch}")
    return view


def controller_and_others(cluster: RunningCluster) -> tuple[int, list[int]]:
    controller = wait_until(lambda: (c := cluster.controller()) >= 0 and c, 10, "a controller")
    return controller, [b.broker_id for b in cluster.spec.brokers if b.broker_id != controller]


def kill9_all(cluster: RunningCluster, broker_ids: list[int]) -> None:
    """A power failure: every process gets SIGKILL before any of them (or a controller) can react."""
    for broker_id in broker_ids:
        cluster.signal(broker_id, signal.SIGKILL)
    for broker_id in broker_ids:
        wait_until(lambda b=broker_id: cluster.pid(b) is None, 10, f"broker {broker_id} to die")


def events(cluster: RunningCluster, broker_id: int, event_type: type, **match: Any) -> list:
    return [e for e in cluster.traces(broker_id)
            if isinstance(e, event_type) and all(getattr(e, k) == v for k, v in match.items())]


def wait_for_event(cluster: RunningCluster, broker_id: int, event_type: type, timeout_s: float,
                   where: Callable[[Any], bool] = lambda e: True, **match: Any) -> Any:
    found = wait_until(lambda: [e for e in events(cluster, broker_id, event_type, **match) if where(e)], timeout_s,
                       f"a {event_type.__name__} trace {match} on broker {broker_id}")
    return found[-1]


def broker_log_lines(cluster: RunningCluster, broker_id: int, containing: str) -> list[str]:
    path = cluster.layout.broker_log(broker_id)
    return [line for line in path.read_text(errors="replace").splitlines() if containing in line]


# --- a replica's log, from its segment files ---------------------------------------------------------

@dataclass(frozen=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    leader_epoch: int
    values: tuple[bytes | None, ...]


def partition_dir(cluster: RunningCluster, broker_id: int, topic: str, partition: int = 0) -> Path:
    return cluster.layout.broker_dir(broker_id) / "logs" / f"{topic}-{partition}"


def log_bytes(cluster: RunningCluster, broker_id: int, topic: str, partition: int = 0) -> bytes:
    """The replica's whole log: its .log segment files in offset order, whole batches only (a batch being
    written right now is left out). Segment boundaries are each replica's own business (Kafka rolls per
    replica), so replicas are compared on this concatenation."""
    directory = partition_dir(cluster, broker_id, topic, partition)
    data = b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))
    position = 0
    while position + HEADER_SIZE <= len(data):
        size = parse_header(data, position).size
        if position + size > len(data):
            break
        position += size
    return data[:position]


def batches(data: bytes) -> list[StoredBatch]:
    found, position = [], 0
    while position < len(data):
        header = parse_header(data, position)
        batch = DefaultRecordBatch(data[position:position + header.size])
        found.append(StoredBatch(header.base_offset, header.last_offset, header.partition_leader_epoch,
                                 tuple(record.value for record in batch)))
        position += header.size
    return found


def replica_log(cluster: RunningCluster, broker_id: int, topic: str, partition: int = 0) -> list[StoredBatch]:
    return batches(log_bytes(cluster, broker_id, topic, partition))


def values_by_offset(stored: list[StoredBatch]) -> dict[int, bytes | None]:
    return {batch.base_offset + i: value for batch in stored for i, value in enumerate(batch.values)}


def log_end_offset(cluster: RunningCluster, broker_id: int, topic: str, partition: int = 0) -> int:
    stored = replica_log(cluster, broker_id, topic, partition)
    return stored[-1].last_offset + 1 if stored else 0


def wait_for_identical_replicas(cluster: RunningCluster, topic: str, replicas: list[int], timeout_s: float,
                                partition: int = 0) -> bytes:
    """Every replica's (non-empty) log is byte for byte the same: the followers caught up, nothing diverged."""
    def same() -> bytes | None:
        logs = {b: log_bytes(cluster, b, topic, partition) for b in replicas}
        distinct = set(logs.values())
        if len(distinct) == 1:
            return next(iter(distinct)) or None
        return None

    try:
        return wait_until(same, timeout_s, f"the replicas {replicas} of {topic}-{partition} to be byte-identical")
    except AssertionError as exc:
        described = {b: [(s.base_offset, s.leader_epoch, s.values) for s in replica_log(cluster, b, topic, partition)]
                     for b in replicas}
        raise AssertionError(f"{exc}\nlogs (base offset, leader epoch, values): {described}") from None


def wait_for_isr(cluster: RunningCluster, topic: str, isr: list[int], timeout_s: float,
                 partition: int = 0) -> PartitionView:
    return wait_until(lambda: sorted((v := partition_state(cluster, topic, partition)).isr) == sorted(isr) and v,
                      timeout_s, f"the ISR of {topic}-{partition} to be {sorted(isr)}")


def leader_epoch_cache(cluster: RunningCluster, broker_id: int, topic: str, partition: int = 0) -> dict[int, int]:
    """epoch -> start offset, from the replica's leader-epoch-checkpoint (rewritten on every change)."""
    entries = LeaderEpochCheckpointFile(partition_dir(cluster, broker_id, topic, partition) / LEADER_EPOCH_CHECKPOINT)
    return {entry.epoch: entry.start_offset for entry in entries.read()}


def high_watermark_checkpoint(cluster: RunningCluster, broker_id: int, topic: str, partition: int = 0) -> int | None:
    """The broker's replication-offset-checkpoint entry (written every 5 s and at shutdown)."""
    path = cluster.layout.broker_dir(broker_id) / "logs" / "replication-offset-checkpoint"
    if not path.exists():
        return None
    lines = path.read_text().splitlines()[2:]
    for line in lines:
        name, part, offset = line.split()
        if (name, int(part)) == (topic, partition):
            return int(offset)
    return None
