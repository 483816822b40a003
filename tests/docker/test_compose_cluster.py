"""docker-compose.yml as a teacher uses it: up, produce and consume from the host through the published
ports, kill the leader's container, restart it with its volume, cut a broker off the network, collect the
traces, and ``down -v`` leaves nothing behind. The tests run in file order on one compose project."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.docker_ops import PROJECT_LABEL
from tests.docker.conftest import BOOTSTRAP, ComposeRun
from tests.harness import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

TOPIC = "orders"


class AckedProducer:
    """Produces v-0, v-1, ... with acks=all until stopped (bounded in count), remembering what was acked."""

    def __init__(self, topic: str, max_messages: int = 20000):
        self.producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120000})
        self.topic = topic
        self.max_messages = max_messages
        self.acked: list[str] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        (self.failed if err else self.acked).append(msg.value().decode())

    def _run(self) -> None:
        for n in range(self.max_messages):
            if self._stop.is_set():
                break
            self.producer.produce(self.topic, f"v-{n}".encode(), partition=0, on_delivery=self._delivered)
            self.producer.poll(0.005)

    def start(self) -> AckedProducer:
        self._thread.start()
        return self

    def stop(self, send_all: bool = False) -> None:
        """Stop sending (or, with ``send_all``, send every message first), then wait for every answer."""
        if not send_all:
            self._stop.set()
        self._thread.join(120)
        assert self.producer.flush(120) == 0, "messages still unacknowledged two minutes after the last send"


def consume_all(topic: str, expected: set[str], timeout_s: float = 90) -> set[str]:
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while not expected <= seen and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add(msg.value().decode())
            elif msg is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                pass  # a leader change in flight: the consumer refreshes its metadata and goes on
    finally:
        consumer.close()
    return seen


def isr(run: ComposeRun) -> list[int]:
    return sorted(run.cluster().partition(TOPIC, 0)["isr"])


def test_compose_up_gives_a_usable_cluster(compose_run: ComposeRun):
    assert compose_run.seconds_to_usable > 0
    cluster = compose_run.cluster()
    assert sorted(cluster.brokers()) == [1, 2, 3]
    state = cluster.state()
    assert sorted(b["broker_id"] for b in state["brokers"]) == [1, 2, 3]
    # every broker advertises the host's published port for clients outside Docker
    endpoints = {b["broker_id"]: b["endpoints"] for b in state["brokers"]}
    for broker_id, port in ((1, 9092), (2, 9093), (3, 9094)):
        assert f"EXTERNAL://localhost:{port}" in endpoints[broker_id]
        assert f"PLAINTEXT://kafka-{broker_id}:29092" in endpoints[broker_id]

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=3,
                                            config={"min.insync.replicas": "2"})])
    futures[TOPIC].result(60)
    wait_until(lambda: isr(compose_run) == [1, 2, 3], 60, "the new topic's ISR to hold all three brokers")
    metadata = admin.list_topics(timeout=30)
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert {(b.host, b.port) for b in metadata.brokers.values()} == {("localhost", p) for p in (9092, 9093, 9094)}

    producer = AckedProducer(TOPIC, max_messages=200).start()
    producer.stop(send_all=True)
    assert len(producer.acked) == 200 and not producer.failed
    assert consume_all(TOPIC, set(producer.acked)) >= set(producer.acked)


def test_killing_the_leaders_container_loses_nothing_acknowledged(compose_run: ComposeRun):
    cluster = compose_run.cluster()
    leader = cluster.partition(TOPIC, 0)["leader"]
    producer = AckedProducer(TOPIC).start()
    try:
        wait_until(lambda: len(producer.acked) >= 300, 60, "the producer to get acknowledgements")
        out = compose_run.cli("kill", "--leader-of", f"{TOPIC}/0")
        assert f"broker {leader}" in out
        killed = cluster.container(leader)
        wait_until(lambda: killed.reload() or killed.status == "exited", 30, "the leader's container to exit")
        new_leader = wait_until(lambda: (lambda p: p if p not in (-1, leader) else None)(
            cluster.partition(TOPIC, 0)["leader"]), 60, "another broker to take the leadership")
        acked_at_failover = len(producer.acked)
        wait_until(lambda: len(producer.acked) >= acked_at_failover + 300, 90,
                   f"acknowledgements from the new leader {new_leader}")
    finally:
        producer.stop()
    assert not producer.failed, f"{len(producer.failed)} sends failed, e.g. {producer.failed[:3]}"
    missing = set(producer.acked) - consume_all(TOPIC, set(producer.acked))
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"

    # restarted with its volume, the broker keeps its log and catches up into the ISR
    compose_run.cli("start", str(leader))
    wait_until(lambda: leader in isr(compose_run), 120, f"broker {leader} to rejoin the ISR")
    log = cluster.container(leader).exec_run(["sh", "-c", f"ls /var/lib/kafka/data/{TOPIC}-0/*.log"])
    assert log.exit_code == 0, log.output


def test_a_broker_cut_off_the_network_leaves_the_isr_and_comes_back(compose_run: ComposeRun):
    cluster = compose_run.cluster()
    wait_until(lambda: isr(compose_run) == [1, 2, 3], 120, "all three brokers in the ISR")
    follower = next(b for b in (1, 2, 3) if b != cluster.partition(TOPIC, 0)["leader"])
    producer = AckedProducer(TOPIC, max_messages=5000).start()
    try:
        compose_run.cli("disconnect", str(follower))
        wait_until(lambda: follower not in isr(compose_run), 60, f"broker {follower} to drop out of the ISR")
        acked = len(producer.acked)
        wait_until(lambda: len(producer.acked) >= acked + 100, 60, "acknowledgements without the cut-off broker")
        compose_run.cli("connect", str(follower))
        wait_until(lambda: follower in isr(compose_run), 120, f"broker {follower} back in the ISR")
    finally:
        producer.stop()
    assert not producer.failed
    # and its published port serves clients again
    metadata = AdminClient({"bootstrap.servers": f"localhost:{9091 + follower}"}).list_topics(timeout=30)
    assert follower in metadata.brokers


def test_pause_and_unpause(compose_run: ComposeRun):
    cluster = compose_run.cluster()
    follower = next(b for b in (1, 2, 3) if b != cluster.partition(TOPIC, 0)["leader"])
    compose_run.cli("pause", str(follower))
    try:
        assert wait_until(lambda: cluster.container(follower).reload() or cluster.container(follower).status
                          == "paused", 30, "the container to be paused")
    finally:
        compose_run.cli("unpause", str(follower))
    wait_until(lambda: cluster.container(follower).status == "running", 30, "the container to run again")


def leaders(run: ComposeRun, topic: str) -> dict[int, int]:
    return {p["partition"]: p["leader"] for p in run.cluster().state()["partitions"] if p["topic"] == topic}


def isrs(run: ComposeRun, topic: str) -> dict[int, list[int]]:
    return {p["partition"]: sorted(p["isr"]) for p in run.cluster().state()["partitions"] if p["topic"] == topic}


def kafkasim_tables(run: ComposeRun) -> list[str]:
    """The containers that still hold a kafkasim nft table, read the way ``net status --docker`` does."""
    from cluster.docker_net import DockerNet

    net = DockerNet(run.cluster())
    _network, members = net.network()
    return [name for name, container in members.items() if net._alive(container) and net.has_table(container)]


def answers_api_versions(port: int) -> bool:
    """An ApiVersions v0 request on a plain socket gets its answer, with no error."""
    import socket
    import struct

    client_id = b"kafkasim-test"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    with socket.create_connection(("localhost", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        header = b""
        while len(header) < 10:
            chunk = sock.recv(10 - len(header))
            assert chunk, "the broker closed the connection"
            header += chunk
    _size, correlation_id, error_code = struct.unpack(">iih", header)
    return correlation_id == 7 and error_code == 0


def wait_for_isrs(run: ComposeRun, topic: str, partitions: int, what: str, timeout_s: float = 120) -> None:
    """Every partition's ISR full again; when not, the failure shows each broker container's state and log tail."""
    try:
        wait_until(lambda: isrs(run, topic) == {p: [1, 2, 3] for p in range(partitions)}, timeout_s, what)
    except AssertionError as exc:
        shown = []
        for broker_id, container in sorted(run.cluster().brokers().items()):
            container.reload()
            tail = container.logs(tail=25).decode(errors="replace")
            shown.append(f"--- broker {broker_id}: {container.status}, networks "
                         f"{list(container.attrs['NetworkSettings']['Networks'])}\n{tail}")
        raise AssertionError(f"{exc}; ISRs {isrs(run, topic)}\n" + "\n".join(shown)) from None


def test_a_leader_cut_off_zookeeper_is_replaced_yet_still_answers_clients_and_rejoins_after_heal(
        compose_run: ComposeRun):
    """The zombie leader: cut from ZooKeeper alone, its session expires and the controller elects another
    leader, while clients on the host still reach it; healed, it registers again and follows."""
    wait_until(lambda: isr(compose_run) == [1, 2, 3], 120, "all three brokers in the ISR")
    leader = compose_run.cluster().partition(TOPIC, 0)["leader"]
    try:
        out = compose_run.cli("net", "isolate", str(leader), "--from", "zookeeper")
        assert f"broker {leader} cut off from zookeeper" in out
        status = compose_run.cli("net", "status")
        assert f"broker {leader} drops traffic with zookeeper\n" in status, status
        elected = wait_until(lambda: (lambda p: p if p["leader"] not in (-1, leader) else None)(
            compose_run.cluster().partition(TOPIC, 0)), 60, "the controller to elect another leader")
        assert leader not in isr(compose_run)
        # the zombie still answers clients on its published port (a client library would move on to the
        # brokers its metadata names, so the question goes to this one port by hand)
        assert answers_api_versions(9091 + leader)
    finally:
        compose_run.cli("net", "heal")
    wait_for_isrs(compose_run, TOPIC, 1, f"broker {leader} back in the ISR")
    after = compose_run.cluster().partition(TOPIC, 0)
    # it rejoined as a follower of the new leader; being the preferred replica, the automatic preferred election
    # (auto.leader.rebalance.enable) may since have given it the leadership back, but only in a newer epoch
    assert (after["leader"], after["leader_epoch"]) == (elected["leader"], elected["leader_epoch"]) or (
        after["leader"] == leader and after["leader_epoch"] > elected["leader_epoch"]), (elected, after)
    assert kafkasim_tables(compose_run) == []


def test_a_partition_with_zookeeper_on_the_majority_side_moves_broker_1_s_leaderships(compose_run: ComposeRun):
    """``1 2,3,zk``: broker 1 loses ZooKeeper with the others, so its leaderships move; with ZooKeeper on both
    sides (``1 2,3``) it would keep its session and lead on alone with an ISR of itself, as in Kafka. The cuts are
    made by helper containers and removed from the host, so either way into the namespaces sees the other's."""
    topic = "split"
    wait_for_isrs(compose_run, TOPIC, 1, "all three brokers in the ISR")
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    assignment = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]  # broker 1 leads partition 0
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=-1, replica_assignment=assignment)]
                        )[topic].result(60)
    wait_until(lambda: isrs(compose_run, topic) == {p: [1, 2, 3] for p in range(3)}, 60, "the ISR of every partition")
    assert leaders(compose_run, topic)[0] == 1
    try:
        out = compose_run.cli("net", "partition", "1", "2,3,zk", env={"KAFKASIM_DOCKER_NET": "helper"})
        assert "partitioned: 1 | 2,3,zk" in out
        status = compose_run.cli("net", "status", env={"KAFKASIM_DOCKER_NET": "helper"})
        for line in ("zookeeper drops traffic with broker 1", "broker 1 drops traffic with broker 2, broker 3, "
                     "zookeeper", "broker 2 drops traffic with broker 1", "broker 3 drops traffic with broker 1"):
            assert line in status, status
        wait_until(lambda: all(leader not in (-1, 1) for leader in leaders(compose_run, topic).values()), 60,
                   "every leadership of broker 1 to move to the other side")
        assert all(1 not in members for members in isrs(compose_run, topic).values())
    finally:
        healed = compose_run.cli("net", "heal", env={"KAFKASIM_DOCKER_NET": "host"})
    assert "zookeeper (cuts)" in healed and "broker 1 (cuts)" in healed
    assert kafkasim_tables(compose_run) == []
    assert "nothing is cut or slowed" in compose_run.cli("net", "status")
    wait_for_isrs(compose_run, topic, 3, "broker 1 back in every ISR")


def test_isolating_from_all_disconnects_and_heal_reconnects(compose_run: ComposeRun):
    cluster = compose_run.cluster()
    follower = next(b for b in (1, 2, 3) if b != cluster.partition(TOPIC, 0)["leader"])
    try:
        compose_run.cli("net", "isolate", str(follower), "--from", "all")
        assert f"broker {follower} is disconnected" in compose_run.cli("net", "status")
    finally:
        healed = compose_run.cli("net", "heal")
    assert f"broker {follower} (reconnected)" in healed
    wait_for_isrs(compose_run, TOPIC, 1, f"broker {follower} back in the ISR")


def test_traces_are_collected_from_the_containers(compose_run: ComposeRun, tmp_path: Path):
    out = tmp_path / "run"
    compose_run.cli("traces", "collect", "--out", str(out))
    manifest = json.loads((out / "collected.json").read_text())
    for broker_id in (1, 2, 3):
        assert any(f"broker-{broker_id}/" in f for f in manifest["trace_files"]), manifest["trace_files"]
        assert any(f"broker-{broker_id}.jsonl" in f for f in manifest["final_logs"]), manifest["final_logs"]
    tools = [f for f in manifest["trace_files"] if f.endswith("tools-trace.jsonl")]
    assert tools, "the faults injected with --docker are not in the collection"
    actions = [json.loads(line)["action"] for line in (out / tools[0]).read_text().splitlines()]
    assert {"sigkill", "start", "disconnect", "connect", "pause", "resume", "isolate", "partition", "heal"} \
        <= set(actions)


def test_compose_down_v_leaves_nothing_behind(compose_run: ComposeRun):
    client = compose_run.cluster().client
    compose_run.run("down", "-v", "--remove-orphans", "-t", "5", timeout_s=180)
    label = {"label": f"{PROJECT_LABEL}={compose_run.project}"}
    assert client.containers.list(all=True, filters=label) == []
    assert client.networks.list(filters=label) == []
    assert client.volumes.list(filters=label) == []
