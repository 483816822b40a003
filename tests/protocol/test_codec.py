import io
import struct
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v5.response import MetadataResponse as MetadataResponseV5
from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeaderV1
from kio.serial import entity_writer

from broker.clientplane.protocol.codec import decode_request, encode_response
from broker.clientplane.protocol.errors import MalformedRequest, UnknownApiKey, UnsupportedVersion
from broker.clientplane.protocol.messages import Request, RequestHeader
from broker.clientplane.protocol.versions import ApiKey, api_spec, is_implemented, is_supported

from .captured import CAPTURED


def _frame(
    api_key: int, api_version: int, body: bytes, correlation_id: int = 7, client_id: str = "t"
) -> bytes:
    header = io.BytesIO()
    entity_writer(KioRequestHeaderV1)(
        header,
        KioRequestHeaderV1(
            request_api_key=api_key,
            request_api_version=api_version,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    return header.getvalue() + body


def _reencode(request: Request) -> bytes:
    spec = api_spec(request.header.api_key, request.header.api_version)
    header_class = spec.request_class.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_class)(
        buffer,
        header_class(
            request_api_key=request.header.api_key,
            request_api_version=request.header.api_version,
            correlation_id=request.header.correlation_id,
            client_id=request.header.client_id,
        ),
    )
    entity_writer(type(request.body))(buffer, request.body)
    return buffer.getvalue()


IN_RANGE = [c for c in CAPTURED if is_implemented(c.api_key, c.api_version)]
OUT_OF_RANGE = [c for c in CAPTURED if not is_supported(c.api_key, c.api_version)]
METADATA_V8 = next(c.frame for c in CAPTURED if c.id == "rec/kafka_METADATA_v8")


def test_fixtures_cover_the_recorded_matrix():
    assert len(CAPTURED) == 86
    assert len([c for c in IN_RANGE if c.matrix == "rec"]) == 43  # all but kafka-python's ApiVersions v4
    # ElectLeaders (43) has no recorded frame: tests/client/test_leader_election.py speaks it with real clients;
    # nor have AlterReplicaLogDirs, DescribeLogDirs, DeleteGroups, OffsetDelete, DescribeCluster (34, 35, 42, 47,
    # 60): tests/client/test_group_admin.py and test_cluster_admin.py do; CreatePartitions (37):
    # tests/client/test_create_partitions.py; nor AlterConfigs, IncrementalAlterConfigs (33, 44):
    # tests/client/test_topic_configs.py does; nor DeleteRecords (21): tests/client/test_delete_records.py; nor
    # Alter/ListPartitionReassignments (45, 46): tests/client/test_reassignment.py does; nor WriteTxnMarkers (27):
    # tests/client/test_transactions_log.py does; nor TxnOffsetCommit (28): tests/groups/test_txn_offsets_cluster.py;
    # nor AddPartitionsToTxn, AddOffsetsToTxn, EndTxn (24, 25, 26): tests/transaction/test_transactions_cluster.py
    # speaks them with confluent-kafka's transactional producer
    not_recorded = (15, 16, 21, 23, 24, 25, 26, 27, 28, 32, 33, 34, 35, 37, 42, 43, 44, 45, 46, 47, 60)
    assert {c.api_key for c in IN_RANGE} >= {k for k in ApiKey if k not in not_recorded}


@pytest.mark.parametrize("captured", IN_RANGE, ids=lambda c: c.id)
def test_captured_frame_in_the_advertised_range_decodes_completely(captured):
    request = decode_request(captured.frame)
    assert isinstance(request, Request), request
    assert (request.header.api_key, request.header.api_version) == (captured.api_key, captured.api_version)
    assert type(request.body) is api_spec(captured.api_key, captured.api_version).request_class
    assert request.header.client_id
    # Nothing left over and nothing lost: kio writes the very same bytes back.
    assert _reencode(request) == captured.frame


@pytest.mark.parametrize("captured", OUT_OF_RANGE, ids=lambda c: c.id)
def test_captured_frame_outside_the_advertised_range_is_an_unsupported_version_value(captured):
    result = decode_request(captured.frame)
    assert isinstance(result, UnsupportedVersion)
    assert (result.header.api_key, result.header.api_version) == (captured.api_key, captured.api_version)
    assert result.error_code == ErrorCode.unsupported_version
    assert "outside the advertised" in result.reason
    assert result.header.client_id  # read from the header even though the body is never decoded


def test_correlation_id_and_client_id_come_from_the_header():
    request = decode_request(METADATA_V8)
    assert request.header == RequestHeader(3, 8, 3, "kafka-python-producer-1")


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_below_v3_is_unsupported_not_a_crash(version):
    result = decode_request(_frame(ApiKey.PRODUCE, version, b"\x00\x01\x00\x00\x03\xe8\x00\x00\x00\x00"))
    assert isinstance(result, UnsupportedVersion)
    assert "not implemented" in result.reason
    assert result.header.correlation_id == 7


@pytest.mark.parametrize("api_key", [17, 36, 68, 999, -1])
def test_api_key_the_broker_does_not_serve_is_an_unknown_api_key_value(api_key):
    result = decode_request(_frame(api_key, 0, b""))
    assert isinstance(result, UnknownApiKey)
    assert result.header == RequestHeader(api_key, 0, 7, "t")
    assert result.error_code == ErrorCode.invalid_request


@pytest.mark.parametrize("length", range(8))
def test_frame_shorter_than_the_fixed_header_is_malformed_without_header(length):
    result = decode_request(METADATA_V8[:length])
    assert isinstance(result, MalformedRequest)
    assert result.header is None


def test_trailing_bytes_are_malformed():
    result = decode_request(METADATA_V8 + b"\x00")
    assert isinstance(result, MalformedRequest)
    assert "1 trailing bytes" in result.reason
    assert result.header.correlation_id == 3


@pytest.mark.parametrize("cut", [1, 2, 5])
def test_truncated_body_is_malformed(cut):
    result = decode_request(METADATA_V8[:-cut])
    assert isinstance(result, MalformedRequest)
    assert result.error_code == ErrorCode.invalid_request


def test_truncated_client_id_is_malformed_for_a_supported_version():
    result = decode_request(struct.pack(">hhih", 3, 8, 1, 50) + b"abc")
    assert isinstance(result, MalformedRequest)
    assert result.header == RequestHeader(3, 8, 1, None)


def test_negative_string_length_is_malformed():
    # Metadata v4 body: topics [ name ], allow_auto_topic_creation; the name has length -5.
    result = decode_request(_frame(ApiKey.METADATA, 4, struct.pack(">ih", 1, -5) + b"\x01"))
    assert isinstance(result, MalformedRequest)


def test_array_count_larger_than_the_frame_is_malformed_before_kio_reserves_memory():
    result = decode_request(_frame(ApiKey.METADATA, 4, struct.pack(">i", 2**31 - 1) + b"\x00\x01a\x01"))
    assert isinstance(result, MalformedRequest)
    assert "ArrayTooLong" in result.reason


def test_nested_array_count_is_checked_too():
    # Produce v3: transactional_id, acks, timeout, topics [ name, partitions [ index, records ] ].
    body = struct.pack(">hhii", -1, 1, 1000, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 2**31 - 1)
    result = decode_request(_frame(ApiKey.PRODUCE, 3, body + b"\x00" * 8))
    assert isinstance(result, MalformedRequest)
    assert "ArrayTooLong" in result.reason


def _empty_metadata_v5() -> MetadataResponseV5:
    return MetadataResponseV5(
        throttle_time=timedelta(0), brokers=(), cluster_id=None, controller_id=0, topics=()
    )


def test_encode_response_writes_header_v0_then_the_body():
    response = _empty_metadata_v5()
    encoded = encode_response(ApiKey.METADATA, 5, 0x01020304, response)
    assert encoded[:4] == b"\x01\x02\x03\x04"
    assert len(encoded) == 4 + 4 + 4 + 2 + 4 + 4


def test_encode_response_refuses_a_body_of_another_version():
    response = _empty_metadata_v5()
    with pytest.raises(TypeError, match="cannot answer api_key 3 v8"):
        encode_response(ApiKey.METADATA, 8, 1, response)
    with pytest.raises(TypeError):
        encode_response(ApiKey.PRODUCE, 1, 1, response)


def _create_topics_v4(assignments_count: int, configs_count: int = 0) -> bytes:
    # CreateTopics v4: topics [ name, num_partitions, replication_factor, assignments [..], configs [..] ],
    # timeout_ms, validate_only
    topic = struct.pack(">h", 1) + b"t" + struct.pack(">ihii", -1, -1, assignments_count, configs_count)
    return _frame(ApiKey.CREATE_TOPICS, 4, struct.pack(">i", 1) + topic + struct.pack(">i?", 1000, False))


def test_a_null_count_for_an_array_the_schema_does_not_let_be_null_is_malformed():
    # Kafka's generated reader refuses it ("non-nullable field assignments was serialized as null"), and the
    # broker closes the connection; kio alone would hand the handler None (it raised TypeError there)
    assert isinstance(decode_request(_create_topics_v4(0)), Request)
    for assignments, configs in ((-1, 0), (0, -1)):
        result = decode_request(_create_topics_v4(assignments, configs))
        assert isinstance(result, MalformedRequest)
        assert "UnexpectedNullArray" in result.reason


def test_a_null_count_is_taken_where_the_schema_lets_the_array_be_null():
    # Metadata v4's topics is nullable: null asks for every topic
    result = decode_request(_frame(ApiKey.METADATA, 4, struct.pack(">i", -1) + b"\x01"))
    assert isinstance(result, Request)
    assert result.body.topics is None
