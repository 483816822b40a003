"""Where `kafkasim up` puts each broker's metrics endpoint (no processes)."""

from __future__ import annotations

import json
import socket

import pytest

from cluster.processes import BrokerSpec, ClusterLayout, ClusterSpec, broker_properties, metrics_url
from cluster.processes import ClusterError, choose_ports
from zk.server import ephemeral_range, free_port


def _fixed_layout(count: int) -> tuple[int, list[tuple[int, int, int]]]:
    """The first base below Linux's ephemeral range (32768 up) whose ports are all free: a fixed base in that range can
    be held for a moment by any client's outgoing connection on a busy machine."""
    for base in range(21000, 30000, 300):
        try:
            return base, choose_ports(count, base)
        except ClusterError:
            continue
    raise AssertionError("no free base port between 21000 and 30000")


def test_fixed_ports_put_metrics_two_hundred_above_the_client_port():
    base, ports = _fixed_layout(3)
    assert ports == [(base + i, base + 100 + i, base + 200 + i) for i in range(3)]


def test_a_busy_fixed_port_is_refused_with_what_to_do():
    base, _ = _fixed_layout(2)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 101))
        holder.listen()
        with pytest.raises(ClusterError, match=rf"ports \[{base + 101}\] on 127.0.0.1 are in use.*--base-port"):
            choose_ports(2, base)


def test_any_free_ports_are_three_distinct_ports_per_broker():
    ports = choose_ports(3, 0)
    flat = [p for triple in ports for p in triple]
    assert len(ports) == 3 and len(set(flat)) == 9 and all(p > 0 for p in flat)


def test_a_free_port_is_never_one_already_chosen():
    """`up` picks every port before any listener binds: ZooKeeper's port is chosen away from the brokers' ones."""
    low, _ = ephemeral_range()
    left = set(choose_ports(2, 0)[0])
    avoid = set(range(10000, low)) - left
    assert {free_port(avoid=avoid) for _ in range(20)} <= left
    only = max(left)
    assert free_port(avoid=avoid | (left - {only})) == only


def test_the_metrics_port_reaches_the_broker_properties_and_an_override_wins(tmp_path):
    layout = ClusterLayout(tmp_path)
    broker = BrokerSpec(1, 9092, 9192, host="10.0.0.2", metrics_port=9292)
    spec = ClusterSpec(zookeeper="zk:2181", external_zookeeper=True, profile="classroom", brokers=[broker])
    assert broker_properties(spec, broker, layout)["kafkasim.metrics.port"] == "9292"
    assert metrics_url(broker) == "http://10.0.0.2:9292/metrics"
    spec.overrides = {"kafkasim.metrics.port": "0"}
    assert broker_properties(spec, broker, layout)["kafkasim.metrics.port"] == "0"


def test_a_cluster_json_written_before_metrics_still_loads_without_them(tmp_path):
    (tmp_path / "cluster.json").write_text(json.dumps({
        "zookeeper": "127.0.0.1:2181", "external_zookeeper": False, "profile": "classroom",
        "brokers": [{"broker_id": 1, "client_port": 9092, "cluster_port": 9192, "host": "127.0.0.1"}]}))
    broker = ClusterLayout(tmp_path).load().brokers[0]
    assert broker.metrics_port == 0 and metrics_url(broker) is None
    assert "kafkasim.metrics.port" not in broker_properties(ClusterLayout(tmp_path).load(), broker,
                                                            ClusterLayout(tmp_path))
