"""/metrics of real broker processes, against what a real ZooKeeper and confluent-kafka see."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
from confluent_kafka import Producer

from cluster.processes import write_properties
from tests.cluster.test_controller import SESSION_S, make_topic
from tests.harness import RunningCluster, wait_until
from tests.metrics.support import scrape, value

pytestmark = [pytest.mark.processes, pytest.mark.slow]

URP = "kafka_server_replicamanager_underreplicatedpartitions"
ACTIVE = "kafka_controller_kafkacontroller_activecontrollercount"


def live(cluster: RunningCluster) -> list[int]:
    return [b.broker_id for b in cluster.spec.brokers if cluster.pid(b.broker_id) is not None]


def test_survivors_report_under_replicated_partitions_after_a_kill_and_none_once_it_rejoins(cluster):
    make_topic(cluster, "urp", 6, 3)
    wait_until(lambda: all(value(scrape(cluster, b), URP) == 0 for b in live(cluster))
               and sum(value(scrape(cluster, b), "kafka_server_replicamanager_leadercount") for b in live(cluster))
               >= 6, 15, "every partition fully replicated")
    victim = next(b for b in (1, 2, 3) if b != cluster.controller())
    survivors = [b for b in (1, 2, 3) if b != victim]
    killed_at = time.monotonic()
    cluster.kill9(victim)
    # the controller learns of the death when the session expires, and shrinks the ISRs it sends the leaders
    wait_until(lambda: all(value(scrape(cluster, b), URP) > 0 for b in survivors), SESSION_S + 1,
               "both survivors to report under-replicated partitions")
    assert time.monotonic() - killed_at <= SESSION_S + 1.5
    assert sum(value(scrape(cluster, b), URP) for b in survivors) == 6  # every partition had a replica there

    cluster.start(victim)
    wait_until(lambda: all(value(scrape(cluster, b), URP) == 0 for b in (1, 2, 3)), 30,
               "no under-replicated partition once the broker rejoined the ISRs")
    expands = sum(value(scrape(cluster, b), "kafka_server_replicamanager_isrexpands_total") for b in (1, 2, 3))
    assert expands >= 6  # each leader took the restarted follower back into its ISR itself


def test_bytes_in_grow_by_exactly_the_record_batches_the_leader_appended(cluster):
    make_topic(cluster, "bytes", 1, 3)
    leader = cluster.state(["bytes"]).partition("bytes", 0).leader
    before = scrape(cluster, leader)
    producer = Producer({"bootstrap.servers": cluster.spec.bootstrap_servers, "acks": "all",
                         "linger.ms": 5, "compression.type": "none"})
    for i in range(200):
        producer.produce("bytes", value=f"value-{i}".encode() * 3, key=str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    after = scrape(cluster, leader)

    grown = value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic="bytes") - \
        value(before, "kafka_server_brokertopicmetrics_bytesin_total", topic="bytes")
    # Kafka counts the record batches' size as received; kafkasim stores them as received, so the segment
    # files on disk grew by exactly as much
    segments = cluster.layout.broker_dir(leader) / "logs" / "bytes-0"
    on_disk = sum(path.stat().st_size for path in segments.glob("*.log"))
    assert grown == on_disk > 200 * len(b"value-0" * 3)
    assert value(after, "kafka_log_log_size", topic="bytes", partition="0") == on_disk
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic="bytes") - \
        value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic="bytes") == 200
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total") - \
        value(before, "kafka_server_brokertopicmetrics_bytesin_total") >= grown  # the all-topics sample
    assert value(after, "kafka_log_log_logendoffset", topic="bytes", partition="0") == 200
    for follower in (b for b in (1, 2, 3) if b != leader):
        # followers replicate the batches but did not receive them from producers
        samples = scrape(cluster, follower)
        assert value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic="bytes") == 0
        assert value(samples, "kafka_log_log_logendoffset", topic="bytes", partition="0") == 200  # acks=all
        assert ("kafka_server_replicafetchermanager_maxlag", frozenset({("clientId", "Replica")})) in samples
    assert value(after, "kafkasim_partition_follower_lag", topic="bytes", partition="0",
                 replica=str(next(b for b in (1, 2, 3) if b != leader))) == 0
    produces = sum(n for (name, labels), n in after.items()
                   if name == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in labels)
    assert produces >= 1


def test_exactly_one_broker_counts_itself_the_active_controller_before_and_after_a_failover(cluster):
    def counts() -> dict[int, float]:
        return {b: value(scrape(cluster, b), ACTIVE) for b in live(cluster)}

    first = cluster.controller()
    wait_until(lambda: sum(counts().values()) == 1 and counts()[first] == 1, 10, "one active controller")
    cluster.kill9(first)
    second = wait_until(lambda: (c := cluster.controller()) not in (-1, first) and c, 30, "a new controller")

    def one_active() -> dict[int, float] | None:
        seen = counts()
        return seen if sum(seen.values()) == 1 else None

    seen = wait_until(one_active, 10, "one active controller again")
    assert seen[second] == 1
    epoch = cluster.state(topics=[]).controller_epoch
    assert value(scrape(cluster, second), "kafkasim_controller_epoch") == epoch


def test_a_metrics_port_of_zero_serves_nothing(cluster_factory):
    cluster = cluster_factory(overrides={"kafkasim.metrics.port": "0"})
    for broker in cluster.spec.brokers:
        listening = {c.laddr.port for c in psutil.Process(cluster.pid(broker.broker_id)).net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN}
        assert listening == {broker.client_port, broker.cluster_port}


def test_a_busy_metrics_port_stops_the_broker_at_start_with_a_clear_message(tmp_path, zk_connect):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        ports = []
        for _ in range(2):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                ports.append(probe.getsockname()[1])
        config = tmp_path / "server.properties"
        write_properties(config, {
            "broker.id": "1", "zookeeper.connect": zk_connect, "log.dirs": str(tmp_path / "logs"),
            "listeners": f"PLAINTEXT://127.0.0.1:{ports[0]},CLUSTER://127.0.0.1:{ports[1]}",
            "kafkasim.metrics.port": str(busy)})
        process = subprocess.Popen([sys.executable, "-m", "broker", "--config", str(config)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    assert process.returncode == 1
    assert f"kafkasim.metrics.port={busy} cannot bind 127.0.0.1:{busy}" in stderr
    assert "choose another kafkasim.metrics.port" in stderr
