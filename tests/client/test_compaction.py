"""Compacted topics on a real cluster (issue 21): a client creates a topic with cleanup.policy=compact as Schema
Registry does for ``_schemas``; values produced over a few keys are compacted by every replica's cleaner, whose
segment files then hold only the last value of each key outside the active segment; a consumer reading from
offset 0 sees the latest value of every key. ``__consumer_offsets`` is compacted too: after many commits of one
group its log keeps the last commit, and a new coordinator loading the compacted log still knows it."""

from __future__ import annotations

import pytest
import signal

import psutil

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from broker.group.coordinator import partition_for
from tests.client.support import bootstrap, leader_of
from tests.harness import RunningCluster, module_cluster, wait_until
from tests.log.cleaner_support import read_segments
from tests.metrics.support import scrape
from tests.metrics.support import value as sample
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow]

KEYS = 40
ROUNDS = 60
THROTTLE_BYTES_PER_S = 400_000


# small __consumer_offsets segments, so commits roll them and the cleaner has inactive segments to compact; a
# throttled cleaner, so a cleaning of a few MiB lasts long enough to be killed in its middle
cluster = module_cluster("compaction-cluster", overrides={
    "offsets.topic.segment.bytes": "8192", "log.cleaner.io.max.bytes.per.second": str(THROTTLE_BYTES_PER_S)})


def admin(cluster: RunningCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap(cluster)})


def create(cluster: RunningCluster, name: str, partitions: int, replication: int, config: dict[str, str]) -> None:
    client = admin(cluster)
    client.create_topics([NewTopic(name, partitions, replication, config=config)])[name].result(30)


def all_cleaned(cluster: RunningCluster, topic: str, partition: int) -> bool:
    """Every replica's log cleaned up to its active segment. A follower may have nothing to clean: one that fetched
    after its leader's cleaning holds the compacted log, maybe in its active segment alone."""
    for broker in cluster.spec.brokers:
        directory = cluster.layout.broker_dir(broker.broker_id) / "logs" / f"{topic}-{partition}"
        if not directory.exists():
            continue  # no replica here
        active = max(int(p.name[:20]) for p in directory.glob("*.log"))
        cleaned = [e for e in cluster.traces(broker.broker_id)
                   if isinstance(e, te.LogCleaned) and (e.topic, e.partition) == (topic, partition)]
        if active > 0 and (not cleaned or cleaned[-1].end_offset != active):
            return False
    return True


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
    # the value's refusal as AlterConfigs words it, answered INVALID_CONFIG as Kafka's CreateTopics answers it
    assert info.value.args[0].name() == "INVALID_CONFIG"
    assert "Invalid value shred for configuration cleanup.policy" in info.value.args[0].str()


def test_a_min_compaction_lag_above_the_max_is_refused_at_create_and_alter(cluster):
    from confluent_kafka import KafkaException

    lags = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000", "max.compaction.lag.ms": "1000"}
    with pytest.raises(KafkaException) as info:
        create(cluster, "lags-crossed", 1, 1, lags)
    assert info.value.args[0].name() == "INVALID_CONFIG"
    assert "min.compaction.lag.ms (60000) > max.compaction.lag.ms (1000)" in info.value.args[0].str()
    create(cluster, "lags-in-order", 1, 1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "lags-in-order",
                              set_config={"max.compaction.lag.ms": "1000", "min.compaction.lag.ms": "60000"})
    client = admin(cluster)
    with pytest.raises(KafkaException) as info:
        client.alter_configs([resource])[resource].result(30)
    assert info.value.args[0].name() == "INVALID_CONFIG"
    described = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "lags-in-order")])
    assert next(iter(described.values())).result(30)["min.compaction.lag.ms"].value == "0", "nothing changed"


def test_a_record_without_a_key_is_refused_by_a_compacted_topic(cluster):
    create(cluster, "compacted-keyless", 1, 1, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "retries": 0})
    outcome: list = []
    # one batch each: Kafka refuses a whole batch holding a keyless record
    producer.produce("compacted-keyless", b"no key", partition=0, on_delivery=lambda err, _m: outcome.append(err))
    producer.flush(30)
    producer.produce("compacted-keyless", b"keyed", b"k", partition=0, on_delivery=lambda err, _m: outcome.append(err))
    producer.flush(30)
    assert [e.name() if e else None for e in outcome] == ["INVALID_RECORD", None]


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
    wait_until(lambda: all_cleaned(cluster, topic, 0), 60, "every replica's cleaner to reach its active segment",
               interval_s=0.5)
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
        assert len(outside) <= KEYS and len(records) < produced
        # Kafka's LogCleaner and LogCleanerManager gauges on each broker's /metrics (log dir in the label)
        samples = scrape(cluster, broker.broker_id)
        log_dir = str(cluster.layout.broker_dir(broker.broker_id) / "logs")
        assert 0 < sample(samples, "kafka_log_logcleaner_cleaner_recopy_percent") < 100, "wrote less than it read"
        assert 0 <= sample(samples, "kafka_log_logcleaner_max_buffer_utilization_percent") < 1, "40 keys, 128 MiB"
        assert sample(samples, "kafka_log_logcleaner_deadthreadcount") == 0
        assert 0 <= sample(samples, "kafka_log_logcleanermanager_time_since_last_run_ms") < 60_000
        assert ("kafka_log_logcleanermanager_uncleanable_partitions_count",
                frozenset({("logDirectory", log_dir)})) in samples
        assert sample(samples, "kafka_log_logcleanermanager_uncleanable_partitions_count", logDirectory=log_dir) == 0

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


def test_the_cleaner_removes_aborted_transactions_and_keeps_the_committed_latest_values(cluster):
    """A transactional producer writes every key in each transaction, one transaction in three aborted: after
    cleaning, no replica's segments hold aborted data outside the active segment, each key's record there is its
    latest committed value, and a read_committed consumer from offset 0 sees exactly those."""
    topic = "compacted-transactions"
    create(cluster, topic, 1, 3, {"cleanup.policy": "compact", "segment.bytes": "16384",
                                  "min.cleanable.dirty.ratio": "0.01"})
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": "compacting-writer",
                         "linger.ms": 5})
    producer.init_transactions(60)
    latest: dict[bytes, bytes] = {}
    for round_ in range(ROUNDS):
        aborted = round_ % 3 == 1
        producer.begin_transaction()
        for k in range(KEYS):
            key = f"key-{k}".encode()
            value = f"{'aborted' if aborted else 'committed'}-{k}-{round_}-".encode() * 4
            producer.produce(topic, value, key, partition=0)
            if not aborted:
                latest[key] = value
        if aborted:
            assert producer.flush(30) == 0  # the aborted values reach the log before their ABORT marker
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)

    wait_until(lambda: all_cleaned(cluster, topic, 0), 60, "every replica's cleaner to reach its active segment",
               interval_s=0.5)
    for broker in cluster.spec.brokers:
        directory = _partition_dir(cluster, broker.broker_id, topic, 0)
        active = max(int(p.name[:20]) for p in directory.glob("*.log"))
        data = [r for r in read_segments(directory) if r.key is not None and r.key.startswith(b"key-")]
        outside = [r for r in data if r.offset < active]
        assert outside, "segments were rolled and cleaned"
        assert not [r for r in outside if r.value.startswith(b"aborted")], "aborted data left by the cleaner"
        keys_outside = [r.key for r in outside]
        assert len(keys_outside) == len(set(keys_outside)), "one record per key outside the active segment"
        in_active = {r.key for r in data if r.offset >= active}
        assert all(r.value == latest[r.key] for r in outside if r.key not in in_active)

    records = read_to_end(cluster, topic, "read_committed")
    assert not [value for _, _, value in records if value.startswith(b"aborted")]
    assert {key: value for _, key, value in records} == latest


def read_to_end(cluster: RunningCluster, topic: str, isolation: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record a consumer with ``isolation`` reads from offset 0 of partition 0 to its
    end (the LSO for read_committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": f"compaction-{isolation}-reader",
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    records = []
    try:
        while True:
            message = wait_until(lambda: consumer.poll(0.5), 30, "a record or the end of the partition")
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return records
            records.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()


def _partition_dir(cluster: RunningCluster, broker_id: int, topic: str, partition: int):
    return cluster.layout.broker_dir(broker_id) / "logs" / f"{topic}-{partition}"


def test_consumer_offsets_is_compacted_and_a_new_coordinator_loads_the_last_commit(cluster):
    topic, group = "committed-often", "compaction-committer"
    create(cluster, topic, 1, 3, {})
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group, "enable.auto.commit": False})
    commits = 400
    try:
        for offset in range(1, commits + 1):
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    client = admin(cluster)  # held until the answer is in: a collected client cancels its requests
    assert client.describe_configs([resource])[resource].result(30)["cleanup.policy"].value == "compact"
    partitions = len([p for p in cluster.state(["__consumer_offsets"]).partitions if p.topic == "__consumer_offsets"])
    partition = partition_for(group, partitions)
    coordinator = leader_of(cluster, "__consumer_offsets", partition)

    def coordinator_cleaned() -> bool:
        return any(isinstance(e, te.LogCleaned) and (e.topic, e.partition) == ("__consumer_offsets", partition)
                   for e in cluster.traces(coordinator))

    wait_until(lambda: coordinator_cleaned() and all_cleaned(cluster, "__consumer_offsets", partition), 60,
               "every replica of the group's __consumer_offsets partition compacted",
               interval_s=0.5)
    for broker in cluster.spec.brokers:
        directory = _partition_dir(cluster, broker.broker_id, "__consumer_offsets", partition)
        active = max(int(p.name[:20]) for p in directory.glob("*.log"))
        outside = [r for r in read_segments(directory) if r.offset < active]
        keys = [r.key for r in outside]
        assert len(keys) == len(set(keys)) and len(outside) <= 2  # the group's metadata and its one offset

    # the coordinator dies; the new one loads the group from its own compacted log
    cluster.kill9(coordinator)
    try:
        wait_until(lambda: leader_of(cluster, "__consumer_offsets", partition) not in (coordinator, -1), 30,
                   "a new coordinator")
        reader = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group, "enable.auto.commit": False})
        try:
            committed = wait_until(lambda: reader.committed([TopicPartition(topic, 0)], timeout=5)[0].offset, 60,
                                   "the committed offset from the new coordinator")
            assert committed == commits
        finally:
            reader.close()
    finally:
        cluster.start(coordinator)


def test_a_broker_killed_in_the_middle_of_a_cleaning_recovers_a_correct_log(cluster):
    topic, victim = "compacted-then-killed", 2
    client = admin(cluster)
    client.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1, replica_assignment=[[victim]],
                                   config={"cleanup.policy": "compact", "segment.bytes": str(256 * 1024)})
                          ])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "linger.ms": 5,
                         "batch.size": 64_000})
    latest: dict[bytes, bytes] = {}
    errors: list = []
    for n in range(20_000):
        key = f"key-{n % 50}".encode()
        value = f"{n:08d}-".encode() + b"x" * 90
        producer.produce(topic, value, key, partition=0,
                         on_delivery=lambda error, _m: error is not None and errors.append(error))
        latest[key] = value
        if n % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0 and not errors, errors[:3]
    directory = _partition_dir(cluster, victim, topic, 0)

    # throttled, the rewrite of a few MiB takes seconds: kill -9 while its .cleaned files are being written
    wait_until(lambda: list(directory.glob("*.log.cleaned")), 60, "a cleaning writing its .cleaned files",
               interval_s=0.01)
    # the cleaning runs in the broker's cleaner worker process, which has the .cleaned file open for writing
    broker = psutil.Process(cluster.pid(victim))
    workers = [p for p in broker.children() if "broker.log.cleaner.worker" in p.cmdline()]
    assert len(workers) == 1, broker.children()
    worker = workers[0]
    assert worker.pid != broker.pid and worker.nice() > broker.nice()
    # the .cleaned file seen above may be one the worker has finished and left for the broker's swap: wait for one
    # it is writing (the next cleaning's, if need be)
    wait_until(lambda: [f.path for f in worker.open_files() if f.path.endswith(".log.cleaned")], 60,
               "the worker process writing a .cleaned file", interval_s=0.01)
    cluster.signal(victim, signal.SIGKILL)
    wait_until(lambda: cluster.pid(victim) is None, 10, f"broker {victim} to die")
    wait_until(lambda: not _alive(worker), 10, f"the cleaner worker {worker.pid} of the killed broker to exit")
    left = {(p.name, p.stat().st_ino, p.stat().st_ctime_ns) for p in directory.iterdir()
            if p.name.endswith((".cleaned", ".swap"))}
    assert left, "the crash left the cleaning's files"
    cluster.start(victim)
    # the restarted broker's cleaner may already be writing .cleaned files of its own: the crash's are the ones
    # that must be gone (same name, same inode, same change time)
    after = {(p.name, p.stat().st_ino, p.stat().st_ctime_ns) for p in directory.iterdir()
             if p.name.endswith((".cleaned", ".swap"))}
    assert not left & after, sorted(left & after)

    def last_values() -> dict[bytes, bytes]:
        values = {}
        for record in read_segments(directory):
            values[record.key] = record.value
        return values

    assert last_values() == latest, "no latest value lost"
    wait_until(lambda: all_cleaned(cluster, topic, 0), 90, "the restarted broker's cleaner to finish", interval_s=0.5)
    assert last_values() == latest
    active = max(int(p.name[:20]) for p in directory.glob("*.log"))
    outside = [r.key for r in read_segments(directory) if r.offset < active]
    assert len(outside) == len(set(outside))


def _alive(process: psutil.Process) -> bool:
    """Running, not a zombie waiting for its new parent to reap it."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
