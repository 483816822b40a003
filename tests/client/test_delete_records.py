"""DeleteRecords (API 21) on a real 3-broker cluster with unmodified admin clients (confluent-kafka's and
kafka-python's AdminClient): the low watermark comes back once every live replica moved its log start, the segment
files wholly below it are gone from the leader's and the followers' disks, consumers below it get
OFFSET_OUT_OF_RANGE (or start at the new start with auto.offset.reset=earliest), ListOffsets earliest is the new
start, and the start survives a kill -9 and a restart. Refused requests change nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import OffsetOutOfRangeError as KafkaPythonOffsetOutOfRange
from kafka.protocol.admin import DeleteRecordsRequest

from broker.log.checkpoint import LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile
from cluster.cli import main
from tests.client.support import (
    EARLIEST,
    RawConnection,
    bootstrap,
    client_port,
    create_topic,
    fetch_request,
    leader_of,
    list_offsets_request,
    metadata_request,
)
from tests.harness import RunningCluster, wait_until
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow]

RECORDS = 300
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
POLICY_VIOLATION = 44
# small segments, deleted files removed at once: a few hundred records roll a dozen segments
TOPIC_CONFIG = {"segment.bytes": "4096", "file.delete.delay.ms": "0", "min.insync.replicas": "1"}


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


@pytest.fixture
def admin(cluster):
    return AdminClient({"bootstrap.servers": bootstrap(cluster)})


def produce(cluster: RunningCluster, topic: str, count: int = RECORDS) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "linger.ms": 0,
                         "batch.num.messages": 5})
    for i in range(count):
        producer.produce(topic, value=b"%05d" % i + b"x" * 95, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def partition_dir(cluster: RunningCluster, broker_id: int, topic: str) -> Path:
    return cluster.layout.broker_dir(broker_id) / "logs" / f"{topic}-0"


def segment_bases(cluster: RunningCluster, broker_id: int, topic: str) -> list[int]:
    return sorted(int(p.name[:20]) for p in partition_dir(cluster, broker_id, topic).glob("*.log"))


def replicated_topic(cluster: RunningCluster, name: str, replication_factor: int = 3) -> list[int]:
    """A topic of one partition whose every replica holds all RECORDS in several segments; its brokers."""
    create_topic(cluster, name, 1, replication_factor, TOPIC_CONFIG)
    produce(cluster, name)
    brokers = [b.broker_id for b in cluster.spec.brokers
               if partition_dir(cluster, b.broker_id, name).is_dir()]
    assert len(brokers) == replication_factor
    def caught_up() -> bool:
        sizes = {sum(f.stat().st_size for f in partition_dir(cluster, b, name).glob("*.log")) for b in brokers}
        return len(sizes) == 1 and all(len(segment_bases(cluster, b, name)) > 5 for b in brokers)
    wait_until(caught_up, 30, f"every replica of {name} to hold the same bytes in several segments")
    return brokers


def earliest_offset(cluster: RunningCluster, topic: str, broker_id: int | None = None) -> int:
    port = client_port(cluster, leader_of(cluster, topic) if broker_id is None else broker_id)
    with RawConnection(port) as connection:
        answer = connection.request(list_offsets_request(topic, 0, EARLIEST), 5).topics[0].partitions[0]
    assert answer.error_code == 0, f"ListOffsets earliest: error {answer.error_code}"
    return answer.offset


def confluent_delete(admin: AdminClient, topic: str, offset: int, partition: int = 0):
    (future,) = admin.delete_records([TopicPartition(topic, partition, offset)], request_timeout=30,
                                     operation_timeout=20).values()
    return future.result()


def nothing_wholly_below(bases: list[int], offset: int) -> bool:
    """Every segment left holds an offset at or above ``offset`` (the next one starts above it)."""
    return all(following > offset for following in bases[1:]) and bases[0] <= offset


def test_confluent_delete_records_returns_the_low_watermark_and_every_replica_drops_the_segments_below(
        cluster, admin):
    topic = "delrec-replicated"
    brokers = replicated_topic(cluster, topic)
    before = {b: segment_bases(cluster, b, topic) for b in brokers}
    offset = 137
    deleted = confluent_delete(admin, topic, offset)
    assert deleted.low_watermark == offset
    # the answer came once every replica's log start reached the offset, and each deleted its segments then
    for broker_id in brokers:
        bases = segment_bases(cluster, broker_id, topic)
        assert nothing_wholly_below(bases, offset), (broker_id, bases)
        assert len(bases) < len(before[broker_id]) and 0 not in bases
        assert not list(partition_dir(cluster, broker_id, topic).glob("*.deleted"))
    assert earliest_offset(cluster, topic) == offset

    leader = leader_of(cluster, topic)

    def traced() -> list:
        moves = [e for e in cluster.all_traces() if isinstance(e, te.LogStartOffsetIncremented) and e.topic == topic]
        return moves if {e.broker_id for e in moves if e.log_start_offset == offset} == set(brokers) else []
    moved = wait_until(traced, 10, "every replica's log start move to be traced")
    # a follower whose own high watermark was still behind may have moved in two steps, never past the offset
    assert all(e.log_start_offset <= offset for e in moved)
    assert {(e.broker_id, e.role, e.reason) for e in moved} == {
        (b, "leader", "delete_records") if b == leader else (b, "follower", "leader_log_start") for b in brokers}
    assert sum(e.segments_deleted for e in moved if e.broker_id == leader) > 0


def test_consumers_below_the_new_start_are_out_of_range_and_earliest_starts_there(cluster, admin):
    topic = "delrec-consumers"
    replicated_topic(cluster, topic)
    assert confluent_delete(admin, topic, 200).low_watermark == 200

    with RawConnection(client_port(cluster, leader_of(cluster, topic))) as connection:
        answer = connection.request(fetch_request(topic, 0, 0), 11).responses[0].partitions[0]
    assert answer.error_code == OFFSET_OUT_OF_RANGE  # with log start -1, as Kafka answers any failed read

    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "delrec-earliest",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (200, RECORDS)
        consumer.assign([TopicPartition(topic, 0, 0)])  # offset 0 is gone: reset to the earliest, 200
        first = None
        deadline = time.monotonic() + 30
        while first is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                first = message
        assert first is not None and first.offset() == 200 and first.value().startswith(b"00200")
    finally:
        consumer.close()

    strict = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "delrec-strict",
                       "enable.auto.commit": False, "auto.offset.reset": "error"})
    try:
        strict.assign([TopicPartition(topic, 0, 0)])
        error = None
        deadline = time.monotonic() + 30
        while error is None and time.monotonic() < deadline:
            message = strict.poll(0.5)
            if message is not None and message.error() is not None:
                error = message.error()
        assert error is not None and "out of range" in error.str().lower(), error
    finally:
        strict.close()


def test_kafka_python_delete_records_and_its_consumer_out_of_range(cluster):
    topic = "delrec-kafka-python"
    replicated_topic(cluster, topic)
    client = KafkaAdminClient(bootstrap_servers=bootstrap(cluster).split(","), request_timeout_ms=30000)
    try:
        result = client.delete_records({KafkaTopicPartition(topic, 0): 90}, timeout_ms=20000)
        (answer,) = result.values()
        assert answer["low_watermark"] == 90 and answer["error_code"] == 0
        client.delete_records({KafkaTopicPartition(topic, 0): -1}, timeout_ms=20000)  # -1: the high watermark
    finally:
        client.close()
    assert earliest_offset(cluster, topic) == RECORDS

    consumer = KafkaConsumer(bootstrap_servers=bootstrap(cluster).split(","), enable_auto_commit=False,
                             auto_offset_reset="none", request_timeout_ms=20000)
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        with pytest.raises(KafkaPythonOffsetOutOfRange):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()


def raw_delete_records(port: int, wanted: list[tuple[str, int, int]], version: int) -> dict[tuple[str, int], tuple]:
    """(error code, low watermark) per partition of a DeleteRecords sent as it is, at ``version``."""
    by_topic: dict[str, list] = {}
    for topic, partition, offset in wanted:
        by_topic.setdefault(topic, []).append(
            DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=partition, offset=offset))
    request = DeleteRecordsRequest(topics=[DeleteRecordsRequest.DeleteRecordsTopic(name=name, partitions=partitions)
                                           for name, partitions in by_topic.items()], timeout_ms=10000)
    with RawConnection(port) as connection:
        reply = connection.request(request, version)
    return {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in reply.topics for p in t.partitions}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_refused_requests_change_nothing(cluster, admin, version):
    topic = f"delrec-refused-v{version}"
    brokers = replicated_topic(cluster, topic)
    before = {b: segment_bases(cluster, b, topic) for b in brokers}
    if version == 2:  # librdkafka sends v2, and refuses an unknown partition itself before sending anything
        with pytest.raises(KafkaException) as beyond:
            confluent_delete(admin, topic, RECORDS + 1)
        assert beyond.value.args[0].code() == OFFSET_OUT_OF_RANGE
    leader = leader_of(cluster, topic)
    follower = next(b for b in brokers if b != leader)
    assert raw_delete_records(client_port(cluster, leader), [(topic, 0, RECORDS + 1), (topic, 7, 5),
                                                            ("delrec-no-such-topic", 0, 5),
                                                            ("__consumer_offsets", 0, 5)], version) == {
        (topic, 0): (OFFSET_OUT_OF_RANGE, -1), (topic, 7): (UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("delrec-no-such-topic", 0): (UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("__consumer_offsets", 0): (POLICY_VIOLATION, -1)}
    assert raw_delete_records(client_port(cluster, follower), [(topic, 0, 5)], version) == {
        (topic, 0): (NOT_LEADER_OR_FOLLOWER, -1)}
    assert earliest_offset(cluster, topic) == 0
    assert {b: segment_bases(cluster, b, topic) for b in brokers} == before


def test_a_compacted_topic_refuses_delete_records_and_compact_delete_takes_it(cluster, admin):
    # Kafka: a log whose cleanup.policy lacks delete is the cleaner's to shorten, not an admin's
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    for topic, policy in (("delrec-compact", "compact"), ("delrec-compact-delete", "compact,delete")):
        create_topic(cluster, topic, 1, 3, {"cleanup.policy": policy, "min.insync.replicas": "1"})
        for i in range(20):
            producer.produce(topic, key=b"k%d" % (i % 4), value=b"v%d" % i)
    assert producer.flush(30) == 0
    refused = wait_until(lambda: (answer := raw_delete_records(
        client_port(cluster, leader_of(cluster, "delrec-compact")), [("delrec-compact", 0, 5)], 2))[
        ("delrec-compact", 0)][0] != NOT_LEADER_OR_FOLLOWER and answer, 20, "delrec-compact's leader to answer")
    assert refused == {("delrec-compact", 0): (POLICY_VIOLATION, -1)}
    assert earliest_offset(cluster, "delrec-compact") == 0
    assert confluent_delete(admin, "delrec-compact-delete", 5).low_watermark == 5
    assert earliest_offset(cluster, "delrec-compact-delete") == 5


def test_every_replica_checkpoints_the_new_start_and_a_new_leader_keeps_it(cluster, admin):
    topic = "delrec-failover"
    brokers = replicated_topic(cluster, topic)
    assert confluent_delete(admin, topic, 151).low_watermark == 151
    for broker_id in brokers:
        # written at once: the start is in the file, or the first segment left begins exactly there
        checkpoint = OffsetCheckpointFile(cluster.layout.broker_dir(broker_id) / "logs" / LOG_START_OFFSET_CHECKPOINT)
        start = max(checkpoint.read().get((topic, 0), 0), segment_bases(cluster, broker_id, topic)[0])
        assert start == 151, broker_id
    leader = leader_of(cluster, topic)
    cluster.kill9(leader)
    try:
        # asked until the new leader has taken over (ZooKeeper names it a moment before it answers as leader)
        new_start = wait_until(
            lambda: leader_of(cluster, topic) not in (leader, -1) and earliest_offset(cluster, topic), 30,
            "a new leader to answer ListOffsets")
        assert new_start == 151  # a former follower, whose start followed the leader's
    finally:
        cluster.start(leader)


def test_the_new_start_survives_a_kill_and_a_restart(cluster, admin):
    topic = "delrec-restart"
    (only,) = replicated_topic(cluster, topic, replication_factor=1)
    assert confluent_delete(admin, topic, 151).low_watermark == 151
    cluster.kill9(only)
    cluster.start(only)
    assert wait_until(lambda: earliest_offset(cluster, topic) if leader_of(cluster, topic) == only else None, 30,
                      f"broker {only} to lead {topic} again") == 151
    bases = segment_bases(cluster, only, topic)
    assert nothing_wholly_below(bases, 151) and 0 not in bases
    with RawConnection(client_port(cluster, only)) as connection:
        answer = connection.request(fetch_request(topic, 0, 150), 11).responses[0].partitions[0]
    assert answer.error_code == OFFSET_OUT_OF_RANGE


def records_cli(cluster: RunningCluster, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--data-dir", str(cluster.data_dir), "records", "delete", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_cli_prints_the_low_watermark_per_partition_from_flags_or_kafkas_offset_json(cluster, capsys, tmp_path):
    topic = "delrec-cli"
    replicated_topic(cluster, topic)
    code, out, err = records_cli(cluster, capsys, "--topic", topic, "--partition", "0", "--offset", "40")
    assert code == 0, err
    assert out.splitlines()[1].split() == [f"{topic}-0", "40"]
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": -1}], "version": 1}))
    code, out, err = records_cli(cluster, capsys, "--offset-json-file", str(offsets))
    assert code == 0, err
    assert out.splitlines()[1].split() == [f"{topic}-0", str(RECORDS)]
    assert earliest_offset(cluster, topic) == RECORDS
    code, out, err = records_cli(cluster, capsys, "--topic", topic, "--offset", str(RECORDS + 5))
    assert code == 1 and "OFFSET_OUT_OF_RANGE" in out and "high watermark" in err


def live_brokers_of(cluster: RunningCluster, broker_id: int) -> set[int]:
    with RawConnection(client_port(cluster, broker_id)) as connection:
        return {b.node_id for b in connection.request(metadata_request([]), 8).brokers}


def test_a_dead_follower_does_not_hold_the_low_watermark_and_follows_the_start_when_it_returns(cluster, admin):
    topic = "delrec-dead-follower"
    brokers = replicated_topic(cluster, topic)
    leader = leader_of(cluster, topic)
    follower = next(b for b in brokers if b != leader)
    cluster.kill9(follower)
    try:
        # Kafka 2.8's low watermark counts the replicas on live brokers only: once the leader's metadata has the
        # follower dead, the request does not wait for it
        wait_until(lambda: follower not in live_brokers_of(cluster, leader), 30,
                   f"broker {leader}'s metadata to have broker {follower} dead")
        assert confluent_delete(admin, topic, 100).low_watermark == 100
        assert 0 in segment_bases(cluster, follower, topic)  # its disk is as it was
    finally:
        cluster.start(follower)
    # back, it fetches from where it was; the leader's answers carry the new log start, which it follows
    wait_until(lambda: nothing_wholly_below(segment_bases(cluster, follower, topic), 100), 30,
               f"broker {follower} to delete its segments below 100")
    checkpoint = OffsetCheckpointFile(cluster.layout.broker_dir(follower) / "logs" / LOG_START_OFFSET_CHECKPOINT)
    # another process: the files are renamed a moment before the checkpoint is written
    wait_until(lambda: max(checkpoint.read().get((topic, 0), 0), segment_bases(cluster, follower, topic)[0]) == 100,
               10, f"broker {follower}'s log start checkpoint to say 100")


def test_a_request_that_times_out_answers_request_timed_out_and_a_repeat_completes(cluster):
    topic = "delrec-timeout"
    replicated_topic(cluster, topic)
    port = client_port(cluster, leader_of(cluster, topic))
    by_topic = [DeleteRecordsRequest.DeleteRecordsTopic(name=topic, partitions=[
        DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=60)])]
    with RawConnection(port) as connection:
        # no time for the followers to fetch: the leader moved its start, the low watermark is still 0
        reply = connection.request(DeleteRecordsRequest(topics=by_topic, timeout_ms=0), 2)
        answer = reply.topics[0].partitions[0]
        assert (answer.error_code, answer.low_watermark) == (REQUEST_TIMED_OUT, 0)
        assert earliest_offset(cluster, topic) == 60
        reply = connection.request(DeleteRecordsRequest(topics=by_topic, timeout_ms=10000), 2)
        answer = reply.topics[0].partitions[0]
        assert (answer.error_code, answer.low_watermark) == (0, 60)
