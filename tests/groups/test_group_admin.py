"""DeleteGroups and OffsetDelete on a real cluster, with confluent-kafka's and kafka-python's admin clients and
raw frames decoded by kafka-python: a group with a live member is refused (NON_EMPTY_GROUP), an empty one is
deleted with its offsets, so a new member starts from auto.offset.reset, and it stays deleted when another broker
becomes its coordinator; offsets of a topic the live consumers subscribe to are kept (GROUP_SUBSCRIBED_TO_TOPIC),
others go; only the coordinator answers."""

from __future__ import annotations

import time
import warnings

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import GroupIdNotFoundError, NoError

from broker.group.coordinator import partition_for
from tests.client.support import RawConnection, bootstrap, client_port, create_topic
from tests.groups.support import committed_offsets, coordinator_of, produce
from tests.harness import RunningCluster, wait_until

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import DeleteGroupsRequest, DescribeLogDirsRequest
    from kafka.protocol.consumer import OffsetDeleteRequest

pytestmark = [pytest.mark.processes, pytest.mark.slow]

UNKNOWN_TOPIC_OR_PARTITION, NOT_COORDINATOR, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 3, 16, 68, 69
GROUP_SUBSCRIBED_TO_TOPIC = 86
OFFSETS_TOPIC = "__consumer_offsets"


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


@pytest.fixture
def admin(cluster):
    return AdminClient({"bootstrap.servers": bootstrap(cluster)})


def member(cluster: RunningCluster, group: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 10000})
    consumer.subscribe([topic])
    return consumer


def first_offsets(consumer: Consumer, count: int, timeout_s: float = 30) -> list[int]:
    """The offsets of the first ``count`` records the member reads (it joins the group on the way)."""
    offsets: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(offsets) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            offsets.append(message.offset())
    assert len(offsets) == count, f"read {len(offsets)} of {count} records"
    return offsets


def deletion_error(admin: AdminClient, group: str) -> str | None:
    try:
        admin.delete_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
    except KafkaException as exc:
        return exc.args[0].name()
    return None


def state_of(admin: AdminClient, group: str) -> ConsumerGroupState:
    return admin.describe_consumer_groups([group], request_timeout=15)[group].result(timeout=20).state


def other_broker(cluster: RunningCluster, broker_id: int) -> int:
    return next(b.broker_id for b in cluster.spec.brokers if b.broker_id != broker_id)


def offsets_partition_replicated(cluster: RunningCluster, partition: int) -> bool:
    """Every replica of the group's __consumer_offsets partition holds the same bytes (DescribeLogDirs)."""
    sizes = set()
    for replica in cluster.state([OFFSETS_TOPIC]).partition(OFFSETS_TOPIC, partition).replicas:
        wanted = [DescribeLogDirsRequest.DescribableLogDirTopic(topic=OFFSETS_TOPIC, partitions=[partition])]
        with RawConnection(client_port(cluster, replica)) as connection:
            (result,) = connection.request(DescribeLogDirsRequest(topics=wanted), 2).results
        sizes |= {p.partition_size for t in result.topics if t.name == OFFSETS_TOPIC for p in t.partitions}
    return len(sizes) == 1


def test_a_group_with_a_member_is_refused_and_an_empty_one_is_deleted_with_its_offsets(cluster, admin):
    group, topic = "admin-delete-me", "admin-delete-topic"
    create_topic(cluster, topic, 1, replication_factor=3)
    produce(bootstrap(cluster), topic, {0: 10})
    consumer = member(cluster, group, topic)
    assert first_offsets(consumer, 10) == list(range(10))
    consumer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    assert committed_offsets(admin, group) == {0: 4}

    assert deletion_error(admin, group) == "NON_EMPTY_GROUP"
    assert committed_offsets(admin, group) == {0: 4}
    consumer.close()  # LeaveGroup: the group is left Empty, with its offsets
    wait_until(lambda: state_of(admin, group) == ConsumerGroupState.EMPTY, 20, f"{group} to be Empty")

    assert deletion_error(admin, group) is None
    assert state_of(admin, group) == ConsumerGroupState.DEAD
    assert committed_offsets(admin, group) == {}
    assert deletion_error(admin, group) == "GROUP_ID_NOT_FOUND"
    # a new member finds no committed offset: auto.offset.reset (earliest) applies, not the deleted 4
    again = member(cluster, group, topic)
    try:
        assert first_offsets(again, 1) == [0]
    finally:
        again.close()


def test_a_deleted_group_stays_deleted_under_a_new_coordinator(cluster, admin):
    group, topic = "admin-delete-durable", "admin-durable-topic"
    create_topic(cluster, topic, 1, replication_factor=3)
    produce(bootstrap(cluster), topic, {0: 3})
    consumer = member(cluster, group, topic)
    first_offsets(consumer, 3)
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    wait_until(lambda: state_of(admin, group) == ConsumerGroupState.EMPTY, 20, f"{group} to be Empty")
    assert deletion_error(admin, group) is None

    old = coordinator_of(admin, group)
    partition = partition_for(group, len(cluster.state([OFFSETS_TOPIC]).partitions))
    assert cluster.state([OFFSETS_TOPIC]).partition(OFFSETS_TOPIC, partition).leader == old
    # the tombstones are replicated like any write (Kafka does not wait for them before answering)
    wait_until(lambda: offsets_partition_replicated(cluster, partition), 20, "the tombstones on every replica")
    cluster.kill9(old)
    try:
        new = wait_until(lambda: _new_coordinator(admin, group, old), 30, f"a coordinator for {group} other than {old}")
        assert new != old
        assert committed_offsets(admin, group) == {}
        assert state_of(admin, group) == ConsumerGroupState.DEAD
    finally:
        cluster.start(old)


def _new_coordinator(admin: AdminClient, group: str, old: int) -> int | None:
    try:
        coordinator = coordinator_of(admin, group)
    except KafkaException:
        return None  # the coordinator is moving or loading
    return coordinator if coordinator != old else None


def test_only_the_coordinator_deletes_a_group(cluster, admin):
    group = "admin-delete-elsewhere"
    coordinator = coordinator_of(admin, group)
    for version in (0, 1, 2):
        with RawConnection(client_port(cluster, other_broker(cluster, coordinator))) as connection:
            (result,) = connection.request(DeleteGroupsRequest(groups_names=[group]), version).results
        assert (result.group_id, result.error_code) == (group, NOT_COORDINATOR)
        with RawConnection(client_port(cluster, coordinator)) as connection:
            (result,) = connection.request(DeleteGroupsRequest(groups_names=[group]), version).results
        assert (result.group_id, result.error_code) == (group, GROUP_ID_NOT_FOUND)


def offset_delete(cluster: RunningCluster, broker_id: int, group: str, partitions: list[tuple[str, int]]):
    topics: dict[str, list] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(
            OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=partition))
    request = OffsetDeleteRequest(group_id=group, topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name=name, partitions=parts) for name, parts in topics.items()])
    with RawConnection(client_port(cluster, broker_id)) as connection:
        reply = connection.request(request, 0)
    return reply.error_code, {(t.name, p.partition_index): p.error_code for t in reply.topics for p in t.partitions}


def test_offset_delete_keeps_the_offsets_of_subscribed_topics_and_removes_the_others(cluster, admin):
    group, subscribed, other = "admin-offset-delete", "admin-od-subscribed", "admin-od-other"
    for topic in (subscribed, other):
        create_topic(cluster, topic, 1, replication_factor=3)
        produce(bootstrap(cluster), topic, {0: 5})
    consumer = member(cluster, group, subscribed)
    first_offsets(consumer, 5)
    # a member may commit for a topic it does not subscribe to (a consumer that changed its subscription)
    consumer.commit(offsets=[TopicPartition(subscribed, 0, 3), TopicPartition(other, 0, 2)], asynchronous=False)
    coordinator = coordinator_of(admin, group)

    assert offset_delete(cluster, other_broker(cluster, coordinator), group, [(other, 0)]) == (NOT_COORDINATOR, {})
    assert offset_delete(cluster, coordinator, group, [(subscribed, 0), (other, 0), ("admin-od-none", 0)]) == (0, {
        (subscribed, 0): GROUP_SUBSCRIBED_TO_TOPIC, (other, 0): 0, ("admin-od-none", 0): UNKNOWN_TOPIC_OR_PARTITION})
    assert {(tp.topic, tp.partition): tp.offset for tp in _offsets(admin, group)} == {(subscribed, 0): 3}

    consumer.close()
    wait_until(lambda: state_of(admin, group) == ConsumerGroupState.EMPTY, 20, f"{group} to be Empty")
    kafka_admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster).split(","), request_timeout_ms=20000)
    try:
        assert kafka_admin.delete_group_offsets(group, [KafkaTopicPartition(subscribed, 0)]) == {
            KafkaTopicPartition(subscribed, 0): NoError}
        # no members and no offsets left: the group is gone, as in Kafka
        with pytest.raises(GroupIdNotFoundError):
            kafka_admin.delete_group_offsets(group, [KafkaTopicPartition(subscribed, 0)])
        assert kafka_admin.delete_groups([group]) == {group: "GroupIdNotFoundError"}
    finally:
        kafka_admin.close()


def _offsets(admin: AdminClient, group: str) -> list[TopicPartition]:
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)
    return [tp for tp in result[group].result(timeout=15).topic_partitions if tp.offset >= 0]


def test_kafka_python_deletes_an_empty_group(cluster):
    group, topic = "admin-kafka-python-delete", "admin-kafka-python-topic"
    create_topic(cluster, topic, 1, replication_factor=3)
    produce(bootstrap(cluster), topic, {0: 2})
    consumer = member(cluster, group, topic)
    first_offsets(consumer, 2)
    consumer.commit(asynchronous=False)
    kafka_admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster).split(","), request_timeout_ms=20000)
    try:
        assert kafka_admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
        consumer.close()
        wait_until(lambda: kafka_admin.delete_groups([group]) == {group: "OK"}, 20, f"{group} to be deleted")
        assert committed_offsets(AdminClient({"bootstrap.servers": bootstrap(cluster)}), group) == {}
    finally:
        kafka_admin.close()
