"""Where `kafkasim up` puts each broker's metrics endpoint (no processes)."""

from __future__ import annotations

import json

from cluster.processes import BrokerSpec, ClusterLayout, ClusterSpec, broker_properties, choose_ports, metrics_url


def test_fixed_ports_put_metrics_two_hundred_above_the_client_port():
    assert choose_ports(3, 41000) == [(41000, 41100, 41200), (41001, 41101, 41201), (41002, 41102, 41202)]


def test_any_free_ports_are_three_distinct_ports_per_broker():
    ports = choose_ports(3, 0)
    flat = [p for triple in ports for p in triple]
    assert len(ports) == 3 and len(set(flat)) == 9 and all(p > 0 for p in flat)


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
