"""The client plane as far as it is served: the handshake and Metadata, with unmodified clients, and bad
frames that close only their own connection."""

import shutil
import socket
import struct
import subprocess

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka.protocol.metadata.api_versions import ApiVersionsResponse

from cluster.processes import BrokerSpec, ClusterError
from cluster.readiness import names_a_controller, read_frame, wait_until_serving
from tests.cluster.test_controller import SESSION_S, make_topic
from tests.harness import wait_until

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def bootstrap(cluster) -> str:
    return cluster.spec.bootstrap_servers


def api_versions_frame(version: int, correlation_id: int = 7) -> bytes:
    client_id = b"raw-test"
    header = struct.pack(">hhih", 18, version, correlation_id, len(client_id)) + client_id
    # v3 is flexible: a tag byte after the header, then compact strings and a tag byte in the body
    body = b"\x00" + b"\x05kcat" + b"\x061.7.1" + b"\x00" if version >= 3 else b""
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def test_confluent_kafka_and_kafka_python_see_the_cluster_as_zookeeper_does(cluster):
    make_topic(cluster, "meta", 3, 3)
    state = cluster.state(["meta"])
    wait_until(lambda: len(AdminClient({"bootstrap.servers": bootstrap(cluster)}).list_topics(timeout=10)
                           .topics.get("meta").partitions) == 3, 15, "metadata to reach the brokers")
    md = AdminClient({"bootstrap.servers": bootstrap(cluster)}).list_topics(timeout=10)
    assert md.controller_id == state.controller_id
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {
        b.broker_id: ("127.0.0.1", b.client_port) for b in cluster.spec.brokers}
    for p in state.partitions:
        got = md.topics["meta"].partitions[p.partition]
        assert (got.leader, got.replicas, got.isrs) == (p.leader, p.replicas, p.isr)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster).split(","), request_timeout_ms=10000)
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    assert described["controller_id"] == state.controller_id and described["cluster_id"] == md.cluster_id
    assert md.topics.get("absent") is None

    victim = state.partition("meta", 0).leader
    cluster.kill9(victim)

    def moved():
        meta = AdminClient({"bootstrap.servers": bootstrap(cluster)}).list_topics(timeout=10)
        return meta.topics["meta"].partitions[0].leader not in (-1, victim) and victim not in meta.brokers

    wait_until(moved, SESSION_S + 20, "clients to see the new leader and the dead broker gone")


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/setup.sh")
def test_kcat_lists_brokers_and_topics(cluster):
    make_topic(cluster, "cat", 2, 2)
    wait_until(lambda: "topic \"cat\" with 2 partitions" in subprocess.run(
        ["kcat", "-b", bootstrap(cluster), "-L", "-m", "10"], capture_output=True, text=True, timeout=30).stdout,
        20, "kcat -L to list the topic")
    out = subprocess.run(["kcat", "-b", bootstrap(cluster), "-L"], capture_output=True, text=True, timeout=30).stdout
    assert "3 brokers:" in out and f"broker {cluster.controller()} at" in out and "(controller)" in out


def test_api_versions_handshake_and_downgrade(cluster):
    port = cluster.spec.brokers[0].client_port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(api_versions_frame(3, correlation_id=11))
        reply = ApiVersionsResponse.decode(read_frame(sock), version=3, header=True)
        assert reply.header.correlation_id == 11 and reply.error_code == 0
        keys = {entry[0]: (entry[1], entry[2]) for entry in reply.api_keys}
        assert keys[18] == (0, 3) and keys[3] == (1, 8) and keys[0] == (0, 8)
        # too new a version: a v0-format answer with UNSUPPORTED_VERSION, and the connection stays open
        sock.sendall(api_versions_frame(9, correlation_id=12))
        downgrade = ApiVersionsResponse.decode(read_frame(sock), version=0, header=True)
        assert downgrade.error_code == 35 and [tuple(k)[:3] for k in downgrade.api_keys] == [(18, 0, 3)]
        sock.sendall(api_versions_frame(0, correlation_id=13))
        assert ApiVersionsResponse.decode(read_frame(sock), version=0, header=True).error_code == 0


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 12) + b"\x00\x03\x00\x08junkjunk",           # Metadata v8 with a garbage body
    struct.pack(">i", 8) + struct.pack(">hhi", 999, 0, 1),         # unknown API key
    struct.pack(">i", 200 * 1024 * 1024),                          # larger than socket.request.max.bytes
    struct.pack(">i", -5),                                         # negative size
])
def test_a_bad_frame_closes_only_its_connection(cluster, frame):
    port = cluster.spec.brokers[0].client_port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as good, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as bad:
        bad.sendall(frame)
        assert bad.recv(1) == b""  # closed by the broker
        good.sendall(api_versions_frame(3))
        assert ApiVersionsResponse.decode(read_frame(good), version=3, header=True).error_code == 0
    assert cluster.pid(1) is not None


def test_up_returns_once_every_broker_names_the_controller_and_a_non_broker_does_not(cluster):
    # the fixture's `kafkasim up` returned: each broker's Metadata names a controller already
    assert all(names_a_controller(b.host, b.client_port) for b in cluster.spec.brokers)
    with socket.socket() as silent:  # a listener that never answers: not serving
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        assert not names_a_controller("127.0.0.1", port, timeout_s=0.5)
        with pytest.raises(ClusterError, match=r"brokers \[9\] are registered but their Metadata names no controller"):
            wait_until_serving([BrokerSpec(9, port, 0)], timeout_s=0.5)
    assert not names_a_controller("127.0.0.1", port, timeout_s=0.5)  # nothing listens there now
