"""The container's environment → broker properties mapping (pure; no Docker needed)."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, KafkaConfig
from cluster.docker_env import properties_from_env, property_name, write_config

COMPOSE_BROKER_ENV = {
    "KAFKA_BROKER_ID": "2",
    "KAFKA_ZOOKEEPER_CONNECT": "zookeeper:2181",
    "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:29092,EXTERNAL://0.0.0.0:9093,CLUSTER://0.0.0.0:9192",
    "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://kafka-2:29092,EXTERNAL://localhost:9093,CLUSTER://kafka-2:9192",
    "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT,CLUSTER:PLAINTEXT",
    "KAFKA_INTER_BROKER_LISTENER_NAME": "CLUSTER",
    "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
    "KAFKASIM_PROFILE": "classroom",
    "KAFKASIM_REPLICA_TRUNCATION_RULE": "kip-101",
    "KAFKA_HEAP_OPTS": "-Xmx1G",
    "PATH": "/usr/bin",
    "HOSTNAME": "kafka-2",
}


@pytest.mark.parametrize(("variable", "prefix", "name"), [
    ("KAFKA_BROKER_ID", "KAFKA_", "broker.id"),
    ("KAFKA_LOG_RETENTION_MS", "KAFKA_", "log.retention.ms"),
    ("KAFKA_CONFLUENT_SUPPORT__CUSTOMER__ID", "KAFKA_", "confluent.support_customer_id"),
    ("KAFKA_SOME___DASHED", "KAFKA_", "some-dashed"),
    ("KAFKASIM_TRACE_FILE", "KAFKASIM_", "trace.file"),
])
def test_confluent_naming_rule(variable, prefix, name):
    assert property_name(variable, prefix) == name


def test_compose_environment_makes_a_working_broker_config():
    props = properties_from_env(COMPOSE_BROKER_ENV)
    assert "heap.opts" not in props and "path" not in props and "hostname" not in props
    config = KafkaConfig.from_properties(props)
    assert config.broker_id == 2
    assert config.profile == "classroom"
    assert config.zookeeper_session_timeout_ms == 2000          # the classroom profile applied
    assert config.replica_truncation_rule.value == "kip-101"
    assert [str(lst) for lst in config.advertised] == [
        "PLAINTEXT://kafka-2:29092", "EXTERNAL://localhost:9093", "CLUSTER://kafka-2:9192"]
    assert config.cluster_listener.port == 9192
    assert [lst.port for lst in config.client_listeners] == [29092, 9093]
    assert str(config.all_log_dirs[0]) == "/var/lib/kafka/data"


def test_the_written_file_is_what_the_broker_reads(tmp_path):
    path = write_config({**COMPOSE_BROKER_ENV, "KAFKASIM_CONFIG_FILE": str(tmp_path / "server.properties")})
    assert KafkaConfig.from_file(path).broker_id == 2


def test_a_missing_variable_is_named():
    env = {k: v for k, v in COMPOSE_BROKER_ENV.items() if k != "KAFKA_ZOOKEEPER_CONNECT"}
    with pytest.raises(ConfigError, match=r"zookeeper\.connect"):
        KafkaConfig.from_properties(properties_from_env(env))
