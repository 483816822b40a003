"""Compacted topics on a real cluster (issue 21): a client creates a topic with cleanup.policy=compact as Schema
Registry does for ``_schemas``; values produced over a few keys are compacted by every replica's cleaner, whose
segment files then hold only the last value of each key outside the active segment; a consumer reading from
offset 0 sees the latest value of every key."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.client.support import bootstrap
from tests.harness import RunningCluster, start_cluster, wait_until
from tests.log.cleaner_support import read_segments
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow]

KEYS = 40
ROUNDS = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zk_server: str):
    running = start_cluster(tmp_path_factory.mktemp("compaction-cluster"), zk_server)
    try:
        yield running
    finally:
        running.stop_all()


def admin(cluster: RunningCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap(cluster)})


def create(cluster: RunningCluster, name: str, partitions: int, replication: int, config: dict[str, str]) -> None:
    client = admin(cluster)
    client.create_topics([NewTopic(name, partitions, replication, config=config)])[name].result(30)


def test_a_client_creates_a_compacted_topic_as_schema_registry_does(cluster):
    create(cluster, "_schemas", 1, 3, {"cleanup.policy": "compact"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "_schemas")
    client = admin(cluster)
    described = client.describe_configs([resource])[resource].result(30)
    assert described["cleanup.policy"].value == "compact"
    assert described["min.cleanable.dirty.ratio"].value == "0.5"
    assert described["delete.retention.ms"].value == "86400000"


def test_an_unknown_cleanup_policy_is_refused(cluster):
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as info:
        create(cluster, "badly-compacted", 1, 1, {"cleanup.policy": "shred"})
    assert info.value.args[0].name() == "INVALID_CONFIG"


def test_every_replica_compacts_its_log_and_a_consumer_from_offset_0_sees_the_latest_values(cluster):
    topic = "compacted-values"
    create(cluster, topic, 1, 3, {"cleanup.policy": "compact", "segment.bytes": "16384",
                                  "min.cleanable.dirty.ratio": "0.01"})
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "linger.ms": 5, "batch.size": 4000,
                         "compression.type": "gzip"})
    latest: dict[bytes, bytes] = {}
    errors: list = []

    def delivered(error, _message) -> None:
        if error is not None:
            errors.append(error)

    for round_ in range(ROUNDS):
        for k in range(KEYS):
            key, value = f"key-{k}".encode(), f"value-{k}-{round_}-".encode() * 4
            producer.produce(topic, value, key, partition=0, on_delivery=delivered)
            latest[key] = value
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]
    produced = KEYS * ROUNDS

    # each replica cleans its own log, up to its active segment (no more appends come)
    def all_cleaned() -> bool:
        for broker in cluster.spec.brokers:
            directory = cluster.layout.broker_dir(broker.broker_id) / "logs" / f"{topic}-0"
            active = max(int(p.name[:20]) for p in directory.glob("*.log"))
            cleaned = [e for e in cluster.traces(broker.broker_id)
                       if isinstance(e, te.LogCleaned) and e.topic == topic]
            if not cleaned or cleaned[-1].end_offset != active:
                return False
        return True

    wait_until(all_cleaned, 60, "every replica's cleaner to reach its active segment", interval_s=0.5)
    for broker in cluster.spec.brokers:
        directory = cluster.layout.broker_dir(broker.broker_id) / "logs" / f"{topic}-0"
        active = max(int(p.name[:20]) for p in directory.glob("*.log"))
        records = read_segments(directory)
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)) and offsets[-1] == produced - 1
        outside = [r for r in records if r.offset < active]
        in_active = {r.key for r in records if r.offset >= active}
        keys_outside = [r.key for r in outside]
        assert len(keys_outside) == len(set(keys_outside)), "one record per key outside the active segment"
        for r in outside:
            if r.key not in in_active:
                assert r.value == latest[r.key]
        assert outside and len(outside) <= KEYS and len(records) < produced

    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "compaction-reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: dict[bytes, bytes] = {}
    last_offset = -1
    try:
        while last_offset < produced - 1:
            message = wait_until(lambda: consumer.poll(0.5), 30, "a record")
            assert message.error() is None, message.error()
            assert message.offset() > last_offset
            last_offset = message.offset()
            seen[message.key()] = message.value()
    finally:
        consumer.close()
    assert seen == latest
