"""kafkasim.metrics.port in the broker's configuration (no processes)."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, KafkaConfig

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181",
        "listeners": "PLAINTEXT://10.0.0.5:9092,CLUSTER://10.0.0.5:9192"}


def test_a_bare_broker_serves_no_metrics():
    assert KafkaConfig.from_properties(BASE).metrics_port == 0


def test_metrics_bind_where_the_client_listener_does():
    config = KafkaConfig.from_properties({**BASE, "kafkasim.metrics.port": "9292"})
    assert (config.metrics_host, config.metrics_port) == ("10.0.0.5", 9292)
    assert KafkaConfig.from_properties({**BASE, "listeners": "PLAINTEXT://:9092,CLUSTER://:9192"}).metrics_host \
        == "0.0.0.0"


@pytest.mark.parametrize(("port", "message"), [("9092", "is a listener's port too"), ("70000", "65535"),
                                               ("-1", "greater than or equal to 0")])
def test_a_metrics_port_that_cannot_work_is_refused_by_name(port, message):
    with pytest.raises(ConfigError, match=r"kafkasim\.metrics\.port") as caught:
        KafkaConfig.from_properties({**BASE, "kafkasim.metrics.port": port})
    assert message in str(caught.value)
