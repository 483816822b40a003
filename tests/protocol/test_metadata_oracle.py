"""kio-built Metadata responses, read back by kafka-python 3.0.12 as an independent client-side decoder."""

from datetime import timedelta
from uuid import UUID

import pytest
from kafka.protocol.metadata.metadata import MetadataResponse as OracleMetadataResponse
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from broker.clientplane.protocol.build import build as _build
from broker.clientplane.protocol.codec import decode_request, encode_response
from broker.clientplane.protocol.framing import FrameDecoder, frame_response
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey

from .captured import CAPTURED

INT32_MIN = -(2**31)  # "authorized operations not requested"


def _metadata_response(version: int):
    module = load_payload_module(ApiKey.METADATA, version, EntityType.response)
    partition = _build(
        module.MetadataResponsePartition,
        error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epoch=4,
        replica_nodes=(1, 2, 3), isr_nodes=(1, 2), offline_replicas=(3,),
    )  # fmt: skip
    topic = _build(
        module.MetadataResponseTopic,
        error_code=ErrorCode.none, name="t1", topic_id=UUID(int=0), is_internal=False,
        partitions=(partition,), topic_authorized_operations=INT32_MIN,
    )  # fmt: skip
    missing = _build(
        module.MetadataResponseTopic,
        error_code=ErrorCode.unknown_topic_or_partition, name="absent", is_internal=False, partitions=(),
        topic_authorized_operations=INT32_MIN,
    )  # fmt: skip
    brokers = tuple(
        _build(module.MetadataResponseBroker, node_id=node, host="127.0.0.1", port=9090 + node, rack=None)
        for node in (1, 2, 3)
    )
    return _build(
        module.MetadataResponse,
        throttle_time=timedelta(0), brokers=brokers, cluster_id="kafkasim", controller_id=2,
        topics=(topic, missing), cluster_authorized_operations=INT32_MIN,
    )  # fmt: skip


@pytest.mark.parametrize("version", range(1, 9))
def test_kafka_python_reads_our_metadata_response(version):
    encoded = encode_response(ApiKey.METADATA, version, 77, _metadata_response(version))
    reply = OracleMetadataResponse.decode(encoded, version=version, header=True)
    assert reply.encode(header=True) == encoded  # it consumed exactly what we wrote
    assert reply.header.correlation_id == 77
    assert [(b.node_id, b.host, b.port) for b in reply.brokers] == [
        (n, "127.0.0.1", 9090 + n) for n in (1, 2, 3)
    ]
    assert reply.controller_id == 2
    assert [(t.error_code, t.name) for t in reply.topics] == [(0, "t1"), (3, "absent")]
    partition = reply.topics[0].partitions[0]
    assert (partition.partition_index, partition.leader_id) == (0, 1)
    assert (list(partition.replica_nodes), list(partition.isr_nodes)) == ([1, 2, 3], [1, 2])
    if version >= 2:
        assert reply.cluster_id == "kafkasim"
    if version >= 5:
        assert list(partition.offline_replicas) == [3]
    if version >= 7:
        assert partition.leader_epoch == 4


def test_captured_metadata_request_round_trip_through_framing_and_codec():
    frame = next(c.frame for c in CAPTURED if c.id == "rec/rdkafka_METADATA_v8")
    (received,) = FrameDecoder().feed(frame_response(frame))
    request = decode_request(received)
    assert isinstance(request, Request)
    assert [t.name for t in request.body.topics] == ["t1"]
    wire = frame_response(
        encode_response(ApiKey.METADATA, 8, request.header.correlation_id, _metadata_response(8))
    )
    reply = OracleMetadataResponse.decode(wire, version=8, header=True, framed=True)
    assert reply.header.correlation_id == request.header.correlation_id
