"""Partition reassignment (KIP-455) on a real 4-broker cluster: kafka-python's KafkaAdminClient sends
AlterPartitionReassignments and ListPartitionReassignments (confluent-kafka has no call for them) to the controller;
a partition with data moves while an idempotent acks=all producer writes; the new replica's log is the leader's, byte
for byte; the removed replica's directory goes; cancellation, the legacy /admin/reassign_partitions znode, a
controller failover mid-way, and Kafka's errors.

A reassignment is made observable mid-way by pausing (SIGSTOP) the broker being added for about a second: it cannot
fetch, so the target cannot join the ISR until it is resumed. ZooKeeper's session timeout (4 s at this ZooKeeper's
200 ms tick) is longer than the pause."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from kafka.protocol.admin import AlterPartitionReassignmentsRequest, ListPartitionReassignmentsRequest

from cluster.cli import main
from tests.client.support import RawConnection, bootstrap, client_port, confluent_consume
from tests.harness import RunningCluster, module_cluster, wait_until, zk_call, znode_json
from traces import events as te
from zk.admin import create_topic as zk_create_topic
from zk.znodes import ReassignPartitionsZNode, TopicZNode

pytestmark = [pytest.mark.processes, pytest.mark.slow]

NOT_CONTROLLER = 41
BROKERS = [1, 2, 3, 4]


# its own cluster of four: a partition on three of them moves to another three
cluster = module_cluster("reassign-cluster", brokers=4, overrides={"zookeeper.session.timeout.ms": "4000"})


@pytest.fixture
def admin(cluster):
    # kafka-python asks any one broker for the controller the first time it needs it: never the one a test pauses
    _, _, added, _ = plan_move(cluster)
    others = ",".join(f"127.0.0.1:{client_port(cluster, b)}" for b in BROKERS if b != added)
    client = KafkaAdminClient(bootstrap_servers=others, request_timeout_ms=30000)
    try:
        client.list_partition_reassignments()  # finds the controller now
        yield client
    finally:
        client.close()


def make_topic(cluster: RunningCluster, topic: str, replicas: list[int], config: dict[str, str] | None = None) -> None:
    zk_call(cluster.zk_connect, lambda zk: zk_create_topic(zk, topic, 1, len(replicas), config,
                                                           assignment={0: replicas}))
    wait_until(lambda: (p := cluster.state([topic]).partition(topic, 0)) is not None and p.leader >= 0
               and sorted(p.isr) == sorted(replicas), 30, f"{topic} to get a leader and a full ISR")


def topic_znode(cluster: RunningCluster, topic: str) -> dict:
    return znode_json(cluster, f"/brokers/topics/{topic}")


def exists(cluster: RunningCluster, path: str) -> bool:
    return zk_call(cluster.zk_connect, lambda zk: zk.exists(path)) is not None


def partition_dir(cluster: RunningCluster, broker: int, topic: str) -> Path:
    return cluster.layout.broker_dir(broker) / "logs" / f"{topic}-0"


def log_bytes(cluster: RunningCluster, broker: int, topic: str) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(partition_dir(cluster, broker, topic).glob("*.log")))


def plan_move(cluster: RunningCluster) -> tuple[list[int], list[int], int, int]:
    """original, target, the broker added and the one removed; the added one is never the controller (it is paused)
    and the original leader is the removed one (so the leader has to move)."""
    controller = cluster.controller()
    added = max(b for b in BROKERS if b != controller)
    original = [b for b in BROKERS if b != added]
    removed = original[0]
    return original, [*original[1:], added], added, removed


class Paused:
    """SIGSTOP a broker for the duration of a block (by its PID), SIGCONT after."""

    def __init__(self, cluster: RunningCluster, broker: int) -> None:
        self.cluster, self.broker = cluster, broker

    def __enter__(self) -> None:
        self.cluster.signal(self.broker, signal.SIGSTOP)

    def __exit__(self, *exc: object) -> None:
        self.cluster.signal(self.broker, signal.SIGCONT)


class BackgroundProducer:
    """An idempotent acks=all confluent-kafka producer writing until stopped; remembers every acknowledged value."""

    def __init__(self, cluster: RunningCluster, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 60000})
        self.topic, self.acked, self.failed = topic, [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error, message) -> None:
        (self.failed if error is not None else self.acked).append(error or message.value())

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            self.producer.produce(self.topic, value=b"w-%08d-" % sequence + b"x" * 200, partition=0,
                                  on_delivery=self._delivered)
            sequence += 1
            self.producer.poll(0.002 if sequence % 20 else 0.02)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(60) == 0


def reassignment_done(cluster: RunningCluster, topic: str, target: list[int]) -> bool:
    body = topic_znode(cluster, topic)
    return body["partitions"]["0"] == target and not body["adding_replicas"] and not body["removing_replicas"]


def test_a_partition_with_data_moves_to_other_brokers_while_a_producer_writes(cluster, admin):
    topic = "moving"
    original, target, added, removed = plan_move(cluster)
    make_topic(cluster, topic, original, {"segment.bytes": "262144"})
    # batches below segment.bytes: a batch larger than a segment is refused (RECORD_BATCH_TOO_LARGE)
    preload = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "linger.ms": 20,
                        "batch.size": 65536})
    errors: list = []
    for i in range(5000):
        preload.produce(topic, value=b"p-%05d-" % i + b"y" * 300, partition=0,
                        on_delivery=lambda error, _: error is not None and errors.append(error))
    assert preload.flush(60) == 0 and errors == []
    tp = KafkaTopicPartition(topic, 0)

    with BackgroundProducer(cluster, topic) as producer:
        wait_until(lambda: len(producer.acked) > 100, 30, "the producer's first acknowledgements")
        with Paused(cluster, added):
            assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
            # in progress: the controller says so, and so does the topic znode (RS = target + the rest, AR, RR)
            ongoing = admin.list_partition_reassignments()
            assert ongoing == {tp: {"replicas": [*target, removed], "adding_replicas": [added],
                                    "removing_replicas": [removed]}}
            body = topic_znode(cluster, topic)
            assert body["partitions"]["0"] == [*target, removed]
            assert body["adding_replicas"] == {"0": [added]} and body["removing_replicas"] == {"0": [removed]}
            view = cluster.state([topic]).partition(topic, 0)   # what `kafkasim status` shows
            assert (view.adding_replicas, view.removing_replicas) == ([added], [removed])
        wait_until(lambda: reassignment_done(cluster, topic, target), 60, "the reassignment to complete")
        wait_until(lambda: len(producer.acked) > 3000, 60, "more acknowledgements after the move")

    assert producer.failed == []
    assert topic_znode(cluster, topic) == {"version": 2, "partitions": {"0": target}, "adding_replicas": {},
                                           "removing_replicas": {}}
    assert not exists(cluster, ReassignPartitionsZNode.path)
    assert admin.list_partition_reassignments() == {}
    state = cluster.state([topic]).partition(topic, 0)
    assert state.leader in target and sorted(state.replicas) == sorted(target)
    wait_until(lambda: sorted(cluster.state([topic]).partition(topic, 0).isr) == sorted(target), 30,
               "the ISR to be the target")
    wait_until(lambda: not partition_dir(cluster, removed, topic).exists(), 30,
               f"broker {removed}'s partition directory to be deleted")

    # every acknowledged write is readable, in order, once
    total = 5000 + len(producer.acked)
    values = [v for _, v in confluent_consume(cluster, topic, [0], total, timeout_s=120)[0]]
    assert [v for v in values if v.startswith(b"w-")] == producer.acked
    # the added replica's log is the leader's, byte for byte
    leader = state.leader
    wait_until(lambda: log_bytes(cluster, added, topic) == log_bytes(cluster, leader, topic), 30,
               f"broker {added}'s log to equal leader {leader}'s")
    assert len(log_bytes(cluster, added, topic)) > 5000 * 300

    # each step is a trace event of the controller
    steps = [e.phase for e in cluster.all_traces()
             if isinstance(e, te.PartitionReassignmentStep) and e.topic == topic]
    assert steps == ["started", "adding", "leader_moved", "replicas_removed", "completed"]
    moved = [e for e in cluster.all_traces() if isinstance(e, te.LeaderElected) and e.topic == topic
             and e.election == "reassignment"]
    assert moved and moved[-1].leader in target


def test_cancelling_goes_back_to_the_original_replicas_and_deletes_the_added_one(cluster, admin):
    topic = "cancelled"
    original, target, added, _ = plan_move(cluster)
    make_topic(cluster, topic, original)
    tp = KafkaTopicPartition(topic, 0)
    with Paused(cluster, added):
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
        assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
        assert admin.list_partition_reassignments() == {}
    # Kafka does not restore the original order: the target's order, then the original replicas left
    back = [*original[1:], original[0]]
    assert topic_znode(cluster, topic) == {"version": 2, "partitions": {"0": back}, "adding_replicas": {},
                                           "removing_replicas": {}}
    wait_until(lambda: not partition_dir(cluster, added, topic).exists(), 30,
               f"broker {added}'s copy to be deleted")
    wait_until(lambda: sorted(cluster.state([topic]).partition(topic, 0).isr) == sorted(original), 30,
               "the ISR to be the original replicas")
    # nothing left to cancel
    assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}


def test_invalid_reassignments_are_refused_and_change_nothing(cluster, admin):
    topic = "refused"
    make_topic(cluster, topic, [1, 2, 3])
    before = topic_znode(cluster, topic)
    tp = KafkaTopicPartition(topic, 0)
    assert admin.alter_partition_reassignments({
        tp: [1, 2, 9],
        KafkaTopicPartition(topic, 5): [1, 2, 3],
        KafkaTopicPartition("no-such-topic", 0): [1, 2, 3],
    }) == {tp: InvalidReplicationAssignmentError, KafkaTopicPartition(topic, 5): UnknownTopicOrPartitionError,
           KafkaTopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError}
    with RawConnection(client_port(cluster, cluster.controller())) as connection:
        duplicate = connection.request(AlterPartitionReassignmentsRequest(timeout_ms=30000, topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(name=topic, partitions=[
                AlterPartitionReassignmentsRequest.ReassignableTopic.ReassignablePartition(
                    partition_index=0, replicas=[2, 2, 3])])]), 0)
    (result,) = duplicate.responses[0].partitions
    assert result.error_code == InvalidReplicationAssignmentError.errno and "Duplicate" in result.error_message
    assert topic_znode(cluster, topic) == before
    assert admin.list_partition_reassignments() == {}


def test_brokers_other_than_the_controller_answer_not_controller(cluster):
    other = next(b for b in BROKERS if b != cluster.controller())
    with RawConnection(client_port(cluster, other)) as connection:
        listed = connection.request(ListPartitionReassignmentsRequest(timeout_ms=30000, topics=None), 0)
        altered = connection.request(AlterPartitionReassignmentsRequest(timeout_ms=30000, topics=[]), 0)
    assert listed.error_code == NOT_CONTROLLER and altered.error_code == NOT_CONTROLLER


def test_the_legacy_znode_starts_a_reassignment_and_is_removed_when_done(cluster):
    topic = "legacy"
    original, target, _, removed = plan_move(cluster)
    make_topic(cluster, topic, original)
    zk_call(cluster.zk_connect, lambda zk: zk.create(ReassignPartitionsZNode.path,
                                                     ReassignPartitionsZNode.encode({(topic, 0): target})))
    wait_until(lambda: reassignment_done(cluster, topic, target), 60, "the reassignment to complete")
    wait_until(lambda: not exists(cluster, ReassignPartitionsZNode.path), 30, "the request znode to be deleted")
    wait_until(lambda: not partition_dir(cluster, removed, topic).exists(), 30, "the removed replica's directory")


def test_a_reassignment_in_progress_is_resumed_by_the_next_controller(cluster):
    topic = "resumed"
    old = cluster.controller()
    # two replicas, neither the controller stopped below: [x, y] moves to [y, z]
    x, y, z = [b for b in BROKERS if b != old]
    make_topic(cluster, topic, [x, y])
    # as a controller that died after writing RS, AR and RR would leave it: nobody told the new replica yet
    moving = TopicZNode.encode({0: [y, z, x]}, {0: [z]}, {0: [x]})
    zk_call(cluster.zk_connect, lambda zk: zk.set(f"/brokers/topics/{topic}", moving))
    cluster.signal(old, signal.SIGTERM)
    try:
        wait_until(lambda: cluster.pid(old) is None, 30, f"broker {old} to stop")
        wait_until(lambda: cluster.controller() not in (-1, old), 30, "a new controller")
        wait_until(lambda: reassignment_done(cluster, topic, [y, z]), 60, "the resumed reassignment to complete")
        wait_until(lambda: not partition_dir(cluster, x, topic).exists(), 30, "the removed replica's directory")
        resumed = [e for e in cluster.all_traces() if isinstance(e, te.PartitionReassignmentStep)
                   and e.topic == topic and e.phase == "started"]
        assert resumed and "resumed at failover" in resumed[0].detail
    finally:
        cluster.start(old)


def fill(cluster: RunningCluster, topic: str, mib: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": 1, "linger.ms": 10, "batch.size": 1_000_000})
    errors: list = []
    value = bytes(range(256)) * 40
    for _ in range(mib * (1 << 20) // len(value)):
        while True:
            try:
                producer.produce(topic, value=value, partition=0,
                                 on_delivery=lambda error, _: error is not None and errors.append(error))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0 and errors == []


def test_cli_moves_lists_and_cancels_with_one_line_per_partition(cluster, capsys):
    # kafka-python asks any broker it knows for the controller, so no broker is paused here: the partition holds
    # enough data (a few seconds of copying) to be seen moving, and is cancelled before it is done
    topic = "cli-moved"
    original, target, added, removed = plan_move(cluster)
    make_topic(cluster, topic, original, {"segment.bytes": str(16 << 20)})
    fill(cluster, topic, 300)
    cli = ["--data-dir", str(cluster.data_dir), "reassign"]
    assert main([*cli, f"{topic}/0", "--replicas", ",".join(map(str, target))]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith(f"{topic}/0  started: moving to ")
    assert main([*cli, "--status"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].split() == [f"{topic}/0", ",".join(map(str, [*target, removed])), str(added), str(removed)]
    assert main([*cli, f"{topic}/0", "--cancel"]) == 0
    assert "cancelled" in capsys.readouterr().out
    assert main([*cli, "--status"]) == 0
    assert "no partition reassignment in progress" in capsys.readouterr().out
    wait_until(lambda: not partition_dir(cluster, added, topic).exists(), 30, f"broker {added}'s partial copy to go")
    assert main([*cli, f"{topic}/0", "--replicas", "1,2,99"]) == 1
    assert "InvalidReplicationAssignmentError (39)" in capsys.readouterr().out
    assert main([*cli, f"{topic}/0"]) == 2
    assert "--replicas" in capsys.readouterr().err
