import pytest
from kio.schema.errors import ErrorCode

from broker.dynamic_config import (
    AlterOp,
    ConfigError,
    ConfigOperation,
    incremental_overrides,
    replacement_overrides,
    validate_topic_overrides,
)
from broker.log.config import LogConfig
from zk.znodes import ConfigChangeNotificationZNode, ZNodeDecodeError

DEFAULTS = LogConfig.from_broker_properties({"min.insync.replicas": "1"})
SET, DELETE, APPEND = ConfigOperation.SET, ConfigOperation.DELETE, ConfigOperation.APPEND


def test_set_and_delete_apply_to_the_current_overrides_and_leave_the_others():
    current = {"retention.ms": "1000", "min.insync.replicas": "2"}
    ops = [AlterOp("min.insync.replicas", SET, "3"), AlterOp("retention.ms", DELETE, None),
           AlterOp("segment.bytes", DELETE, None)]
    assert incremental_overrides(current, ops) == {"min.insync.replicas": "3"}


def test_an_unknown_name_is_invalid_config_with_kafkas_message():
    with pytest.raises(ConfigError) as info:
        incremental_overrides({}, [AlterOp("no.such.config", SET, "1")])
    assert info.value.error_code == ErrorCode.invalid_config
    assert str(info.value) == "Unknown topic config name: no.such.config"


def test_deleting_a_name_kafka_does_not_know_is_no_error_as_in_kafka():
    assert incremental_overrides({"retention.ms": "1"}, [AlterOp("no.such.config", DELETE, None)]) == {
        "retention.ms": "1"}


def test_append_is_refused_as_for_a_non_list_config_and_duplicates_and_null_values_too():
    for ops in ([AlterOp("retention.ms", APPEND, "1")],
                [AlterOp("retention.ms", SET, "1"), AlterOp("retention.ms", DELETE, None)],
                [AlterOp("retention.ms", SET, None)]):
        with pytest.raises(ConfigError) as info:
            incremental_overrides({}, ops)
        assert info.value.error_code == ErrorCode.invalid_request
    with pytest.raises(ConfigError):
        replacement_overrides([("retention.ms", None)])


@pytest.mark.parametrize(("name", "value", "reason"), [
    ("min.insync.replicas", "0", "Value must be at least 1"),
    ("min.insync.replicas", "two", "Not a number of type INT"),
    ("retention.ms", "soon", "Not a number of type LONG"),
    ("unclean.leader.election.enable", "maybe", "Expected value to be either true or false"),
])
def test_a_bad_value_is_refused_as_kafka_28_refuses_a_config_exception(name, value, reason):
    with pytest.raises(ConfigError) as info:
        validate_topic_overrides("orders", {name: value}, DEFAULTS)
    assert info.value.error_code == ErrorCode.invalid_request
    assert str(info.value) == (f"Invalid config value for resource ConfigResource(type=TOPIC, name='orders'): "
                               f"Invalid value {value} for configuration {name}: {reason}")


def test_valid_overrides_give_the_log_config():
    config = validate_topic_overrides("orders", {"min.insync.replicas": "3", "unclean.leader.election.enable": "true"},
                                      DEFAULTS)
    assert config.min_insync_replicas == 3


def test_config_change_notifications_are_version_2_and_version_1_is_still_read():
    assert ConfigChangeNotificationZNode.encode("topics/orders") == b'{"version":2,"entity_path":"topics/orders"}'
    assert ConfigChangeNotificationZNode.decode("config_change_0000000001",
                                                b'{"version":2,"entity_path":"topics/orders"}') == "topics/orders"
    assert ConfigChangeNotificationZNode.decode(
        "c", b'{"version":1,"entity_type":"topics","entity_name":"orders"}') == "topics/orders"
    assert ConfigChangeNotificationZNode.sequence("config_change_0000000042") == 42
    assert ConfigChangeNotificationZNode.sequence("other") is None
    with pytest.raises(ZNodeDecodeError):
        ConfigChangeNotificationZNode.decode("c", b'{"version":2}')


def test_a_min_compaction_lag_above_the_max_is_invalid_config():
    # LogConfig.validateValues: an InvalidConfigurationException, whichever of the two is changed
    with pytest.raises(ConfigError) as info:
        validate_topic_overrides("t", {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, LogConfig())
    assert info.value.error_code is ErrorCode.invalid_config
    assert "min.compaction.lag.ms (10) > max.compaction.lag.ms (5)" in str(info.value)
    assert validate_topic_overrides("t", {"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"},
                                    LogConfig()).min_compaction_lag_ms == 5
