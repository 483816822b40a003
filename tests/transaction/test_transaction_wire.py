"""The transaction APIs byte for byte (kafka-python's classes as the oracle, every answer re-encoded to the bytes
received): Kafka 2.8's checks and errors, and PRODUCER_FENCED sent as INVALID_PRODUCER_EPOCH to versions that
predate it."""

from __future__ import annotations

from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from broker.group.coordinator import partition_for
from tests.client.support import (
    RawConnection,
    client_port,
    create_topic,
    leader_of,
    metadata_request,
    produce_request,
    record_batch,
    wait_until,
)
from tests.harness import RunningCluster, module_cluster
from tests.transaction.test_transactions_cluster import STATE_PARTITIONS, transactional_producer

cluster = module_cluster("txn-wire")

NONE, UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 0, 3, 15, 16
INVALID_TOPIC_EXCEPTION, INVALID_REQUEST = 17, 42
INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE = 47, 49, 48
INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS, OPERATION_NOT_ATTEMPTED, PRODUCER_FENCED = 50, 51, 55, 90
TXN = "wire-tx"
OFFSETS_PARTITIONS = 10  # offsets.topic.num.partitions of the classroom profile
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1


def init(connection: RawConnection, version: int, timeout_ms: int = 60_000):
    reply = connection.request(InitProducerIdRequest(transactional_id=TXN, transaction_timeout_ms=timeout_ms), version)
    return reply.error_code, reply.producer_id, reply.producer_epoch


def add_partitions(connection: RawConnection, version: int, pid: int, epoch: int, topics: dict[str, list[int]]):
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=n, partitions=ps)
                             for n, ps in topics.items()])
    reply = connection.request(request, version)
    return {(t.name, p.partition_index): p.partition_error_code
            for t in reply.results_by_topic_v3_and_below for p in t.results_by_partition}


def end(connection: RawConnection, version: int, pid: int, epoch: int, commit: bool) -> int:
    request = EndTxnRequest(transactional_id=TXN, producer_id=pid, producer_epoch=epoch, committed=commit)
    return connection.request(request, version).error_code


def test_the_transaction_apis_on_the_wire(cluster: RunningCluster):
    topic = "txn-wire"
    create_topic(cluster, topic, 1, 3)
    transactional_producer(cluster, "wire-probe")  # creates __transaction_state
    coordinator = leader_of(cluster, "__transaction_state", partition_for(TXN, STATE_PARTITIONS))
    other = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != coordinator)
    with RawConnection(client_port(cluster, other)) as connection:
        assert init(connection, 1)[0] == NOT_COORDINATOR
    with RawConnection(client_port(cluster, coordinator)) as connection:
        assert init(connection, 1, timeout_ms=900_001)[0] == INVALID_TRANSACTION_TIMEOUT
        error, pid, epoch = init(connection, 1)
        assert (error, epoch) == (NONE, 0) and pid >= 0
        assert end(connection, 1, pid, epoch, commit=True) == INVALID_TXN_STATE  # nothing to end
        assert end(connection, 1, pid + 1, epoch, commit=True) == INVALID_PRODUCER_ID_MAPPING
        # one unknown partition fails the request, the others are not attempted
        assert add_partitions(connection, 1, pid, epoch, {topic: [0], "no-such-topic": [0]}) == {
            (topic, 0): OPERATION_NOT_ATTEMPTED, ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert add_partitions(connection, 3, pid, epoch, {topic: [0]}) == {(topic, 0): NONE}

        # a new producer with the id fences the open transaction: CONCURRENT_TRANSACTIONS until it is aborted
        assert init(connection, 4)[0] == CONCURRENT_TRANSACTIONS
        error, new_pid, new_epoch = wait_until(lambda: (answer := init(connection, 4))[0] == NONE and answer, 20,
                                               "InitProducerId to succeed once the abort completed")
        assert (new_pid, new_epoch) == (pid, epoch + 2)  # bumped by the fence, then by the retry
        assert end(connection, 1, pid, epoch, commit=True) == INVALID_PRODUCER_EPOCH  # v1 predates PRODUCER_FENCED
        assert end(connection, 2, pid, epoch, commit=True) == PRODUCER_FENCED
        assert add_partitions(connection, 1, pid, epoch, {topic: [0]}) == {(topic, 0): INVALID_PRODUCER_EPOCH}

        request = AddOffsetsToTxnRequest(transactional_id=TXN, producer_id=pid, producer_epoch=new_epoch,
                                         group_id="wire-group")
        assert connection.request(request, 3).error_code == NONE
        assert end(connection, 3, pid, new_epoch, commit=False) == NONE
        # a retry of EndTxn answers NONE once the transaction is complete (CONCURRENT_TRANSACTIONS meanwhile)
        wait_until(lambda: end(connection, 3, pid, new_epoch, commit=False) == NONE, 20, "the abort to complete")
        assert end(connection, 3, pid, new_epoch, commit=True) == INVALID_TXN_STATE


def test_the_transaction_state_topic_is_internal_and_closed_to_clients(cluster: RunningCluster):
    transactional_producer(cluster, "internal-probe")
    leader = leader_of(cluster, "__transaction_state", 0)
    with RawConnection(client_port(cluster, leader)) as connection:
        [topic] = connection.request(metadata_request(["__transaction_state"]), 8).topics
        assert topic.is_internal and len(topic.partitions) == STATE_PARTITIONS
        reply = connection.request(produce_request("__transaction_state", 0, record_batch([b"forged"]), acks=-1), 8)
    assert reply.responses[0].partition_responses[0].error_code == INVALID_TOPIC_EXCEPTION


def find_coordinator(connection: RawConnection, version: int, key: str, key_type: int = GROUP_KEY_TYPE):
    reply = connection.request(FindCoordinatorRequest(key=key, key_type=key_type), version)
    return reply.error_code, reply.error_message if version >= 1 else None, reply.node_id, reply.host, reply.port


def test_find_coordinator_answers_a_group_and_a_transactional_id_in_every_version(cluster: RunningCluster):
    """The versions served, v0-v2 (Kafka 2.8's): v0 knows groups only and has no error message, v1 and v2 carry
    the key type. Any broker answers with the coordinator's endpoint on the listener asked, or why there is none."""
    group = "wire-coordinated-group"
    transactional_producer(cluster, "coordinator-probe")  # creates __transaction_state
    with RawConnection(client_port(cluster, cluster.spec.brokers[0].broker_id)) as connection:
        # the first FindCoordinator for a group creates __consumer_offsets: the client is told to retry
        assert find_coordinator(connection, 1, group)[:2] == (
            COORDINATOR_NOT_AVAILABLE, "__consumer_offsets is being created")
        wait_until(lambda: find_coordinator(connection, 1, group)[0] == NONE, 30,
                   "__consumer_offsets to have a leader")
        for key, key_type, topic, partitions, versions in (
                (group, GROUP_KEY_TYPE, "__consumer_offsets", OFFSETS_PARTITIONS, range(3)),
                (TXN, TRANSACTION_KEY_TYPE, "__transaction_state", STATE_PARTITIONS, range(1, 3))):
            coordinator = cluster.spec.broker(leader_of(cluster, topic, partition_for(key, partitions)))
            for version in versions:
                assert find_coordinator(connection, version, key, key_type) == (
                    NONE, None, coordinator.broker_id, coordinator.host, coordinator.client_port), (key, version)
        for version in range(1, 3):
            assert find_coordinator(connection, version, "", TRANSACTION_KEY_TYPE)[:3] == (
                INVALID_REQUEST, "a transactional id must not be empty", -1)
