"""A request that reaches the wrong broker: NOT_LEADER_OR_FOLLOWER sends the client back to Metadata, and
the leader named there takes the write. A partition nobody has is UNKNOWN_TOPIC_OR_PARTITION.

Raw frames encoded and decoded by kafka-python's protocol classes, so the error codes are the ones a client
library would see."""

import pytest

from tests.client.support import (
    EARLIEST,
    RawConnection,
    create_topic,
    fetch_request,
    latest_offset,
    leader_of,
    list_offsets_request,
    metadata_request,
    produce_request,
    read_records,
    record_batch,
)
from tests.harness import zk_call

pytestmark = [pytest.mark.processes, pytest.mark.slow]

NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 3, 6


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


def produce_answer(connection: RawConnection, topic: str, partition: int, values: list[bytes]):
    reply = connection.request(produce_request(topic, partition, record_batch(values)), 8)
    return reply.responses[0].partition_responses[0]


def port_of(cluster, broker_id: int) -> int:
    return cluster.spec.broker(broker_id).client_port


def test_a_produce_to_a_broker_without_the_partition_is_refused_and_the_leader_from_metadata_takes_it(cluster):
    create_topic(cluster, "moved", 1)
    leader = leader_of(cluster, "moved")
    stranger = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != leader)
    with RawConnection(port_of(cluster, stranger)) as wrong:
        refused = produce_answer(wrong, "moved", 0, [b"lost?"])
        assert (refused.error_code, refused.base_offset) == (NOT_LEADER_OR_FOLLOWER, -1)
        # what a client does next: ask for metadata (here, from the same broker) and go to the leader it names
        metadata = wrong.request(metadata_request(["moved"]), 8)
    (topic,) = metadata.topics
    named = topic.partitions[0].leader_id
    assert named == leader
    address = next((b.host, b.port) for b in metadata.brokers if b.node_id == named)
    assert address == ("127.0.0.1", port_of(cluster, leader))
    with RawConnection(address[1]) as right:
        accepted = produce_answer(right, "moved", 0, [b"a", b"b"])
        assert (accepted.error_code, accepted.base_offset) == (NONE, 0)
        assert latest_offset(right, "moved") == 2  # the refused write left nothing behind
        fetched = right.request(fetch_request("moved", 0, 0), 11).responses[0].partitions[0]
    assert read_records(fetched.records) == [(0, b"a"), (1, b"b")]


def test_fetch_and_list_offsets_from_a_broker_that_is_not_the_leader_are_refused(cluster):
    create_topic(cluster, "elsewhere", 1)
    stranger = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != leader_of(cluster, "elsewhere"))
    with RawConnection(port_of(cluster, stranger)) as wrong:
        fetched = wrong.request(fetch_request("elsewhere", 0, 0), 11).responses[0].partitions[0]
        listed = wrong.request(list_offsets_request("elsewhere", 0, EARLIEST), 5).topics[0].partitions[0]
    assert (fetched.error_code, fetched.high_watermark, fetched.records) == (NOT_LEADER_OR_FOLLOWER, -1, b"")
    assert (listed.error_code, listed.offset) == (NOT_LEADER_OR_FOLLOWER, -1)


def test_a_produce_to_a_follower_replica_is_refused_with_not_leader(cluster):
    # replication factor 3 only for the follower's answer: nothing here waits for replication
    create_topic(cluster, "followed", 1, replication_factor=3)
    state = cluster.state(["followed"]).partition("followed", 0)
    follower = next(r for r in state.replicas if r != state.leader)
    with RawConnection(port_of(cluster, follower)) as connection:
        refused = produce_answer(connection, "followed", 0, [b"x"])
    assert refused.error_code == NOT_LEADER_OR_FOLLOWER


def test_a_partition_that_does_not_exist_is_unknown_and_is_not_created(cluster):
    create_topic(cluster, "three", 3)
    leader = leader_of(cluster, "three", 0)
    with RawConnection(port_of(cluster, leader)) as connection:
        beyond = produce_answer(connection, "three", 7, [b"x"])
        nowhere = produce_answer(connection, "no-such-topic", 0, [b"x"])
        fetched = connection.request(fetch_request("three", 9, 0), 11).responses[0].partitions[0]
        assert latest_offset(connection, "three", 0) == 0
    assert beyond.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert nowhere.error_code == UNKNOWN_TOPIC_OR_PARTITION  # Produce never auto-creates, as in Kafka
    assert fetched.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert len(cluster.state(["three"]).partitions) == 3
    assert zk_call(cluster.zk_connect, lambda zk: zk.exists("/brokers/topics/no-such-topic")) is None
