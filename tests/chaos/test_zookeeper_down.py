"""zk-down: the cluster's ZooKeeper is killed for longer than a session timeout and started again on its
data. Leaders keep taking acks=all writes from the ISR they have, nothing is decided that cannot be
written, and once ZooKeeper is back the cluster is whole again with every acknowledged value readable."""

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cluster.lifecycle import start_zookeeper, stop_zookeeper
from cluster.processes import ClusterLayout
from tests.cluster.test_controller import make_topic
from tests.harness import own_cluster, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos, pytest.mark.timeout(300)]

TOPIC = "steady"
SESSION_S = 2.0  # classroom profile


@pytest.fixture
def own_zookeeper_cluster(tmp_path: Path):
    with own_cluster(tmp_path / "cluster", overrides={"min.insync.replicas": "2"}) as cluster:
        yield cluster


def produce(bootstrap: str, values: list[str]) -> dict[str, tuple[int, int]]:
    """acks=all; every value must be acknowledged. Returns value -> (partition, offset)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 20000})
    acked, failed = {}, []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.value().decode()] = (msg.partition(), msg.offset())
        else:
            failed.append((msg.value().decode(), str(err)))

    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value.encode(), partition=i % 3, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert not failed, f"writes failed: {failed[:5]}"
    return acked


def read_all(bootstrap: str, partitions: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        seen, deadline = [], time.monotonic() + 30
        positions = dict.fromkeys(range(partitions), 0)
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value().decode())
                positions[message.partition()] = message.offset() + 1
        return seen
    finally:
        consumer.close()


def test_leaders_keep_serving_while_zookeeper_is_down_and_the_cluster_converges_after(own_zookeeper_cluster):
    cluster = own_zookeeper_cluster
    make_topic(cluster, TOPIC, 3, 3)
    bootstrap = cluster.spec.bootstrap_servers
    before = cluster.state([TOPIC])
    acked = produce(bootstrap, [f"before-{i}" for i in range(300)])
    # Reading once creates __consumer_offsets (librdkafka looks up a coordinator for any group.id). Creating a
    # topic needs ZooKeeper: during the outage that lookup would wait for it, and the fetches behind it on
    # the same connection with it, since a broker answers a connection's requests in order (as Kafka does).
    assert sorted(read_all(bootstrap, 3)) == sorted(acked)
    # ... and each replica of it must have its log: creating one reads the topic's config from ZooKeeper
    wait_until(lambda: (ps := cluster.state(["__consumer_offsets"]).partitions) and all(
        p.leader >= 0 and (cluster.layout.broker_dir(b) / "logs" / f"__consumer_offsets-{p.partition}").is_dir()
        for p in ps for b in p.replicas), 30, "every replica of __consumer_offsets to have a leader and its log")

    stop_zookeeper(cluster.data_dir, say=lambda _: None)
    down_since = time.monotonic()
    during = produce(bootstrap, [f"during-{i}" for i in range(300)])
    assert {p for p, _ in during.values()} == {0, 1, 2}
    # outlast a session timeout: a ZooKeeper that was up would have expired every broker's session by now
    time.sleep(max(0.0, 2 * SESSION_S - (time.monotonic() - down_since)))
    assert sorted(read_all(bootstrap, 3)) == sorted([*acked, *during])

    start_zookeeper(cluster.data_dir, say=lambda _: None)
    after = wait_until(lambda: (s := cluster.state([TOPIC])).controller_id != -1 and len(s.brokers) == 3
                       and all(p.leader >= 0 and sorted(p.isr) == sorted(p.replicas) for p in s.partitions) and s,
                       SESSION_S + 30, "one controller, three brokers and full ISRs once ZooKeeper is back")
    # ZooKeeper restored the sessions it had granted, so nobody's expired: nothing was elected meanwhile
    for partition in before.partitions:
        now = after.partition(TOPIC, partition.partition)
        assert (now.leader, now.leader_epoch) == (partition.leader, partition.leader_epoch)
    later = produce(bootstrap, [f"after-{i}" for i in range(100)])
    assert sorted(read_all(bootstrap, 3)) == sorted([*acked, *during, *later])


def test_kill_and_start_zookeeper_from_the_command_line(own_zookeeper_cluster):
    cluster = own_zookeeper_cluster
    layout = ClusterLayout(cluster.data_dir)
    kafkasim = [sys.executable, "-m", "cluster.cli", "--data-dir", str(cluster.data_dir)]
    killed = subprocess.run([*kafkasim, "kill", "--zookeeper"], capture_output=True, text=True, timeout=60)
    assert killed.returncode == 0, killed.stderr
    assert layout.zookeeper_pid().read() is None
    started = subprocess.run([*kafkasim, "start", "--zookeeper"], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    assert layout.zookeeper_pid().read() is not None
    wait_until(lambda: cluster.state(topics=[]).controller_id != -1, 30, "a controller after the restart")
    faults = (cluster.data_dir / "tools-trace.jsonl").read_text()
    assert '"action":"zk-stop"' in faults and '"action":"zk-start"' in faults


def test_a_zookeeper_brought_back_waits_for_its_old_port_to_be_free(own_zookeeper_cluster):
    # The killed server's port was once still unbindable when a chaos run brought ZooKeeper back: the restart waits
    # (bounded) instead of failing the run. Here a plain bound socket holds the port for a second.
    cluster = own_zookeeper_cluster
    host, port = ClusterLayout(cluster.data_dir).load().zookeeper.split("/", 1)[0].rsplit(":", 1)
    stop_zookeeper(cluster.data_dir, say=lambda _: None)
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the old server's connections linger in TIME_WAIT
    # right after the kill the port is not bindable at all for a moment: what the restart has to wait out
    wait_until(lambda: _bound(holder, host, int(port)), 30, "the killed server's port to be bindable")
    holder.listen(1)
    release = threading.Timer(1.0, holder.close)
    release.start()
    said: list[str] = []
    try:
        start_zookeeper(cluster.data_dir, say=said.append)
    finally:
        release.join()
    assert any(f"port {port} could be bound again only after" in line for line in said), said
    wait_until(lambda: cluster.state(topics=[]).controller_id != -1, 30, "a controller after the restart")



def _bound(sock: socket.socket, host: str, port: int) -> bool:
    try:
        sock.bind((host, port))
    except OSError:
        return False
    return True
