"""Transactions on real brokers with confluent-kafka's transactional producer, unmodified (issue 20): the
coordinator on __transaction_state, commit and abort seen by read_committed and read_uncommitted consumers, the last
stable offset held at an open transaction's first offset, a zombie producer fenced by a new one with its
transactional id, and a silent producer's transaction aborted after transaction.timeout.ms."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.producer import WriteTxnMarkersRequest

from broker.group.coordinator import partition_for

from tests.client.support import (
    LATEST,
    RawConnection,
    bootstrap,
    client_port,
    consume,
    create_topic,
    leader_of,
    wait_until,
)
from tests.harness import RunningCluster, module_cluster

ABORT_CHECK_MS = 500
cluster = module_cluster("txn-cluster", overrides={
    # the coordinator looks for timed-out transactions every half second instead of every 10 s
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_CHECK_MS)})

READ_COMMITTED, READ_UNCOMMITTED = 1, 0
STATE_PARTITIONS = 10  # transaction.state.log.num.partitions of the classroom profile
TRANSACTION_COORDINATOR_FENCED = 52


def transactional_producer(cluster: RunningCluster, transactional_id: str, **settings) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": transactional_id,
                         "linger.ms": 5, **settings})
    producer.init_transactions(60)
    return producer


def latest(cluster: RunningCluster, topic: str, isolation_level: int) -> int:
    """ListOffsets LATEST from the partition's leader: the LSO for read_committed, the HW for read_uncommitted."""
    wanted = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                      timestamp=LATEST)
    request = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level,
                                 topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[wanted])])
    with RawConnection(client_port(cluster, leader_of(cluster, topic))) as connection:
        answer = connection.request(request, 5).topics[0].partitions[0]
    assert answer.error_code == 0
    return answer.offset


def coordinator_of(cluster: RunningCluster, transactional_id: str) -> int:
    return leader_of(cluster, "__transaction_state", partition_for(transactional_id, STATE_PARTITIONS))


def txnindex_entries(cluster: RunningCluster, topic: str) -> list[tuple[int, int, int, int, int]]:
    """The leader's .txnindex entries of partition 0 (Kafka's 34-byte big-endian layout)."""
    directory = cluster.layout.broker_dir(leader_of(cluster, topic)) / "logs" / f"{topic}-0"
    data = b"".join(path.read_bytes() for path in sorted(directory.glob("*.txnindex")))
    return [struct.unpack_from(">hqqqq", data, at) for at in range(0, len(data), 34)]


def test_committed_values_are_read_committed_aborted_ones_only_uncommitted(cluster: RunningCluster):
    topic = "txn-orders"
    create_topic(cluster, topic, 1, 3)
    producer = transactional_producer(cluster, "orders-tx")
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value, partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    assert consume(cluster, topic, "read_committed", 3) == [b"c1", b"c2", b"c3"]
    assert consume(cluster, topic, "read_uncommitted", 5) == [b"c1", b"c2", b"a1", b"a2", b"c3"]
    # c1 c2 COMMIT a1 a2 ABORT c3 COMMIT: every marker replicated, nothing open
    wait_until(lambda: latest(cluster, topic, READ_COMMITTED) == 8, 20, "the LSO to reach the log end")
    # the abort is in the aborted-transaction index: first offset 3 (a1), marker at 5
    [(version, producer_id, first, last, _lso)] = txnindex_entries(cluster, topic)
    assert (version, first, last) == (0, 3, 5) and producer_id >= 0
    # the coordinator traced every durable state change of the id
    changes = [(e.old_state, e.new_state) for e in cluster.traces(coordinator_of(cluster, "orders-tx"))
               if e.event == "transaction_state_changed" and e.transactional_id == "orders-tx"]
    one_transaction = [("Ongoing", "PrepareCommit"), ("PrepareCommit", "CompleteCommit")]
    assert changes == [("Empty", "Empty"), ("Empty", "Ongoing"), *one_transaction,
                       ("CompleteCommit", "Ongoing"), ("Ongoing", "PrepareAbort"), ("PrepareAbort", "CompleteAbort"),
                       ("CompleteAbort", "Ongoing"), *one_transaction]


def test_the_lso_stays_at_an_open_transactions_first_offset(cluster: RunningCluster):
    topic = "txn-lso"
    create_topic(cluster, topic, 1, 3)
    producer = transactional_producer(cluster, "lso-tx")
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(30)  # offsets 0 (data), 1 (marker)
    producer.begin_transaction()
    for value in (b"open-1", b"open-2", b"open-3"):
        producer.produce(topic, value, partition=0)
    producer.flush(30)  # offsets 2, 3, 4 written, not committed
    wait_until(lambda: latest(cluster, topic, READ_UNCOMMITTED) == 5, 20, "the open transaction replicated")
    assert latest(cluster, topic, READ_COMMITTED) == 2
    assert consume(cluster, topic, "read_committed", 1) == [b"committed"]
    producer.commit_transaction(30)
    wait_until(lambda: latest(cluster, topic, READ_COMMITTED) == 6, 20, "the LSO to pass the commit marker")
    assert consume(cluster, topic, "read_committed", 4) == [b"committed", b"open-1", b"open-2", b"open-3"]


def test_a_second_producer_with_the_same_id_fences_the_first(cluster: RunningCluster):
    topic = "txn-zombie"
    create_topic(cluster, topic, 1, 3)
    zombie = transactional_producer(cluster, "zombie-tx")
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie-1", partition=0)
    zombie.flush(30)

    successor = transactional_producer(cluster, "zombie-tx")  # fences the zombie, aborts its transaction
    successor.begin_transaction()
    successor.produce(topic, b"successor-1", partition=0)
    successor.commit_transaction(30)

    zombie.produce(topic, b"zombie-2", partition=0)
    with pytest.raises(KafkaException) as failure:
        zombie.commit_transaction(30)
    error = failure.value.args[0]
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), error
    assert error.fatal()

    assert consume(cluster, topic, "read_committed", 1) == [b"successor-1"]
    # the zombie's open transaction was aborted by the coordinator, not left hanging: the LSO is the log end
    end = latest(cluster, topic, READ_UNCOMMITTED)
    wait_until(lambda: latest(cluster, topic, READ_COMMITTED) == end, 20, "the LSO to reach the log end")
    [(_, _, first, _, _)] = txnindex_entries(cluster, topic)
    assert first == 0  # zombie-1's transaction is in the aborted index


def test_a_silent_producers_transaction_is_aborted_after_its_timeout(cluster: RunningCluster):
    topic = "txn-timeout"
    create_topic(cluster, topic, 1, 3)
    producer = transactional_producer(cluster, "silent-tx", **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, b"never-committed", partition=0)
    producer.flush(30)
    assert latest(cluster, topic, READ_COMMITTED) == 0
    # no request from the producer: after 2 s (+ the check interval) the coordinator aborts on its own
    wait_until(lambda: latest(cluster, topic, READ_COMMITTED) == 2, 20, "the coordinator to abort the transaction")
    assert [entry[2:4] for entry in txnindex_entries(cluster, topic)] == [(0, 1)]
    assert consume(cluster, topic, "read_uncommitted", 1) == [b"never-committed"]
    assert consume(cluster, topic, "read_committed", 0, linger_s=1) == []
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)


def read_committed(cluster: RunningCluster, topic: str, partitions: list[int], expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100, "isolation.level": "read_committed"})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + 40
        while len(got) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    return got


def write_marker(cluster: RunningCluster, topic: str, producer_id: int, coordinator_epoch: int) -> int:
    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=0, transaction_result=False, coordinator_epoch=coordinator_epoch,
        topics=[WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])
    with RawConnection(client_port(cluster, leader_of(cluster, topic))) as connection:
        reply = connection.request(WriteTxnMarkersRequest(markers=[marker]), 1)
    return reply.markers[0].topics[0].partitions[0].error_code


def test_a_marker_from_an_older_coordinator_epoch_is_fenced(cluster: RunningCluster):
    topic = "txn-coordinator-fence"
    create_topic(cluster, topic, 1, 3)
    assert write_marker(cluster, topic, 777_001, coordinator_epoch=5) == 0
    assert write_marker(cluster, topic, 777_001, coordinator_epoch=4) == TRANSACTION_COORDINATOR_FENCED
    assert write_marker(cluster, topic, 777_001, coordinator_epoch=5) == 0  # the same coordinator again: fine
    assert write_marker(cluster, topic, 777_002, coordinator_epoch=0) == 0  # another producer: its own epochs


def test_a_transaction_survives_the_kill_of_its_coordinator(cluster: RunningCluster):
    """kill -9 of the coordinator mid-transaction: the new leader of the id's __transaction_state partition loads
    the open transaction (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and the producer's commit completes everywhere."""
    topic = "txn-failover"
    create_topic(cluster, topic, 2, 3)
    data_leaders = {leader_of(cluster, topic, 0), leader_of(cluster, topic, 1)}
    # an id whose coordinator leads none of the data partitions, so the kill leaves the data where it is (a first
    # transactional producer makes sure __transaction_state exists when this test runs alone)
    transactional_producer(cluster, "failover-probe")
    transactional_id = next(f"failover-{i}" for i in range(1000)
                            if coordinator_of(cluster, f"failover-{i}") not in data_leaders)
    producer = transactional_producer(cluster, transactional_id)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    producer.flush(30)
    victim = coordinator_of(cluster, transactional_id)
    cluster.kill9(victim)
    try:
        wait_until(lambda: coordinator_of(cluster, transactional_id) not in (victim, -1), 30,
                   "a new leader of the id's __transaction_state partition")
        producer.commit_transaction(60)
        assert sorted(read_committed(cluster, topic, [0, 1], 10)) == sorted(f"v{i}".encode() for i in range(10))
        new_coordinator = coordinator_of(cluster, transactional_id)

        def states() -> list[str]:
            return [e.new_state for e in cluster.traces(new_coordinator)
                    if e.event == "transaction_state_changed" and e.transactional_id == transactional_id]
        # EndTxn is answered once PrepareCommit is stored (as in Kafka); CompleteCommit is stored after the markers,
        # and with the killed broker still in the ISR of both partitions a reader may see the data first
        wait_until(lambda: states()[-1:] == ["CompleteCommit"], 30, "the new coordinator to complete the commit")
        assert states()[-2:] == ["PrepareCommit", "CompleteCommit"]
    finally:
        cluster.start(victim)


def test_markers_follow_a_partition_leader_killed_mid_transaction(cluster: RunningCluster):
    """kill -9 of a data partition's leader after the transaction's records were acknowledged: the commit's marker
    goes to the new leader (the marker channel retries until it is written) and the whole transaction is visible."""
    topic = "txn-leader-failover"
    create_topic(cluster, topic, 2, 3)
    transactional_producer(cluster, "leader-failover-probe")
    victim = leader_of(cluster, topic, 0)
    transactional_id = next(f"leader-failover-{i}" for i in range(1000)
                            if coordinator_of(cluster, f"leader-failover-{i}") != victim)
    producer = transactional_producer(cluster, transactional_id, **{"acks": "all"})
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"w{i}".encode(), partition=i % 2)
    producer.flush(30)
    cluster.kill9(victim)
    try:
        producer.commit_transaction(60)
        assert sorted(read_committed(cluster, topic, [0, 1], 10)) == sorted(f"w{i}".encode() for i in range(10))
        assert leader_of(cluster, topic, 0) != victim
    finally:
        cluster.start(victim)
