"""Transactional offset commits on a real 3-broker cluster (issue 20): TxnOffsetCommit sent raw to the group
coordinator, encoded by kafka-python's own protocol classes, stays invisible to OffsetFetch (UNSTABLE_OFFSET_COMMIT
with require_stable) until WriteTxnMarkers writes the producer's COMMIT to the group's __consumer_offsets partition;
an ABORT drops it; and after the coordinator's kill -9 the new coordinator, replaying the partition, has the
committed offsets, not the aborted ones, and still holds an open transaction's offsets pending for its marker.
There is no transaction coordinator here: the test plays it, choosing the producer ids."""

from __future__ import annotations

import time
import warnings

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from broker.group.coordinator import partition_for
from broker.group.manager import OFFSETS_TOPIC
from tests.client.support import RawConnection, client_port, decode_exactly
from tests.cluster.test_controller import make_topic
from tests.groups.support import committed_offsets, coordinator_of, produce
from tests.harness import RunningCluster, wait_until

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
    from kafka.protocol.producer import (
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
        WriteTxnMarkersRequest,
        WriteTxnMarkersResponse,
    )

pytestmark = [pytest.mark.processes]
TOPIC, GROUP = "txn-offsets-source", "txn-offsets-group"
COMMITTED, ABORTED, OPEN, FENCED = 910_001, 910_002, 910_003, 910_004  # producer ids of four transactions
NOT_COORDINATOR, INVALID_PRODUCER_EPOCH, UNSTABLE_OFFSET_COMMIT = 16, 47, 88


def call(connection: RawConnection, request, response_class, version: int):
    connection._correlation_id += 1
    request.with_header(correlation_id=connection._correlation_id, client_id="kafkasim-txn-offsets-tests")
    connection.sock.sendall(request.encode(version=version, header=True, framed=True))
    return decode_exactly(response_class, connection.read_frame(), version)


def txn_commit(connection: RawConnection, producer_id: int, offsets: dict[int, int], epoch: int = 0,
               topic: str = TOPIC, group: str = GROUP) -> dict[int, int]:
    """TxnOffsetCommit v3 for the topic's partitions; the error of each."""
    partitions = [TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
        partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
        for p, o in offsets.items()]
    request = TxnOffsetCommitRequest(
        transactional_id=f"txn-{producer_id}", group_id=group, producer_id=producer_id, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=topic, partitions=partitions)])
    answer = call(connection, request, TxnOffsetCommitResponse, 3)
    return {p.partition_index: p.error_code for t in answer.topics for p in t.partitions}


def fetch(connection: RawConnection, require_stable: bool) -> dict[int, tuple[int, int]]:
    """OffsetFetch v7 of TOPIC's partitions 0 and 1: (offset, error) of each."""
    request = OffsetFetchRequest(group_id=GROUP, require_stable=require_stable, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0, 1])])
    answer = call(connection, request, OffsetFetchResponse, 7)
    assert answer.error_code == 0
    return {p.partition_index: (p.committed_offset, p.error_code) for t in answer.topics for p in t.partitions}


def write_marker(connection: RawConnection, producer_id: int, offsets_partition: int, *, commit: bool,
                 epoch: int = 0) -> int:
    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=0,
        topics=[WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(
            name=OFFSETS_TOPIC, partition_indexes=[offsets_partition])])
    answer = call(connection, WriteTxnMarkersRequest(markers=[marker]), WriteTxnMarkersResponse, 1)
    return answer.markers[0].topics[0].partitions[0].error_code


def test_txn_offsets_wait_for_their_marker_and_a_new_coordinator_replays_them(shared_cluster: RunningCluster):
    make_topic(shared_cluster, TOPIC, 2, 3)
    admin = AdminClient({"bootstrap.servers": shared_cluster.spec.bootstrap_servers})
    coordinator = coordinator_of(admin, GROUP)
    offsets_partition = partition_for(GROUP, len(shared_cluster.state([OFFSETS_TOPIC]).partitions))
    other = next(b.broker_id for b in shared_cluster.spec.brokers if b.broker_id != coordinator)
    with RawConnection(client_port(shared_cluster, other)) as connection:
        assert txn_commit(connection, COMMITTED, {0: 10, 1: 11}) == {0: NOT_COORDINATOR, 1: NOT_COORDINATOR}
    with RawConnection(client_port(shared_cluster, coordinator)) as connection:
        assert txn_commit(connection, COMMITTED, {0: 10, 1: 11}) == {0: 0, 1: 0}
        assert fetch(connection, require_stable=False) == {0: (-1, 0), 1: (-1, 0)}
        assert fetch(connection, require_stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT),
                                                          1: (-1, UNSTABLE_OFFSET_COMMIT)}
        assert write_marker(connection, COMMITTED, offsets_partition, commit=True) == 0
        assert fetch(connection, require_stable=True) == {0: (10, 0), 1: (11, 0)}

        assert txn_commit(connection, ABORTED, {0: 99}) == {0: 0}
        assert write_marker(connection, ABORTED, offsets_partition, commit=False) == 0
        assert fetch(connection, require_stable=True) == {0: (10, 0), 1: (11, 0)}

        # a producer whose epoch moved on (its marker at epoch 1) is fenced at its old epoch
        assert write_marker(connection, FENCED, offsets_partition, commit=False, epoch=1) == 0
        assert txn_commit(connection, FENCED, {0: 77}, epoch=0) == {0: INVALID_PRODUCER_EPOCH}

        assert txn_commit(connection, OPEN, {1: 50}) == {1: 0}  # its marker comes after the failover
        assert fetch(connection, require_stable=True) == {0: (10, 0), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
    assert committed_offsets(admin, GROUP) == {0: 10, 1: 11}

    shared_cluster.kill9(coordinator)
    try:
        wait_until(lambda: coordinator_of(admin, GROUP) != coordinator, 60, "another broker to coordinate the group")
        successor = coordinator_of(admin, GROUP)
        wait_until(lambda: committed_offsets(admin, GROUP) == {0: 10, 1: 11}, 60,
                   "the new coordinator to answer with the committed offsets")
        with RawConnection(client_port(shared_cluster, successor)) as connection:
            assert fetch(connection, require_stable=True) == {0: (10, 0), 1: (-1, UNSTABLE_OFFSET_COMMIT)}
            assert write_marker(connection, OPEN, offsets_partition, commit=True) == 0
            assert fetch(connection, require_stable=True) == {0: (10, 0), 1: (50, 0)}
    finally:
        shared_cluster.start(coordinator)


def test_a_read_committed_consumer_waits_for_the_transaction_and_starts_at_its_offset(shared_cluster: RunningCluster):
    """KIP-447: librdkafka (isolation.level=read_committed) fetches its committed offsets with require_stable, so a
    consumer starting while a transaction holds the group's offsets waits for the marker instead of starting from
    the previous commit (here none: it would reset to the earliest offset and read records twice)."""
    topic, group = "txn-offsets-resume", "txn-offsets-resume-group"
    bootstrap = shared_cluster.spec.bootstrap_servers
    make_topic(shared_cluster, topic, 1, 3)
    produce(bootstrap, topic, {0: 10})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    coordinator = coordinator_of(admin, group)
    offsets_partition = partition_for(group, len(shared_cluster.state([OFFSETS_TOPIC]).partitions))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 100})
    with RawConnection(client_port(shared_cluster, coordinator)) as connection:
        assert txn_commit(connection, COMMITTED, {0: 6}, topic=topic, group=group) == {0: 0}
        try:
            consumer.assign([TopicPartition(topic, 0)])
            early = [m.offset() for m in consumer.consume(10, timeout=3) if m.error() is None]
            assert early == [], "the consumer started before the transaction's offsets were decided"
            assert write_marker(connection, COMMITTED, offsets_partition, commit=True) == 0
            got: list[int] = []
            deadline = time.monotonic() + 30
            while len(got) < 4 and time.monotonic() < deadline:
                got += [m.offset() for m in consumer.consume(10, timeout=0.5) if m.error() is None]
            assert got == [6, 7, 8, 9]
        finally:
            consumer.close()
