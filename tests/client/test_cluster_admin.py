"""DescribeCluster, DescribeLogDirs and AlterReplicaLogDirs on a real cluster, with unmodified admin clients
(confluent-kafka's and kafka-python's AdminClient) and raw frames decoded by kafka-python: the brokers, the
controller ZooKeeper's /controller names and the cluster id; each broker's log directory with its replicas' sizes,
which are the bytes of their segment files on disk and grow with the log; Kafka's answers to a move between log
directories, none of which changes a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka.protocol.admin import AlterReplicaLogDirsRequest, DescribeClusterRequest, DescribeLogDirsRequest

from tests.client.support import RawConnection, bootstrap, create_topic, metadata_request
from tests.harness import RunningCluster, wait_until, znode_json

pytestmark = [pytest.mark.processes, pytest.mark.slow]

MISMATCHED_ENDPOINT_TYPE = 114
UNKNOWN_TOPIC_OR_PARTITION = 3
REPLICA_NOT_AVAILABLE = 9
LOG_DIR_NOT_FOUND = 57
# what the CLUSTER resource supports, by AclOperation code: all granted when no authorizer is configured
ALL_CLUSTER_OPERATIONS = {"CREATE": 5, "ALTER": 7, "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10,
                          "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12}


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


@pytest.fixture
def kafka_admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=bootstrap(cluster).split(","), request_timeout_ms=20000)
    yield client
    client.close()


def log_dir(cluster: RunningCluster, broker_id: int) -> Path:
    return cluster.layout.broker_dir(broker_id) / "logs"


def bytes_on_disk(cluster: RunningCluster, broker_id: int, topic: str, partition: int) -> int:
    """What Kafka counts as a partition's size: its segment files (.log), not the indexes."""
    return sum(f.stat().st_size for f in (log_dir(cluster, broker_id) / f"{topic}-{partition}").glob("*.log"))


def describe_log_dirs(port: int, topics: list[tuple[str, list[int]]] | None, version: int):
    wanted = None if topics is None else [DescribeLogDirsRequest.DescribableLogDirTopic(topic=t, partitions=p)
                                          for t, p in topics]
    with RawConnection(port) as connection:
        return connection.request(DescribeLogDirsRequest(topics=wanted), version)


def reported_sizes(cluster: RunningCluster, topic: str, version: int = 2) -> dict[int, tuple[int, int]]:
    """(size, offset lag) of partition 0 of ``topic`` as each broker reports it."""
    sizes = {}
    for broker in cluster.spec.brokers:
        reply = describe_log_dirs(broker.client_port, [(topic, [0])], version)
        (result,) = reply.results
        assert result.error_code == 0 and result.log_dir == str(log_dir(cluster, broker.broker_id))
        (described,) = [t for t in result.topics if t.name == topic]
        (partition,) = described.partitions
        assert partition.partition_index == 0 and not partition.is_future_key
        sizes[broker.broker_id] = (partition.partition_size, partition.offset_lag)
    return sizes


def produce(cluster: RunningCluster, topic: str, count: int, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=bytes([i % 256]) * size, partition=0)
    assert producer.flush(30) == 0


def sizes_match_the_disk(cluster: RunningCluster, topic: str) -> dict[int, tuple[int, int]] | None:
    sizes = reported_sizes(cluster, topic)
    on_disk = {b.broker_id: bytes_on_disk(cluster, b.broker_id, topic, 0) for b in cluster.spec.brokers}
    # every replica caught up (the same bytes everywhere) and each broker reports what its files hold
    if len(set(on_disk.values())) == 1 and {b: s for b, (s, _) in sizes.items()} == on_disk:
        return sizes
    return None


def test_describe_cluster_names_the_brokers_and_the_controller_zookeeper_names(cluster):
    # librdkafka answers describe_cluster() from a Metadata request (v8+ carries the same fields); kafka-python
    # and the Java AdminClient send DescribeCluster (below)
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    described = admin.describe_cluster(request_timeout=15).result(timeout=20)
    assert sorted(n.id for n in described.nodes) == [b.broker_id for b in cluster.spec.brokers]
    assert {n.id: n.port for n in described.nodes} == {b.broker_id: b.client_port for b in cluster.spec.brokers}
    assert described.controller.id == znode_json(cluster, "/controller")["brokerid"]
    assert described.cluster_id == znode_json(cluster, "/cluster/id")["id"]
    assert not described.authorized_operations  # not asked for
    # without an authorizer Kafka grants every operation the cluster resource has
    asked = admin.describe_cluster(request_timeout=15, include_authorized_operations=True).result(timeout=20)
    assert {op.name for op in asked.authorized_operations} == set(ALL_CLUSTER_OPERATIONS)


def test_describe_cluster_frames_decode_exactly_with_an_independent_decoder(cluster):
    for broker in cluster.spec.brokers:
        with RawConnection(broker.client_port) as connection:
            for version in (0, 1, 2):
                reply = connection.request(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                                  include_fenced_brokers=True), version)
                assert reply.error_code == 0 and not reply.authorized_operations  # INT32_MIN: not asked for
                assert reply.controller_id == cluster.controller()
                assert sorted(b.broker_id for b in reply.brokers) == [b.broker_id for b in cluster.spec.brokers]
            asked = connection.request(DescribeClusterRequest(include_cluster_authorized_operations=True), 0)
            assert asked.authorized_operations == set(ALL_CLUSTER_OPERATIONS.values())
            controllers = connection.request(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                                    endpoint_type=2), 1)
            assert controllers.error_code == MISMATCHED_ENDPOINT_TYPE and controllers.brokers == []


def test_log_dir_sizes_are_the_segment_bytes_on_disk_and_grow_with_the_log(cluster):
    topic = "log-dirs-sized"
    create_topic(cluster, topic, 1, replication_factor=3)
    produce(cluster, topic, 50)
    first = wait_until(lambda: sizes_match_the_disk(cluster, topic), 30, "every replica's size to match its files")
    assert all(size > 50 * 100 and lag == 0 for size, lag in first.values())
    produce(cluster, topic, 50)
    second = wait_until(lambda: sizes_match_the_disk(cluster, topic), 30, "the grown sizes to match the files")
    assert all(second[b][0] > first[b][0] for b in first)
    # every advertised version answers the same sizes (v3 adds a top-level error code, v4 the volume's bytes)
    for version in (1, 3, 4):
        assert reported_sizes(cluster, topic, version) == second
    reply = describe_log_dirs(cluster.spec.brokers[0].client_port, [(topic, [0])], 4)
    assert reply.error_code == 0 and reply.results[0].total_bytes >= reply.results[0].usable_bytes > 0


def test_topics_a_broker_does_not_hold_are_left_out(cluster):
    topic = "log-dirs-single"
    create_topic(cluster, topic, 1, replication_factor=1)
    holder = cluster.state([topic]).partition(topic, 0).leader
    for broker in cluster.spec.brokers:
        (result,) = describe_log_dirs(broker.client_port, [(topic, [0]), ("no-such-topic", [0])], 2).results
        names = {t.name for t in result.topics if t.partitions}
        assert names == ({topic} if broker.broker_id == holder else set())
        assert "no-such-topic" not in {t.name for t in result.topics}
    # all topics (null): the holder lists it among the rest
    (everything,) = describe_log_dirs(client_port_of(cluster, holder), None, 2).results
    assert topic in {t.name for t in everything.topics}


def client_port_of(cluster: RunningCluster, broker_id: int) -> int:
    return cluster.spec.broker(broker_id).client_port


def test_kafka_python_describes_the_cluster_and_every_brokers_log_dirs(cluster, kafka_admin):
    topic = "log-dirs-kafka-python"
    create_topic(cluster, topic, 1, replication_factor=3)
    produce(cluster, topic, 10)
    wait_until(lambda: sizes_match_the_disk(cluster, topic), 30, "every replica's size to match its files")
    described = kafka_admin.describe_cluster()  # DescribeCluster, asking for the authorized operations
    assert described["controller_id"] == cluster.controller()
    assert sorted(b["broker_id"] for b in described["brokers"]) == [b.broker_id for b in cluster.spec.brokers]
    answers = kafka_admin.describe_log_dirs({topic: [0]})
    assert sorted(a["broker"] for a in answers) == [b.broker_id for b in cluster.spec.brokers]
    for answer in answers:
        (result,) = answer["log_dirs"]
        (described_topic,) = [t for t in result["topics"] if t["name"] == topic]
        (partition,) = described_topic["partitions"]
        assert partition["partition_size"] == bytes_on_disk(cluster, answer["broker"], topic, 0)


def alter_replica_log_dirs_request(moves: list[tuple[str, str, int]]) -> AlterReplicaLogDirsRequest:
    """One AlterReplicaLogDir per (dir, topic, partition), as kafka-reassign-partitions.sh sends them."""
    Dir = AlterReplicaLogDirsRequest.AlterReplicaLogDir
    return AlterReplicaLogDirsRequest(dirs=[Dir(path=path, topics=[Dir.AlterReplicaLogDirTopic(name=topic,
                                                                                                 partitions=[p])])
                                            for path, topic, p in moves])


def partition_files(cluster: RunningCluster, broker_id: int, topic: str, partition: int) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((log_dir(cluster, broker_id) / f"{topic}-{partition}").iterdir())}


def test_alter_replica_log_dirs_answers_as_kafka_and_moves_nothing(cluster):
    topic = "log-dirs-alter"
    create_topic(cluster, topic, 1, replication_factor=1)
    produce(cluster, topic, 5)
    holder = cluster.state([topic]).partition(topic, 0).leader
    other = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != holder)
    here = str(log_dir(cluster, holder))
    before = partition_files(cluster, holder, topic, 0)
    for version in (1, 2):
        with RawConnection(client_port_of(cluster, holder)) as connection:
            reply = connection.request(alter_replica_log_dirs_request(
                [(here, topic, 0), (here, "no-such-topic", 0), (here + "-elsewhere", "log-dirs-other", 0)]), version)
            answers = {(t.topic_name, p.partition_index): p.error_code for t in reply.results for p in t.partitions}
            assert answers == {(topic, 0): 0, ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
                               ("log-dirs-other", 0): LOG_DIR_NOT_FOUND}
            # the connection stays open: the next request on it is answered
            metadata = connection.request(metadata_request([topic]), 8)
            assert [t.name for t in metadata.topics] == [topic]
    # a broker that does not hold the replica: Kafka's NOT_LEADER_OR_FOLLOWER, answered as REPLICA_NOT_AVAILABLE
    with RawConnection(client_port_of(cluster, other)) as connection:
        reply = connection.request(alter_replica_log_dirs_request([(str(log_dir(cluster, other)), topic, 0)]), 2)
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in reply.results] == [
            (topic, [(0, REPLICA_NOT_AVAILABLE)])]
    assert partition_files(cluster, holder, topic, 0) == before
    assert not [p.name for p in log_dir(cluster, holder).iterdir() if p.name.endswith("-future")]
