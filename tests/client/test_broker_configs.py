"""Dynamic broker configs on a real cluster (issue 19, KIP-226): IncrementalAlterConfigs and AlterConfigs for a BROKER
resource, a broker's id or "" for the cluster-wide default, write /config/brokers/<id> or /config/brokers/<default>
and a /config/changes notification in Kafka's format; every broker applies it without a restart (a topic without
its own override follows: min.insync.replicas at the next acks=all produce), a broker's own value wins over the
default, deleting restores, DescribeConfigs reports sources, synonyms and read-only flags, read-only and invalid
changes write nothing, a broker restarted later applies the stored config at start, unclean election turned on
cluster-wide elects an offline partition, and `kafkasim config --broker N | --broker-defaults` does it too."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KafkaConfigResource
from kafka.admin import ConfigResourceType
from kafka.protocol.admin import AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest

from tests.client.support import RawConnection, bootstrap, client_port, create_topic, leader_of
from tests.harness import RunningCluster, module_cluster, wait_until, zk_call
from traces import events as te
from zk.admin import create_topic as zk_create_topic

pytestmark = [pytest.mark.processes, pytest.mark.slow]

MIN_ISR = "min.insync.replicas"
DEFAULT = ""  # the cluster-wide default's resource name
TOPIC, BROKER = 2, 4  # resource types


cluster = module_cluster("broker-configs-cluster")


def admin_client(cluster: RunningCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap(cluster)})


def alter_broker(cluster: RunningCluster, broker: str, *, set_: dict[str, str] | None = None,
                 delete: list[str] | None = None, validate_only: bool = False) -> None:
    """IncrementalAlterConfigs from confluent-kafka's AdminClient for a broker's own config; for the cluster-wide
    default (""), which librdkafka cannot name, with kafka-python's protocol classes, to any live broker as the
    Java AdminClient sends it. A refusal raises KafkaException either way."""
    if broker == DEFAULT:
        resource = IncrementalAlterConfigsRequest.AlterConfigsResource
        configs = [resource.AlterableConfig(name=n, config_operation=0, value=v) for n, v in (set_ or {}).items()]
        configs += [resource.AlterableConfig(name=n, config_operation=1, value=None) for n in delete or []]
        request = IncrementalAlterConfigsRequest(resources=[resource(resource_type=BROKER, resource_name=DEFAULT,
                                                                     configs=configs)],
                                                 validate_only=validate_only)
        answer = raw_request(cluster, request, 1).responses[0]
        if answer.error_code:
            raise KafkaException(KafkaError(answer.error_code, answer.error_message))
        return
    ops = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in (set_ or {}).items()]
    ops += [ConfigEntry(n, None, incremental_operation=AlterConfigOpType.DELETE) for n in delete or []]
    resource = ConfigResource(ConfigResource.Type.BROKER, broker, incremental_configs=ops)
    admin = admin_client(cluster)  # held until the answer is in: a collected client cancels its requests
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(30)


def raw_request(cluster: RunningCluster, request, version: int, broker_id: int | None = None):
    """To ``broker_id``, or to any live broker."""
    if broker_id is None:
        broker_id = next(b.broker_id for b in cluster.spec.brokers if cluster.pid(b.broker_id) is not None)
    with RawConnection(client_port(cluster, broker_id)) as connection:
        return connection.request(request, version)


def describe_raw(cluster: RunningCluster, resource_type: int = BROKER, name: str = DEFAULT,
                 broker_id: int | None = None) -> list[tuple[str, str | None, int, bool, list]]:
    """DescribeConfigs v1 with synonyms, by default for the cluster-wide default, asked of ``broker_id`` (any live
    broker if None): (name, value, source, read-only, synonyms)."""
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=None)], include_synonyms=True)
    result = raw_request(cluster, request, 1, broker_id).results[0]
    assert result.error_code == 0, result.error_message
    return [(c.name, c.value, c.config_source, c.read_only, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs]


def describe(cluster: RunningCluster, resource: ConfigResource) -> dict:
    admin = admin_client(cluster)
    return admin.describe_configs([resource])[resource].result(30)


def describe_with_kafka_python(cluster: RunningCluster, resource_type: ConfigResourceType, name: str) -> dict:
    """kafka-python keeps every synonym, in order (confluent-kafka's are a dict by name)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster))
    try:
        described = admin.describe_configs([KafkaConfigResource(resource_type, name)], include_synonyms=True,
                                           config_filter="all")
    finally:
        admin.close()
    return described[resource_type.name.lower()][name]


DYNAMIC_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


def source(entry: ConfigEntry) -> ConfigSource:
    return ConfigSource(getattr(entry.source, "value", entry.source))


def refused(call) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        call()
    return info.value.args[0]


def produce_error(cluster: RunningCluster, topic: str, acks: str = "all") -> KafkaError | None:
    """One record, no retries (NOT_ENOUGH_REPLICAS is retriable: librdkafka would retry until its timeout)."""
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": acks, "retries": 0,
                         "enable.idempotence": False, "message.timeout.ms": 10000})
    outcome: list = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    return outcome[0]


def refused_before_append(error: KafkaError | None) -> bool:
    return error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS


def config_changes(cluster: RunningCluster) -> list[str]:
    return sorted(zk_call(cluster.zk_connect, lambda zk: zk.get_children("/config/changes")))


def broker_znode(cluster: RunningCluster, entity: str) -> dict | None:
    data, _ = zk_call(cluster.zk_connect, lambda zk: zk.get_or_none(f"/config/brokers/{entity}"))
    return None if data is None else json.loads(data)


def applied_everywhere(cluster: RunningCluster, entity: str, config: dict[str, str], after_ms: int) -> bool:
    return {e.broker_id for e in cluster.all_traces() if isinstance(e, te.BrokerConfigChanged)
            and e.entity == entity and e.dynamic_config == config and e.ts_ms >= after_ms} \
        >= {b.broker_id for b in cluster.spec.brokers if cluster.pid(b.broker_id) is not None}


def now_ms() -> int:
    return int(time.time() * 1000)


def test_cluster_wide_min_insync_replicas_refuses_acks_all_live_a_brokers_own_value_wins_and_delete_restores(
        cluster):
    topic = "bcfg-min-isr"
    create_topic(cluster, topic, 1, 3)
    leader, controller = leader_of(cluster, topic), cluster.controller()
    followers = [b.broker_id for b in cluster.spec.brokers if b.broker_id != leader]
    victim = next((b for b in followers if b != controller), followers[0])
    cluster.kill9(victim)  # by its PID
    wait_until(lambda: victim not in cluster.state([topic]).partitions[0].isr, 30, f"broker {victim} out of the ISR")
    assert produce_error(cluster, topic) is None

    before, changes_before = now_ms(), set(config_changes(cluster))
    alter_broker(cluster, DEFAULT, set_={MIN_ISR: "3"})
    assert broker_znode(cluster, "<default>") == {"version": 1, "config": {MIN_ISR: "3"}}
    new = [c for c in config_changes(cluster) if c not in changes_before]
    assert len(new) == 1 and len(new[0]) == len("config_change_") + 10
    assert json.loads(cluster.raw(f"/config/changes/{new[0]}")[0]) == {"version": 2,
                                                                       "entity_path": "brokers/<default>"}
    wait_until(lambda: applied_everywhere(cluster, "<default>", {MIN_ISR: "3"}, before), 30,
               "every live broker to apply the default")
    # a produce appended just before the change may still be answered NOT_ENOUGH_REPLICAS_AFTER_APPEND
    wait_until(lambda: refused_before_append(produce_error(cluster, topic)), 20,
               "acks=all refused with the cluster-wide min.insync.replicas=3")
    assert produce_error(cluster, topic, acks="1") is None
    entry = describe(cluster, ConfigResource(ConfigResource.Type.TOPIC, topic))[MIN_ISR]
    assert (entry.value, source(entry)) == ("3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)

    # the leader's own dynamic value wins over the default (the leader decides on acks=all)
    alter_broker(cluster, str(leader), set_={MIN_ISR: "2"})
    assert broker_znode(cluster, str(leader)) == {"version": 1, "config": {MIN_ISR: "2"}}
    wait_until(lambda: produce_error(cluster, topic) is None, 20, f"acks=all accepted with broker {leader}'s own 2")
    entry = describe(cluster, ConfigResource(ConfigResource.Type.BROKER, str(leader)))[MIN_ISR]
    assert (entry.value, source(entry), entry.is_read_only) == ("2", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    # a topic's configs as the answering broker sees them: the leader's, asked of the leader
    entries = {e[0]: e for e in describe_raw(cluster, TOPIC, topic, broker_id=leader)}
    _, value, config_source, read_only, synonyms = entries[MIN_ISR]
    assert (value, config_source, read_only) == ("2", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert synonyms[:2] == [(MIN_ISR, "2", ConfigSource.DYNAMIC_BROKER_CONFIG.value), (MIN_ISR, "3", DYNAMIC_DEFAULT)]
    assert synonyms[-1][2] == ConfigSource.DEFAULT_CONFIG.value

    # deleting the broker's own value restores the default, deleting the default restores server.properties
    alter_broker(cluster, str(leader), delete=[MIN_ISR])
    wait_until(lambda: refused_before_append(produce_error(cluster, topic)), 20, "acks=all refused again")
    alter_broker(cluster, DEFAULT, delete=[MIN_ISR])
    wait_until(lambda: produce_error(cluster, topic) is None, 20, "acks=all accepted once the default is gone")
    assert broker_znode(cluster, "<default>") == {"version": 1, "config": {}}
    entry = describe(cluster, ConfigResource(ConfigResource.Type.TOPIC, topic))[MIN_ISR]
    assert source(entry) in (ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG)
    cluster.start(victim)
    wait_until(lambda: victim in cluster.state([topic]).partitions[0].isr, 30, f"broker {victim} back in the ISR")


def test_a_topic_override_wins_over_the_cluster_wide_default(cluster):
    topic = "bcfg-topic-wins"
    create_topic(cluster, topic, 1, 3, {MIN_ISR: "1"})
    alter_broker(cluster, DEFAULT, set_={MIN_ISR: "4"})
    try:
        entry = describe(cluster, ConfigResource(ConfigResource.Type.TOPIC, topic))[MIN_ISR]
        assert (entry.value, source(entry)) == ("1", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert produce_error(cluster, topic) is None
    finally:
        alter_broker(cluster, DEFAULT, delete=[MIN_ISR])


def _applied(described: dict, values: dict[str, str]) -> dict | None:
    """The description if it shows every one of ``values`` (a broker applies a change when its notification
    arrives, a moment after the AlterConfigs answer), else None."""
    return described if all(described[name]["value"] == value for name, value in values.items()) else None


def test_describe_reports_sources_synonyms_and_read_only_flags(cluster):
    broker = cluster.spec.brokers[0].broker_id
    alter_broker(cluster, DEFAULT, set_={"log.retention.ms": "3600000"})
    alter_broker(cluster, str(broker), set_={"log.retention.bytes": "1000000"})
    try:
        # the default resource lists only what it sets, with only its own synonyms (ConfigHelper); a broker describes
        # what it has applied, once the change notification reached it
        expected_default = [("log.retention.ms", "3600000", DYNAMIC_DEFAULT, False, [
            ("log.retention.ms", "3600000", DYNAMIC_DEFAULT)])]
        wait_until(lambda: describe_raw(cluster) == expected_default, 20, "the default's config to be applied")
        everything = wait_until(lambda: _applied(describe_with_kafka_python(
            cluster, ConfigResourceType.BROKER, str(broker)), {"log.retention.bytes": "1000000",
                                                               "log.retention.ms": "3600000"}),
            20, f"broker {broker} to apply its config and the default")
        assert (everything["log.retention.bytes"]["value"], everything["log.retention.bytes"]["config_source"]) \
            == ("1000000", "DYNAMIC_BROKER_CONFIG")
        assert [(s["name"], s["value"], s["source"]) for s in everything["log.retention.ms"]["synonyms"]][:1] == [
            ("log.retention.ms", "3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG")]
        assert {s["name"] for s in everything["log.retention.ms"]["synonyms"]} >= {
            "log.retention.ms", "log.retention.minutes", "log.retention.hours"}
        assert everything["broker.id"]["read_only"] is True
        assert everything["broker.id"]["config_source"] == "STATIC_BROKER_CONFIG"
        assert everything["zookeeper.connect"]["read_only"] is True
        assert everything["unclean.leader.election.enable"]["read_only"] is False
        assert everything["log.retention.hours"]["read_only"] is True  # not dynamic in Kafka either
    finally:
        alter_broker(cluster, DEFAULT, delete=["log.retention.ms"])
        alter_broker(cluster, str(broker), delete=["log.retention.bytes"])


def test_the_versions_admin_tools_read_are_reported_read_only(cluster):
    # kafka-ui and AKHQ read the cluster's version from these
    broker = str(cluster.spec.brokers[0].broker_id)
    described = describe_with_kafka_python(cluster, ConfigResourceType.BROKER, broker)
    for name in ("inter.broker.protocol.version", "log.message.format.version"):
        assert (described[name]["value"], described[name]["read_only"]) == ("2.8-IV1", True)
        assert described[name]["config_source"] == "DEFAULT_CONFIG"
    create_topic(cluster, "cfg-format", 1, 1)
    topic = describe_with_kafka_python(cluster, ConfigResourceType.TOPIC, "cfg-format")["message.format.version"]
    assert (topic["value"], topic["read_only"]) == ("2.8-IV1", True)
    assert [s["name"] for s in topic["synonyms"]] == ["log.message.format.version"]


def test_read_only_and_invalid_changes_are_refused_and_write_nothing(cluster):
    broker = str(cluster.spec.brokers[0].broker_id)
    alter_broker(cluster, DEFAULT, set_={"log.retention.bytes": "2000000"})
    try:
        default_before, changes_before = cluster.raw("/config/brokers/<default>"), config_changes(cluster)
        for name in (DEFAULT, broker):
            error = refused(lambda n=name: alter_broker(cluster, n, set_={"broker.id": "9", MIN_ISR: "2"}))
            assert error.code() == KafkaError.INVALID_REQUEST
            assert "Cannot update these configs dynamically: Set(broker.id)" in error.str()
            error = refused(lambda n=name: alter_broker(cluster, n, set_={"zookeeper.connect": "elsewhere:2181"}))
            assert error.code() == KafkaError.INVALID_REQUEST
            error = refused(lambda n=name: alter_broker(cluster, n, set_={MIN_ISR: "0"}))
            assert error.code() == KafkaError.INVALID_REQUEST
            assert f"Invalid value 0 for configuration {MIN_ISR}: Value must be at least 1" in error.str()
            error = refused(lambda n=name: alter_broker(cluster, n, set_={"no.such.config": "1"}))
            assert error.code() == KafkaError.INVALID_CONFIG and "Unknown broker config name" in error.str()
            alter_broker(cluster, name, set_={MIN_ISR: "3"}, validate_only=True)
        error = refused(lambda: alter_broker(cluster, DEFAULT, set_={"kafkasim.replica.truncation.rule": "kip-999"}))
        assert error.code() == KafkaError.INVALID_REQUEST and "String must be one of" in error.str()
        # a broker's own config goes to that broker (confluent-kafka and kafka-python route it so); another refuses
        other = cluster.spec.brokers[1].broker_id
        resource = IncrementalAlterConfigsRequest.AlterConfigsResource
        request = IncrementalAlterConfigsRequest(resources=[resource(
            resource_type=BROKER, resource_name=broker, configs=[
                resource.AlterableConfig(name=MIN_ISR, config_operation=0, value="2")])], validate_only=False)
        answer = raw_request(cluster, request, 1, broker_id=other).responses[0]
        assert (answer.error_code, answer.error_message) == (
            KafkaError.INVALID_REQUEST, f"Unexpected broker id, expected {other}, but received {broker}")
        after = cluster.raw("/config/brokers/<default>")
        assert (after[0], after[1].version) == (default_before[0], default_before[1].version)
        assert broker_znode(cluster, broker) in (None, {"version": 1, "config": {}})
        assert config_changes(cluster) == changes_before
    finally:
        alter_broker(cluster, DEFAULT, delete=["log.retention.bytes"])


def test_alter_configs_replaces_the_defaults_whole_dynamic_config(cluster):
    alter_broker(cluster, DEFAULT, set_={"log.retention.bytes": "3000000", "log.segment.bytes": "2000000"})
    resource = AlterConfigsRequest.AlterConfigsResource
    request = AlterConfigsRequest(resources=[resource(resource_type=BROKER, resource_name=DEFAULT, configs=[
        resource.AlterableConfig(name="log.retention.bytes", value="4000000")])], validate_only=False)
    answer = raw_request(cluster, request, 1).responses[0]
    assert (answer.error_code, answer.resource_name) == (0, DEFAULT)
    assert broker_znode(cluster, "<default>") == {"version": 1, "config": {"log.retention.bytes": "4000000"}}
    alter_broker(cluster, DEFAULT, delete=["log.retention.bytes"])


def test_a_broker_restarted_later_applies_the_stored_dynamic_config_at_start(cluster):
    topic = "bcfg-restart"
    controller = cluster.controller()
    preferred, *others = [b.broker_id for b in cluster.spec.brokers if b.broker_id != controller] + [controller]
    zk_call(cluster.zk_connect, lambda zk: zk_create_topic(zk, topic, 1, 3, assignment={0: [preferred, *others]}))
    wait_until(lambda: leader_of(cluster, topic) == preferred, 30, f"broker {preferred} to lead {topic}")
    cluster.kill9(preferred)
    wait_until(lambda: cluster.state([topic]).partitions[0].leader not in (-1, preferred), 30, "a new leader")
    # more in-sync replicas than replicas: acks=all can never be satisfied, whoever leads
    alter_broker(cluster, DEFAULT, set_={MIN_ISR: "4"})
    try:
        # as the 15-minute purge would: the restarted broker cannot learn the value from a notification
        for child in config_changes(cluster):
            zk_call(cluster.zk_connect, lambda zk, c=child: zk.delete(f"/config/changes/{c}"))
        cluster.start(preferred)
        wait_until(lambda: preferred in cluster.state([topic]).partitions[0].isr, 30, f"broker {preferred} in ISR")
        admin = admin_client(cluster)
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
        wait_until(lambda: leader_of(cluster, topic) == preferred, 30, f"broker {preferred} to lead {topic} again")
        assert refused_before_append(produce_error(cluster, topic))
        assert any(isinstance(e, te.BrokerConfigChanged) and e.entity == "<default>"
                   and e.dynamic_config == {MIN_ISR: "4"} for e in cluster.traces(preferred))
    finally:
        alter_broker(cluster, DEFAULT, delete=[MIN_ISR])
    wait_until(lambda: produce_error(cluster, topic) is None, 20, "acks=all accepted once the default is gone")


def test_cluster_wide_unclean_election_turned_on_brings_an_offline_partition_back_at_once(cluster):
    topic = "bcfg-unclean"
    controller = cluster.controller()
    first, second = [b.broker_id for b in cluster.spec.brokers if b.broker_id != controller][:2]
    zk_call(cluster.zk_connect, lambda zk: zk_create_topic(zk, topic, 1, 2, assignment={0: [first, second]}))
    wait_until(lambda: leader_of(cluster, topic) == first, 30, f"broker {first} to lead {topic}")
    cluster.kill9(second)
    wait_until(lambda: cluster.state([topic]).partitions[0].isr == [first], 30, f"broker {second} out of the ISR")
    cluster.kill9(first)
    wait_until(lambda: cluster.state([topic]).partitions[0].leader == -1, 30, f"{topic} offline")
    cluster.start(second)
    wait_until(lambda: second in {b.broker_id for b in cluster.state().brokers}, 30, f"broker {second} registered")
    assert cluster.state([topic]).partitions[0].leader == -1  # out of the ISR: no clean election can pick it

    alter_broker(cluster, DEFAULT, set_={"unclean.leader.election.enable": "true"})
    try:
        wait_until(lambda: cluster.state([topic]).partitions[0].leader == second, 30,
                   f"broker {second} elected (unclean) for {topic}")
    finally:
        alter_broker(cluster, DEFAULT, delete=["unclean.leader.election.enable"])
    cluster.start(first)
    wait_until(lambda: first in {b.broker_id for b in cluster.state().brokers}, 30, f"broker {first} registered")


def test_kafka_python_changes_a_brokers_own_config(cluster):
    broker = str(cluster.spec.brokers[1].broker_id)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster))
    try:
        resource = KafkaConfigResource(ConfigResourceType.BROKER, broker, configs={"message.max.bytes": "2000000"})
        assert admin.alter_configs([resource], incremental=True) == {"broker": {broker: "OK"}}
        assert broker_znode(cluster, broker) == {"version": 1, "config": {"message.max.bytes": "2000000"}}
        entry = wait_until(lambda: _applied(describe_with_kafka_python(cluster, ConfigResourceType.BROKER, broker),
                                            {"message.max.bytes": "2000000"}), 20,
                           f"broker {broker} to apply message.max.bytes")["message.max.bytes"]
        assert (entry["value"], entry["config_source"], entry["read_only"]) == (
            "2000000", "DYNAMIC_BROKER_CONFIG", False)
        reset = KafkaConfigResource(ConfigResourceType.BROKER, broker, configs={"message.max.bytes": ("DELETE", None)})
        assert admin.alter_configs([reset], incremental=True) == {"broker": {broker: "OK"}}
    finally:
        admin.close()
    assert broker_znode(cluster, broker) == {"version": 1, "config": {}}


def test_the_cli_sets_describes_and_deletes_broker_configs(cluster):
    broker = str(cluster.spec.brokers[0].broker_id)
    kafkasim = [str(Path(sys.executable).with_name("kafkasim")), "--data-dir", str(cluster.data_dir), "config"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*kafkasim, *args], capture_output=True, text=True, timeout=60)

    done = run("--broker-defaults", "--set", "log.retention.ms=7200000")
    assert done.returncode == 0, done.stderr
    assert "Completed updating config for the default broker" in done.stdout
    done = run("--broker", broker, "--set", f"{MIN_ISR}=2")
    assert done.returncode == 0, done.stderr
    shown = run("--broker-defaults", "--describe")
    assert shown.returncode == 0, shown.stderr
    assert "Dynamic configs for the default broker (every broker): log.retention.ms=7200000" in shown.stdout
    shown = run("--broker", broker, "--describe")
    assert shown.returncode == 0, shown.stderr
    assert f"Dynamic configs for broker {broker}: log.retention.ms=7200000, {MIN_ISR}=2" in shown.stdout
    lines = [line.split() for line in shown.stdout.splitlines()]
    assert ["log.retention.ms", "7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG"] in lines
    assert ["broker.id", broker, "STATIC_BROKER_CONFIG", "(read-only)"] in lines
    refused_run = run("--broker", broker, "--set", "listeners=PLAINTEXT://:1")
    assert refused_run.returncode != 0 and "Cannot update these configs dynamically" in refused_run.stderr
    assert run("--broker-defaults", "--delete", "log.retention.ms").returncode == 0
    assert run("--broker", broker, "--delete", MIN_ISR).returncode == 0
    assert f"Dynamic configs for broker {broker}: none" in run("--broker", broker, "--describe").stdout
