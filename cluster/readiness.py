"""Whether a broker serves clients yet: its Metadata answer names a controller.

A broker registered in ZooKeeper answers Metadata with controller -1 and no brokers until the controller's first
UpdateMetadata reaches it, as Kafka's does. An admin client bootstrapped from it in that moment waits for a
controller that only a later metadata refresh would name: librdkafka's ElectLeaders and CreateTopics then went
unanswered for 30 s. So `kafkasim up` (and the tests' restarts) return once every broker names one."""

from __future__ import annotations

import socket
import struct
import time

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from cluster.processes import BrokerSpec, ClusterError

METADATA_VERSION = 1  # the first version that names the controller


def names_a_controller(host: str, client_port: int, timeout_s: float = 5.0) -> bool:
    """One Metadata request (no topics) on a fresh connection: whether the answer names a controller and a broker."""
    request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
    request.with_header(correlation_id=1, client_id="kafkasim-readiness")
    try:
        with socket.create_connection((host, client_port), timeout=timeout_s) as sock:
            sock.sendall(request.encode(version=METADATA_VERSION, header=True, framed=True))
            reply = MetadataResponse.decode(read_frame(sock), version=METADATA_VERSION, header=True)
    except (OSError, ConnectionError, ValueError):
        return False
    return reply.controller_id >= 0 and len(reply.brokers) > 0


def read_frame(sock: socket.socket) -> bytes:
    """One size-prefixed Kafka frame from a blocking socket, without its size (the tests' raw clients use it too)."""
    (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
    return _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed by the broker after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


def wait_until_serving(brokers: list[BrokerSpec], timeout_s: float = 30.0) -> None:
    """Until every broker's Metadata names a controller; ClusterError naming those that do not after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    waiting = list(brokers)
    while True:
        probe_s = max(0.1, min(5.0, deadline - time.monotonic()))
        waiting = [b for b in waiting if not names_a_controller(b.host, b.client_port, probe_s)]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"brokers {[b.broker_id for b in waiting]} are registered but their Metadata names no "
                               f"controller after {timeout_s:.0f} s: the controller's UpdateMetadata has not reached "
                               "them; see the controller's log")
        time.sleep(0.05)
