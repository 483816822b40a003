"""Dynamic topic configs on a real cluster (issue 19, "configuration that changes live"): IncrementalAlterConfigs
and AlterConfigs from confluent-kafka's AdminClient write /config/topics/<t> and a /config/changes notification
in Kafka's format, every broker applies the change without a restart (min.insync.replicas at the next acks=all
produce), DescribeConfigs shows where a value comes from, refused changes write nothing, a restarted broker reads
the dynamic value at start, unclean election turned on elects an offline partition, kafka-python's admin client
does the same with both APIs, and `kafkasim config` does it from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KafkaConfigResource
from kafka.admin import ConfigResourceType

from tests.client.support import bootstrap, create_topic, leader_of
from tests.harness import RunningCluster, module_cluster, wait_until, zk_call
from traces import events as te
from zk.admin import create_topic as zk_create_topic

pytestmark = [pytest.mark.processes, pytest.mark.slow]

MIN_ISR = "min.insync.replicas"


cluster = module_cluster("configs-cluster")


def admin_client(cluster: RunningCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap(cluster)})


def incremental(cluster: RunningCluster, topic: str, *, set_: dict[str, str] | None = None,
                delete: list[str] | None = None, validate_only: bool = False) -> None:
    ops = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in (set_ or {}).items()]
    ops += [ConfigEntry(n, None, incremental_operation=AlterConfigOpType.DELETE) for n in delete or []]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=ops)
    admin = admin_client(cluster)  # held until the answer is in: a collected client cancels its requests
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(30)


def refused(call) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        call()
    return info.value.args[0]


def describe(cluster: RunningCluster, topic: str) -> dict:
    """librdkafka always asks for synonyms."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = admin_client(cluster)
    return admin.describe_configs([resource])[resource].result(30)


def source(entry: ConfigEntry) -> ConfigSource:
    return ConfigSource(getattr(entry.source, "value", entry.source))


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


def followers_not_controller(cluster: RunningCluster, topic: str) -> list[int]:
    leader, controller = leader_of(cluster, topic), cluster.controller()
    return [b.broker_id for b in cluster.spec.brokers if b.broker_id not in (leader, controller)]


def config_changes(cluster: RunningCluster) -> list[str]:
    return sorted(zk_call(cluster.zk_connect, lambda zk: zk.get_children("/config/changes")))


def test_min_insync_replicas_changes_live_and_its_override_can_be_deleted(cluster):
    topic = "cfg-live"
    create_topic(cluster, topic, 1, 3, {MIN_ISR: "2"})
    assert source(describe(cluster, topic)[MIN_ISR]) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    victim = (followers_not_controller(cluster, topic) or [b.broker_id for b in cluster.spec.brokers
                                                            if b.broker_id != leader_of(cluster, topic)])[0]
    cluster.kill9(victim)
    wait_until(lambda: victim not in cluster.state([topic]).partitions[0].isr, 30, f"broker {victim} out of the ISR")
    assert produce_error(cluster, topic) is None

    incremental(cluster, topic, set_={MIN_ISR: "3"})
    # a produce appended just before the change was applied may wait in purgatory and be answered
    # NOT_ENOUGH_REPLICAS_AFTER_APPEND, as in Kafka; the next ones are refused before the append
    wait_until(lambda: refused_before_append(produce_error(cluster, topic)), 20,
               "acks=all refused after min.insync.replicas=3")
    assert produce_error(cluster, topic, acks="1") is None
    entry = describe(cluster, topic)[MIN_ISR]
    assert (entry.value, source(entry)) == ("3", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    incremental(cluster, topic, delete=[MIN_ISR])
    wait_until(lambda: produce_error(cluster, topic) is None, 20, "acks=all accepted after the override is deleted")
    entry = describe(cluster, topic)[MIN_ISR]
    assert source(entry) in (ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG)
    assert entry.value != "3"
    cluster.start(victim)
    wait_until(lambda: victim in cluster.state([topic]).partitions[0].isr, 30, f"broker {victim} back in the ISR")


def test_zookeeper_holds_kafkas_config_znode_and_a_version_2_notification(cluster):
    topic = "cfg-znodes"
    create_topic(cluster, topic, 1, 3)
    before = set(config_changes(cluster))
    incremental(cluster, topic, set_={"retention.ms": "3600000", MIN_ISR: "2"})
    assert json.loads(cluster.raw(f"/config/topics/{topic}")[0]) == {
        "version": 1, "config": {"retention.ms": "3600000", MIN_ISR: "2"}}
    new = [c for c in config_changes(cluster) if c not in before]
    assert len(new) == 1 and new[0].startswith("config_change_") and len(new[0]) == len("config_change_") + 10
    assert json.loads(cluster.raw(f"/config/changes/{new[0]}")[0]) == {"version": 2, "entity_path": f"topics/{topic}"}
    # every broker applied it (to its replica's log, unless the log is created after: then with it)
    wait_until(lambda: {e.broker_id for e in cluster.all_traces() if isinstance(e, te.TopicConfigChanged)
                        and e.topic == topic and e.topic_overrides == {"retention.ms": "3600000", MIN_ISR: "2"}}
               == {b.broker_id for b in cluster.spec.brokers}, 30, "every broker to apply the change")
    # synonyms: the override, then the broker property that sets the default
    entry = describe(cluster, topic)["retention.ms"]
    # (with every alias of the broker property: log.retention.minutes and .hours too, as Kafka lists them)
    assert list(entry.synonyms)[:2] == ["retention.ms", "log.retention.ms"]
    assert source(entry.synonyms["retention.ms"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert source(entry.synonyms["log.retention.ms"]) in (ConfigSource.STATIC_BROKER_CONFIG,
                                                          ConfigSource.DEFAULT_CONFIG)

    # AlterConfigs replaces the whole set
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"segment.bytes": "1048576"})
    admin = admin_client(cluster)
    with pytest.warns(DeprecationWarning):  # confluent-kafka prefers incremental_alter_configs; brokers take both
        admin.alter_configs([resource])[resource].result(30)
    assert json.loads(cluster.raw(f"/config/topics/{topic}")[0])["config"] == {"segment.bytes": "1048576"}


def test_refused_changes_write_nothing(cluster):
    topic = "cfg-refused"
    create_topic(cluster, topic, 1, 3, {MIN_ISR: "2"})
    config_before, changes_before = cluster.raw(f"/config/topics/{topic}"), config_changes(cluster)

    error = refused(lambda: incremental(cluster, topic, set_={"no.such.config": "1"}))
    assert error.code() == KafkaError.INVALID_CONFIG and "Unknown topic config name: no.such.config" in error.str()
    for value, reason in (("0", "Value must be at least 1"), ("two", "Not a number of type INT")):
        error = refused(lambda v=value: incremental(cluster, topic, set_={MIN_ISR: v}))
        # Kafka 2.8 answers a ConfigException (a value its ConfigDef refuses) with INVALID_REQUEST
        assert error.code() == KafkaError.INVALID_REQUEST
        assert f"Invalid value {value} for configuration {MIN_ISR}: {reason}" in error.str()
    error = refused(lambda: incremental(cluster, "cfg-no-such-topic", set_={MIN_ISR: "2"}))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    incremental(cluster, topic, set_={MIN_ISR: "3"}, validate_only=True)
    # a read-only broker config is refused as Kafka refuses one (tests/client/test_broker_configs.py for the rest)
    broker = ConfigResource(ConfigResource.Type.BROKER, str(cluster.spec.brokers[0].broker_id), incremental_configs=[
        ConfigEntry("broker.id", "7", incremental_operation=AlterConfigOpType.SET)])
    admin = admin_client(cluster)
    error = refused(lambda: admin.incremental_alter_configs([broker])[broker].result(30))
    assert error.code() == KafkaError.INVALID_REQUEST and "Cannot update these configs dynamically" in error.str()

    after = cluster.raw(f"/config/topics/{topic}")
    assert (after[0], after[1].version) == (config_before[0], config_before[1].version)
    assert config_changes(cluster) == changes_before


def test_a_restarted_broker_reads_the_dynamic_value_at_start(cluster):
    topic = "cfg-restart"
    controller = cluster.controller()
    preferred, *others = [b.broker_id for b in cluster.spec.brokers if b.broker_id != controller] + [controller]
    zk_call(cluster.zk_connect, lambda zk: zk_create_topic(zk, topic, 1, 3, assignment={0: [preferred, *others]}))
    wait_until(lambda: leader_of(cluster, topic) == preferred, 30, f"broker {preferred} to lead {topic}")
    cluster.kill9(preferred)
    wait_until(lambda: cluster.state([topic]).partitions[0].leader not in (-1, preferred), 30, "a new leader")
    # more in-sync replicas than replicas: acks=all can never be satisfied, whoever leads
    incremental(cluster, topic, set_={MIN_ISR: "4"})
    # as the 15-minute purge would: the broker cannot learn the value from a notification
    for child in config_changes(cluster):
        zk_call(cluster.zk_connect, lambda zk, c=child: zk.delete(f"/config/changes/{c}"))
    cluster.start(preferred)
    wait_until(lambda: preferred in cluster.state([topic]).partitions[0].isr, 30, f"broker {preferred} in the ISR")
    admin = admin_client(cluster)
    admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    wait_until(lambda: leader_of(cluster, topic) == preferred, 30, f"broker {preferred} to lead {topic} again")
    assert refused_before_append(produce_error(cluster, topic))


def test_the_cli_sets_describes_and_deletes(cluster):
    topic = "cfg-cli"
    create_topic(cluster, topic, 1, 3)
    kafkasim = [str(Path(sys.executable).with_name("kafkasim")), "--data-dir", str(cluster.data_dir), "config",
                "--topic", topic]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*kafkasim, *args], capture_output=True, text=True, timeout=60)

    done = run("--set", "retention.ms=7200000", "--set", f"{MIN_ISR}=2")
    assert done.returncode == 0, done.stderr
    assert f"Completed updating config for topic {topic}" in done.stdout
    shown = run("--describe")
    assert shown.returncode == 0, shown.stderr
    assert f"Dynamic configs for topic {topic}: {MIN_ISR}=2, retention.ms=7200000" in shown.stdout
    assert any(line.split()[:3] == ["retention.ms", "7200000", "DYNAMIC_TOPIC_CONFIG"] for line in
               shown.stdout.splitlines())
    assert run("--delete", "retention.ms").returncode == 0
    assert f"Dynamic configs for topic {topic}: {MIN_ISR}=2\n" in run("--describe").stdout
    bad = run("--set", f"{MIN_ISR}=0")
    assert bad.returncode != 0 and "INVALID_REQUEST" in bad.stderr
    broker = subprocess.run([*kafkasim[:-2], "--broker", "1", "--describe"], capture_output=True, text=True,
                            timeout=60)
    assert broker.returncode == 0, broker.stderr
    assert any(line.split()[:2] == ["broker.id", "1"] for line in broker.stdout.splitlines())

    # the same as words: config set|describe|delete, the entity after the word
    words = kafkasim[:-2]
    done = subprocess.run([*words, "set", "--topic", topic, "retention.ms=5400000", "segment.bytes=2097152"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    shown = subprocess.run([*words, "describe", "--topic", topic], capture_output=True, text=True, timeout=60)
    assert f"Dynamic configs for topic {topic}: {MIN_ISR}=2, retention.ms=5400000, segment.bytes=2097152" \
        in shown.stdout
    done = subprocess.run([*words, "delete", "--topic", topic, "retention.ms", "segment.bytes"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(cluster.raw(f"/config/topics/{topic}")[0])["config"] == {MIN_ISR: "2"}
    both = subprocess.run([*words, "describe", "--topic", topic, "--broker", "1"], capture_output=True, text=True,
                          timeout=60)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_turning_unclean_election_on_brings_an_offline_partition_back_at_once(cluster):
    topic = "cfg-unclean"
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

    incremental(cluster, topic, set_={"unclean.leader.election.enable": "true"})
    wait_until(lambda: cluster.state([topic]).partitions[0].leader == second, 30,
               f"broker {second} elected (unclean) for {topic}")
    cluster.start(first)
    wait_until(lambda: first in {b.broker_id for b in cluster.state().brokers}, 30, f"broker {first} registered")


@pytest.mark.parametrize("incremental", [True, False], ids=["IncrementalAlterConfigs", "AlterConfigs"])
def test_kafka_python_changes_and_describes_a_topic_config(cluster, incremental):
    topic = f"cfg-kafka-python-{'inc' if incremental else 'full'}"
    create_topic(cluster, topic, 1, 3)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster))
    try:
        resource = KafkaConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "5400000"})
        assert admin.alter_configs([resource], incremental=incremental) == {"topic": {topic: "OK"}}
        described = admin.describe_configs([KafkaConfigResource(ConfigResourceType.TOPIC, topic)],
                                           include_synonyms=True)["topic"][topic]
    finally:
        admin.close()
    assert json.loads(cluster.raw(f"/config/topics/{topic}")[0])["config"] == {"retention.ms": "5400000"}
    entry = described["retention.ms"]
    assert (entry["value"], entry["config_source"], entry["read_only"]) == ("5400000", "DYNAMIC_TOPIC_CONFIG", False)
    assert [(s["name"], s["source"]) for s in entry["synonyms"]][:1] == [("retention.ms", "DYNAMIC_TOPIC_CONFIG")]
    assert [s["name"] for s in entry["synonyms"]][1:] == ["log.retention.ms", "log.retention.minutes",
                                                          "log.retention.hours"]


def test_a_smaller_segment_bytes_rolls_every_replica_at_its_next_appends(cluster):
    topic = "cfg-segments"
    create_topic(cluster, topic, 1, 3)
    directories = sorted(cluster.data_dir.glob(f"broker-*/logs/{topic}-0"))
    assert len(directories) == 3 and all(len(list(d.glob("*.log"))) == 1 for d in directories)
    incremental(cluster, topic, set_={"segment.bytes": "1024"})
    # a broker whose log is created after the notification reads the new config from ZooKeeper with it
    wait_until(lambda: {e.broker_id for e in cluster.all_traces() if isinstance(e, te.TopicConfigChanged)
                        and e.topic == topic} == {b.broker_id for b in cluster.spec.brokers},
               30, "every broker to apply segment.bytes=1024")
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "linger.ms": 0})
    for _ in range(10):
        producer.produce(topic, b"x" * 300, partition=0)
        producer.flush(15)  # one batch per record: each roll happens at an append that would overflow
    wait_until(lambda: all(len(list(d.glob("*.log"))) >= 5 for d in directories), 30,
               "every replica to have rolled new segments")
