"""Every answer the running broker gives decodes with kafka-python 3.0.12's protocol classes, an encoder
and decoder written independently of the broker's kio: the real request frames captured from
confluent-kafka, kafka-python and aiokafka (wire-compat.md section 10) are replayed over raw sockets, and
each advertised version of the data-plane APIs is asked once more through kafka-python's own encoder.

"Decodes" means: kafka-python reads the answer, and re-encoding what it read gives back exactly the bytes
received (nothing missing, left over or read differently)."""

import struct

import pytest
from confluent_kafka import Producer
from kafka.protocol.metadata import ApiVersionsRequest

from broker.clientplane.protocol.versions import ApiKey
from tests.client.support import (
    EARLIEST,
    LATEST,
    RESPONSES,
    RawConnection,
    bootstrap,
    create_topic,
    decode_exactly,
    exchange,
    fetch_request,
    latest_offset,
    leader_of,
    list_offsets_request,
    metadata_request,
    produce_request,
    read_records,
    record_batch,
    wait_until,
)
from tests.harness import zk_call
from tests.protocol.captured import CAPTURED

pytestmark = [pytest.mark.processes, pytest.mark.slow]

SERVED = {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS,
          ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.INIT_PRODUCER_ID}
REPLAYED = [c for c in CAPTURED if c.matrix == "rec" and c.api_key in SERVED
            and c.api_key not in (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS)]
ADMIN_CLIENTS = sorted({c.client for c in CAPTURED if c.matrix == "rec" and c.api_key == ApiKey.CREATE_TOPICS})
UNSUPPORTED_VERSION = 35
SEEDED = [b"seed-%d" % i for i in range(10)]  # t1-0 offsets 0-9: the captured Fetch frames read from 0, 3 and 6


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    # The captured frames all name topic t1, partition 0.
    create_topic(shared_cluster, "t1", 1)
    with RawConnection(shared_cluster.spec.broker(leader_of(shared_cluster, "t1")).client_port) as connection:
        seeded = connection.request(produce_request("t1", 0, record_batch(SEEDED)), 8)
    assert seeded.responses[0].partition_responses[0].base_offset == 0
    return shared_cluster


def correlation_id(frame: bytes) -> int:
    return struct.unpack_from(">i", frame, 4)[0]


def port_for(cluster, api_key: ApiKey) -> int:
    """Where a client sends each API: partition requests to the leader, admin to the controller."""
    if api_key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS):
        broker_id = leader_of(cluster, "t1")
    elif api_key in (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS):
        broker_id = cluster.controller()
    else:
        broker_id = cluster.spec.brokers[0].broker_id
    return cluster.spec.broker(broker_id).client_port


def replay(cluster, captured):
    answer = exchange(port_for(cluster, captured.api_key), captured.frame, timeout_s=15)
    assert answer is not None, f"{captured.id}: the broker closed the connection instead of answering"
    reply = decode_exactly(RESPONSES[captured.api_key], answer, captured.api_version)
    assert reply.header.correlation_id == correlation_id(captured.frame)
    return reply


def log_end(cluster) -> int:
    with RawConnection(port_for(cluster, ApiKey.LIST_OFFSETS)) as connection:
        return latest_offset(connection, "t1")


@pytest.mark.parametrize("captured", REPLAYED, ids=lambda c: c.id)
def test_the_answer_to_a_captured_client_request_decodes_with_kafka_python(cluster, captured):
    before = log_end(cluster)
    reply = replay(cluster, captured)
    api = captured.api_key
    if api == ApiKey.API_VERSIONS:
        ranges = {k.api_key: (k.min_version, k.max_version) for k in reply.api_keys}
        if captured.api_version > 3:  # too new: a v0 answer naming the versions to retry with
            assert (reply.error_code, ranges) == (UNSUPPORTED_VERSION, {18: (0, 3)})
        else:
            assert reply.error_code == 0 and ranges[18] == (0, 3) and ranges[0] == (0, 8) and ranges[1] == (4, 11)
    elif api == ApiKey.METADATA:
        assert {(b.node_id, b.host, b.port) for b in reply.brokers} == {
            (b.broker_id, "127.0.0.1", b.client_port) for b in cluster.spec.brokers}
        assert reply.controller_id == cluster.controller()
        asked = [t.name for t in reply.topics]
        assert asked in ([], ["t1"])  # the frames ask for no topic (bootstrap) or for t1
        for topic in reply.topics:
            assert topic.error_code == 0
            assert [(p.partition_index, p.leader_id) for p in topic.partitions] == [(0, leader_of(cluster, "t1"))]
    elif api == ApiKey.PRODUCE:
        (answer,) = reply.responses[0].partition_responses
        assert (reply.responses[0].name, answer.index, answer.error_code) == ("t1", 0, 0)
        assert answer.base_offset == before and log_end(cluster) > before
    elif api == ApiKey.FETCH:
        (answer,) = reply.responses[0].partitions
        assert (reply.error_code, reply.session_id, answer.error_code) == (0, 0, 0)
        assert answer.high_watermark == answer.last_stable_offset == before
        records = read_records(answer.records)
        assert records[: len(SEEDED)] == list(enumerate(SEEDED))
    elif api == ApiKey.LIST_OFFSETS:  # the captured frames ask for the earliest offset
        (answer,) = reply.topics[0].partitions
        assert (answer.error_code, answer.timestamp, answer.offset, answer.leader_epoch) == (0, -1, 0, 0)
    elif api == ApiKey.INIT_PRODUCER_ID:
        assert (reply.error_code, reply.producer_epoch) == (0, 0) and reply.producer_id >= 0


@pytest.mark.parametrize("client", ADMIN_CLIENTS)
def test_captured_create_and_delete_topics_are_answered_by_the_controller(cluster, client):
    (create,) = [c for c in CAPTURED if c.id == f"rec/{client}_CREATE_TOPICS_v{c.api_version}"]
    (delete,) = [c for c in CAPTURED if c.id == f"rec/{client}_DELETE_TOPICS_v{c.api_version}"]
    created = replay(cluster, create)
    assert [(t.name, t.error_code) for t in created.topics] == [("newtopic", 0)]
    assert [p.partition for p in cluster.state(["newtopic"]).partitions] == [0, 1]
    deleted = replay(cluster, delete)
    assert [(t.name, t.error_code) for t in deleted.responses] == [("newtopic", 0)]
    wait_until(lambda: zk_call(cluster.zk_connect, lambda zk: zk.exists("/brokers/topics/newtopic")) is None, 15,
               "the deletion to complete before the next client creates newtopic again")


def test_every_advertised_version_of_the_data_plane_apis_decodes(cluster):
    with RawConnection(port_for(cluster, ApiKey.PRODUCE)) as connection:
        for version in range(4):
            reply = connection.request(ApiVersionsRequest(client_software_name="oracle",
                                                          client_software_version="1"), version)
            assert reply.error_code == 0
        for version in range(1, 9):
            reply = connection.request(metadata_request(["t1"]), version)
            assert [t.name for t in reply.topics] == ["t1"] and len(reply.brokers) == 3
        for version in range(3, 9):
            start = latest_offset(connection, "t1")
            reply = connection.request(produce_request("t1", 0, record_batch([b"v%d" % version])), version)
            answer = reply.responses[0].partition_responses[0]
            assert (answer.error_code, answer.base_offset) == (0, start)
        end = latest_offset(connection, "t1")
        for version in range(4, 12):
            reply = connection.request(fetch_request("t1", 0, end - 6), version)
            answer = reply.responses[0].partitions[0]
            assert answer.error_code == 0 and answer.high_watermark == end
            assert [value for offset, value in read_records(answer.records) if offset >= end - 6] == [
                b"v%d" % v for v in range(3, 9)]
        for version in range(1, 6):
            earliest = connection.request(list_offsets_request("t1", 0, EARLIEST), version).topics[0].partitions[0]
            latest = connection.request(list_offsets_request("t1", 0, LATEST), version).topics[0].partitions[0]
            assert (earliest.error_code, earliest.offset, latest.error_code, latest.offset) == (0, 0, 0, end)


def test_records_written_by_a_real_producer_decode_from_a_raw_fetch(cluster):
    create_topic(cluster, "oracle-records", 1)
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "compression.type": "gzip", "linger.ms": 20})
    values = [b"real %d" % i for i in range(50)]
    for value in values:
        producer.produce("oracle-records", value=value, key=b"k", partition=0)
    assert producer.flush(30) == 0
    port = cluster.spec.broker(leader_of(cluster, "oracle-records")).client_port
    with RawConnection(port) as connection:
        reply = connection.request(fetch_request("oracle-records", 0, 0), 11)
    answer = reply.responses[0].partitions[0]
    assert answer.error_code == 0 and answer.high_watermark == 50
    assert read_records(answer.records) == list(enumerate(values))
