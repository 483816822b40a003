import json

import pytest
from kio.schema.errors import ErrorCode

from broker.config import KafkaConfig
from broker.dynamic_broker_config import (
    DYNAMIC_BROKER_CONFIGS,
    BrokerConfigLayers,
    ConfigSource,
    known_broker_configs,
    validate_broker_change,
)
from broker.dynamic_config import AlterOp, ConfigError, ConfigOperation, incremental_overrides
from broker.replication.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from broker.replication.truncation import TruncationRule
from traces.writer import TraceWriter
from zk.znodes import BrokerConfigZNode

STATIC = KafkaConfig.from_properties({"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181",
                                      "min.insync.replicas": "2", "log.retention.hours": "1"})
LAYERS = BrokerConfigLayers.of(STATIC)
DYNAMIC, DEFAULT, STATIC_SOURCE, KAFKA_DEFAULT = (ConfigSource.DYNAMIC_BROKER_CONFIG,
                                                  ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                                                  ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG)


def refusal(resource: str, overrides: dict[str, str], layers: BrokerConfigLayers = LAYERS) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate_broker_change(resource, overrides, layers)
    return info.value


def test_server_properties_win_over_kafkas_default():
    assert LAYERS.log_defaults().min_insync_replicas == 2
    assert LAYERS.log_defaults().retention_ms == 3_600_000
    assert LAYERS.unclean_leader_election_enable() is False


def test_the_cluster_wide_default_wins_over_server_properties():
    layers = LAYERS.with_dynamic(default={"min.insync.replicas": "3", "unclean.leader.election.enable": "true"})
    assert layers.log_defaults().min_insync_replicas == 3
    assert layers.unclean_leader_election_enable() is True


def test_a_brokers_own_dynamic_config_wins_over_the_cluster_wide_default():
    layers = LAYERS.with_dynamic(default={"min.insync.replicas": "3"}, broker={"min.insync.replicas": "1"})
    assert layers.log_defaults().min_insync_replicas == 1
    # deleting the broker's own falls back to the default, deleting that to server.properties
    assert layers.with_dynamic(broker={}).log_defaults().min_insync_replicas == 3
    assert layers.with_dynamic(broker={}, default={}).log_defaults().min_insync_replicas == 2


def test_a_dynamic_log_retention_ms_wins_over_a_static_log_retention_hours_as_in_kafka():
    assert LAYERS.with_dynamic(default={"log.retention.ms": "5000"}).log_defaults().retention_ms == 5000


def test_a_read_only_config_written_by_hand_into_a_dynamic_layer_is_not_taken():
    assert LAYERS.with_dynamic(broker={"broker.id": "7"}).effective()["broker.id"] == "1"


def test_synonyms_run_from_the_brokers_own_dynamic_value_to_kafkas_default():
    layers = LAYERS.with_dynamic(default={"min.insync.replicas": "3"}, broker={"min.insync.replicas": "1"})
    assert layers.synonyms("min.insync.replicas") == [
        ("min.insync.replicas", "1", DYNAMIC), ("min.insync.replicas", "3", DEFAULT),
        ("min.insync.replicas", "2", STATIC_SOURCE), ("min.insync.replicas", "1", KAFKA_DEFAULT)]


def test_retention_synonyms_list_every_alias_per_layer_and_drop_those_before_the_configs_own_name():
    layers = LAYERS.with_dynamic(default={"log.retention.ms": "5000"})
    assert layers.synonyms("log.retention.ms") == [
        ("log.retention.ms", "5000", DEFAULT), ("log.retention.hours", "1", STATIC_SOURCE),
        ("log.retention.ms", None, KAFKA_DEFAULT), ("log.retention.minutes", None, KAFKA_DEFAULT),
        ("log.retention.hours", "168", KAFKA_DEFAULT)]
    assert layers.synonyms("log.retention.hours")[0] == ("log.retention.hours", "1", STATIC_SOURCE)


def test_kafkas_dynamic_broker_configs_and_not_its_read_only_ones():
    assert {"min.insync.replicas", "unclean.leader.election.enable", "message.max.bytes", "log.retention.ms",
            "log.retention.bytes", "log.segment.bytes",
            "kafkasim.log.simulate.unflushed.loss"} <= DYNAMIC_BROKER_CONFIGS
    assert not {"broker.id", "zookeeper.connect", "listeners", "log.retention.hours", "log.roll.hours",
                "log.dirs"} & DYNAMIC_BROKER_CONFIGS


def test_a_read_only_config_is_refused_with_kafkas_message_and_invalid_request():
    error = refusal("1", {"min.insync.replicas": "2", "listeners": "PLAINTEXT://:1", "broker.id": "5"})
    assert error.error_code == ErrorCode.invalid_request
    assert str(error) == ("Invalid config value for resource ConfigResource(type=BROKER, name='1'): "
                          "Cannot update these configs dynamically: Set(broker.id, listeners)")


def test_a_bad_value_is_refused_as_kafkas_config_exception_and_names_the_broker_property():
    for overrides, text in (({"min.insync.replicas": "0"}, "Invalid value 0 for configuration min.insync.replicas: "
                                                            "Value must be at least 1"),
                            ({"message.max.bytes": "big"}, "Invalid value big for configuration message.max.bytes: "
                                                           "Not a number of type INT"),
                            ({"log.retention.ms": "x"}, "Invalid value x for configuration log.retention.ms: "
                                                        "Not a number of type LONG"),
                            ({"unclean.leader.election.enable": "yes"},
                             "Invalid value yes for configuration unclean.leader.election.enable: "
                             "Expected value to be either true or false")):
        error = refusal("", overrides)
        assert error.error_code == ErrorCode.invalid_request
        assert str(error) == f"Invalid config value for resource ConfigResource(type=BROKER, name=''): {text}"


def test_a_name_no_broker_config_has_is_invalid_config():
    error = refusal("", {"log.retention.msec": "1"})
    assert error.error_code == ErrorCode.invalid_config
    assert str(error).startswith("Unknown broker config name: log.retention.msec")


def test_valid_changes_pass():
    validate_broker_change("", {"min.insync.replicas": "3", "unclean.leader.election.enable": "TRUE"}, LAYERS)
    validate_broker_change("1", {"log.retention.ms": "1000", "message.max.bytes": "2000000"}, LAYERS)


def test_incremental_operations_on_a_brokers_config_use_the_broker_names():
    ops = [AlterOp("min.insync.replicas", ConfigOperation.SET, "3"),
           AlterOp("log.retention.ms", ConfigOperation.DELETE, None)]
    assert incremental_overrides({"log.retention.ms": "1"}, ops, known_broker_configs(), "broker") == {
        "min.insync.replicas": "3"}
    with pytest.raises(ConfigError, match=r"Unknown broker config name: no\.such"):
        incremental_overrides({}, [AlterOp("no.such", ConfigOperation.SET, "1")], known_broker_configs(), "broker")


def test_broker_config_znodes_are_kafkas():
    assert BrokerConfigZNode.path(BrokerConfigZNode.entity_name(None)) == "/config/brokers/<default>"
    assert BrokerConfigZNode.path(BrokerConfigZNode.entity_name(3)) == "/config/brokers/3"
    data = BrokerConfigZNode.encode({"min.insync.replicas": "3"})
    assert json.loads(data) == {"version": 1, "config": {"min.insync.replicas": "3"}}
    assert BrokerConfigZNode.decode("<default>", data) == {"min.insync.replicas": "3"}


def test_the_follower_truncation_rule_is_a_dynamic_kafkasim_switch():
    assert LAYERS.truncation_rule() == TruncationRule.KIP_279
    layers = LAYERS.with_dynamic(default={"kafkasim.replica.truncation.rule": "high-watermark"})
    assert layers.truncation_rule() == TruncationRule.HIGH_WATERMARK
    validate_broker_change("", {"kafkasim.replica.truncation.rule": "kip-101"}, LAYERS)
    error = refusal("", {"kafkasim.replica.truncation.rule": "kip-999"})
    assert error.error_code == ErrorCode.invalid_request
    assert str(error).endswith("Invalid value kip-999 for configuration kafkasim.replica.truncation.rule: "
                               "String must be one of: high-watermark, kip-101, kip-279")


def test_a_fetcher_manager_takes_a_new_truncation_rule_for_its_next_fetchers(tmp_path):
    settings = FetcherSettings(broker_id=1, max_wait_ms=500, min_bytes=1, partition_max_bytes=1 << 20,
                               response_max_bytes=10 << 20, backoff_ms=100, socket_timeout_ms=1000,
                               truncation_rule=TruncationRule.KIP_279)
    trace = TraceWriter(tmp_path / "trace.jsonl", 1, enabled=False)
    manager = ReplicaFetcherManager(settings, trace, lambda _: None, lambda _: None)
    manager.set_truncation_rule(TruncationRule.HIGH_WATERMARK)
    assert manager.settings.truncation_rule == TruncationRule.HIGH_WATERMARK
