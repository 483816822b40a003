import pytest

from broker.config import ConfigError, KafkaConfig, parse_properties

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}


def test_properties_parser_handles_separators_comments_and_continuations():
    text = "# comment\n! also\nbroker.id=3\nlog.dirs: /a,/b\nzookeeper.connect 127.0.0.1:2181/ks\n" \
           "listeners=PLAINTEXT://127.0.0.1:9092,\\\n  CLUSTER://127.0.0.1:9192\n"
    props = parse_properties(text)
    assert props == {"broker.id": "3", "log.dirs": "/a,/b", "zookeeper.connect": "127.0.0.1:2181/ks",
                     "listeners": "PLAINTEXT://127.0.0.1:9092,CLUSTER://127.0.0.1:9192"}



def test_a_file_with_continuations_and_unicode_escapes_reads_as_java_reads_it(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("broker.id = 4\n"
                    "zookeeper.connect=127.0.0.1:2181\\\n"
                    "    /caf\\u00e9\n"
                    "broker.rack:rack\\u00e9 \\\n"
                    "  \t  west\n"
                    "log.dirs   /data/a\\ b\n", encoding="latin-1")
    config = KafkaConfig.from_file(path)
    assert config.broker_id == 4
    assert config.zookeeper_connect == "127.0.0.1:2181/café"
    assert config.broker_rack == "racké west"
    assert config.log_dirs == "/data/a b"


def test_values_are_trimmed_like_kafkas_config_def():
    assert parse_properties("broker.id=3 \t\nlog.dirs=\\ /a\n") == {"broker.id": "3", "log.dirs": "/a"}


def test_an_unreadable_escape_fails_with_the_file_named(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("broker.id=1\nbroker.rack=r\\u00zz\n")
    with pytest.raises(ConfigError, match=r"cannot read .*server\.properties: Invalid \\u escape.*\\u00zz"):
        KafkaConfig.from_file(path)


def test_a_bad_value_in_a_file_names_the_property_and_the_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("broker.id=one\nzookeeper.connect=127.0.0.1:2181\n")
    with pytest.raises(ConfigError, match=r"server\.properties is not a usable broker configuration:\n  broker\.id"):
        KafkaConfig.from_file(path)


def test_kafka_defaults():
    config = KafkaConfig.from_properties(BASE)
    assert config.zookeeper_session_timeout_ms == 18000
    assert config.replica_lag_time_max_ms == 30000
    assert config.unclean_leader_election_enable is False
    assert config.controlled_shutdown_max_retries == 3
    assert [str(lst) for lst in config.client_listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert config.cluster_listener.port == 9192
    assert config.replica_high_watermark_checkpoint_interval_ms == 5000
    assert config.log_retention_check_interval_ms == 300000
    assert config.log_flush_offset_checkpoint_interval_ms == 60000


def test_classroom_profile_shortens_timeouts_and_user_settings_still_win():
    config = KafkaConfig.from_properties({**BASE, "kafkasim.profile": "classroom",
                                          "replica.lag.time.max.ms": "4000"})
    assert config.zookeeper_session_timeout_ms == 2000
    assert config.replica_lag_time_max_ms == 4000
    assert "profile sets zookeeper.session.timeout.ms=2000" in config.describe()


def test_leader_rebalance_settings_are_kafkas_and_the_classroom_checks_every_ten_seconds():
    kafka = KafkaConfig.from_properties(BASE)
    assert (kafka.auto_leader_rebalance_enable, kafka.leader_imbalance_check_interval_seconds,
            kafka.leader_imbalance_per_broker_percentage) == (True, 300, 10)
    classroom = KafkaConfig.from_properties({**BASE, "kafkasim.profile": "classroom"})
    assert classroom.leader_imbalance_check_interval_seconds == 10
    off = KafkaConfig.from_properties({**BASE, "auto.leader.rebalance.enable": "false"})
    assert not off.auto_leader_rebalance_enable
    with pytest.raises(ConfigError, match=r"leader\.imbalance\.check\.interval\.seconds"):
        KafkaConfig.from_properties({**BASE, "leader.imbalance.check.interval.seconds": "0"})


@pytest.mark.parametrize("props, message", [
    ({"zookeeper.connect": "x:1"}, "broker.id"),
    ({"broker.id": "-1", "zookeeper.connect": "x:1"}, "broker.id"),
    ({"broker.id": "one", "zookeeper.connect": "x:1"}, "broker.id"),
    ({**BASE, "listeners": "PLAINTEXT://127.0.0.1:9092"}, "cluster-plane listener CLUSTER"),
    ({**BASE, "listeners": "PLAINTEXT://127.0.0.1:x,CLUSTER://h:1"}, "is not LISTENER_NAME://host:port"),
    ({**BASE, "listeners": "PLAINTEXT://h:1,CLUSTER://h:1"}, "one port twice"),
    ({**BASE, "zookeeper.session.timeout.ms": "0"}, "zookeeper.session.timeout.ms"),
    ({**BASE, "kafkasim.profile": "fast"}, "unknown profile"),
    ({**BASE, "log.retention.check.interval.ms": "0"}, "log.retention.check.interval.ms"),
    ({**BASE, "log.message.format.version": "0.10.2"}, "message format 0.11.0 and later"),
    ({**BASE, "inter.broker.protocol.version": "3.0"}, "use a version from 0.11.0 to 2.8-IV1"),
])
def test_bad_config_names_the_property(props, message):
    with pytest.raises(ConfigError) as info:
        KafkaConfig.from_properties(props, "server.properties")
    assert message in str(info.value) and "server.properties" in str(info.value)


def test_unknown_properties_are_warned_about_like_kafka():
    config = KafkaConfig.from_properties({**BASE, "replica.lag.tme.max.ms": "1"})
    assert "replica.lag.tme.max.ms was supplied but isn't a known config" in config.describe()


def test_min_insync_replicas_has_one_source_the_topic_defaults_that_topics_override():
    from broker.log.config import LogConfig

    config = KafkaConfig.from_properties({**BASE, "min.insync.replicas": "2"})
    defaults = LogConfig.from_broker_properties(config.log_properties)
    assert defaults.min_insync_replicas == 2
    assert defaults.with_overrides({"min.insync.replicas": "3"}).min_insync_replicas == 3
    assert not hasattr(config, "min_insync_replicas")  # read from the log config of the partition, never here
    assert "min.insync.replicas" not in config.describe()  # a known setting: no "isn't a known config" warning


def test_a_min_insync_replicas_below_one_fails_at_start_naming_it():
    with pytest.raises(ConfigError, match=r"min\.insync\.replicas"):
        KafkaConfig.from_properties({**BASE, "min.insync.replicas": "0"})


def test_the_versions_tools_read_default_to_kafka_two_eight_and_take_any_from_zero_eleven():
    config = KafkaConfig.from_properties(BASE)
    assert (config.inter_broker_protocol_version, config.log_message_format_version) == ("2.8-IV1", "2.8-IV1")
    older = KafkaConfig.from_properties({**BASE, "inter.broker.protocol.version": "2.4",
                                         "log.message.format.version": "0.11.0"})
    assert (older.inter_broker_protocol_version, older.log_message_format_version) == ("2.4", "0.11.0")


def test_transaction_settings_are_kafkas_and_the_classroom_has_ten_state_partitions():
    kafka = KafkaConfig.from_properties(BASE)
    assert (kafka.transaction_state_log_num_partitions, kafka.transaction_state_log_replication_factor,
            kafka.transaction_state_log_min_isr, kafka.transaction_state_log_segment_bytes) == (50, 3, 2, 104857600)
    assert (kafka.transaction_max_timeout_ms, kafka.transactional_id_expiration_ms,
            kafka.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            kafka.transaction_remove_expired_transaction_cleanup_interval_ms) == (900000, 604800000, 10000, 3600000)
    classroom = KafkaConfig.from_properties({**BASE, "kafkasim.profile": "classroom"})
    assert classroom.transaction_state_log_num_partitions == 10
    with pytest.raises(ConfigError, match=r"transaction\.max\.timeout\.ms"):
        KafkaConfig.from_properties({**BASE, "transaction.max.timeout.ms": "0"})
