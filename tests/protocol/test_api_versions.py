import struct

import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata.api_versions import ApiVersionsResponse as OracleApiVersionsResponse
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.errors import ErrorCode

from broker.clientplane.protocol.api_versions import handle_api_versions, unsupported_version_response
from broker.clientplane.protocol.codec import decode_request, encode_response
from broker.clientplane.protocol.errors import UnsupportedVersion
from broker.clientplane.protocol.messages import Request, RequestHeader
from broker.clientplane.protocol.versions import SUPPORTED_VERSIONS, ApiKey

from .captured import CAPTURED

MATRIX = [(key, r.min_version, r.max_version) for key, r in SUPPORTED_VERSIONS.items()]


def _captured(frame_id: str) -> bytes:
    return next(c.frame for c in CAPTURED if c.id == frame_id)


def _answer(frame: bytes) -> tuple[RequestHeader, bytes]:
    """What the server does with an ApiVersions frame: decode, handle, encode."""
    decoded = decode_request(frame)
    if isinstance(decoded, Request):
        response = handle_api_versions(decoded.header, decoded.body)
    else:
        assert isinstance(decoded, UnsupportedVersion), decoded
        response = handle_api_versions(decoded.header)
    header = decoded.header
    return header, encode_response(ApiKey.API_VERSIONS, header.api_version, header.correlation_id, response)


def _oracle(encoded: bytes, version: int):
    """kafka-python 3.0.12 decodes the bytes the way a client would; it also re-encodes them identically."""
    decoded = OracleApiVersionsResponse.decode(encoded, version=version, header=True)
    assert decoded.encode(header=True) == encoded
    return decoded


def _triples(oracle_response) -> list[tuple[int, int, int]]:
    return [(a.api_key, a.min_version, a.max_version) for a in oracle_response.api_keys]


def _header_frame(version: int, body: bytes) -> bytes:
    tagged_fields = b"\x00" if version >= 3 else b""  # request header v2 from ApiVersions v3 on
    return struct.pack(">hhih", ApiKey.API_VERSIONS, version, 42, 3) + b"cli" + tagged_fields + body


def test_aiokafka_v0_request_gets_the_full_matrix_in_a_v0_body():
    header, encoded = _answer(_captured("rec/aiokafka_API_VERSIONS_v0"))
    reply = _oracle(encoded, 0)
    assert reply.header.correlation_id == header.correlation_id
    assert reply.error_code == 0
    assert _triples(reply) == MATRIX


@pytest.mark.parametrize("frame_id", ["rec/rdkafka_API_VERSIONS_v3", "rec/kafka_API_VERSIONS_v3"])
def test_v3_request_gets_the_full_matrix_in_a_flexible_body_behind_a_v0_header(frame_id):
    header, encoded = _answer(_captured(frame_id))
    # Header v0: correlation_id immediately followed by error_code, no tagged-field byte in between.
    assert encoded[:6] == struct.pack(">ih", header.correlation_id, 0)
    assert encoded[6] == len(MATRIX) + 1  # compact array length
    reply = _oracle(encoded, 3)
    assert reply.error_code == 0
    assert reply.throttle_time_ms == 0
    assert _triples(reply) == MATRIX


def test_kafka_python_v4_request_gets_unsupported_version_in_a_v0_body():
    header, encoded = _answer(_captured("rec/kafka_API_VERSIONS_v4"))
    # Byte layout from wire-compat.md section 8: corr | 0023 | 00000001 | 0012 0000 0003.
    assert encoded == struct.pack(">ihihhh", header.correlation_id, 35, 1, 18, 0, 3)
    reply = _oracle(encoded, 4)  # kafka-python falls back to the v0 body on a non-zero error
    assert reply.error_code == ErrorCode.unsupported_version
    assert _triples(reply) == [(18, 0, 3)]


@pytest.mark.parametrize("version", [4, 5, 127, 32767, -1])
def test_unsupported_version_is_answered_from_the_header_alone_even_if_the_body_is_garbage(version):
    header, encoded = _answer(_header_frame(version, b"\xff\xfe\x00garbage"))
    assert header.correlation_id == 42
    assert encoded == struct.pack(">ihihhh", 42, 35, 1, 18, 0, 3)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_supported_v0_to_v2_requests_are_answered_in_their_own_version(version):
    _, encoded = _answer(_header_frame(version, b""))
    reply = _oracle(encoded, version)
    assert reply.header.correlation_id == 42
    assert reply.error_code == 0
    assert _triples(reply) == MATRIX


def test_a_supported_version_is_never_answered_with_unsupported_version():
    # kafka-python 3.0.12 answers error 35 on v0 with ~1,700 ApiVersions v0 requests per second.
    for version in range(SUPPORTED_VERSIONS[ApiKey.API_VERSIONS].max_version + 1):
        _, encoded = _answer(_header_frame(version, b"\x02a\x021\x00" if version >= 3 else b""))
        assert struct.unpack_from(">h", encoded, 4)[0] == 0, version


def test_unsupported_version_response_is_a_v0_body():
    response = unsupported_version_response()
    assert response.__version__ == 0
    assert response.error_code == ErrorCode.unsupported_version


def test_throttle_time_is_reported_from_v1():
    header = RequestHeader(ApiKey.API_VERSIONS, 3, 1, "c")
    body = ApiVersionsRequestV3(client_software_name="a", client_software_version="1")
    response = handle_api_versions(header, body, throttle_time_ms=250)
    assert _oracle(encode_response(18, 3, 1, response), 3).throttle_time_ms == 250


@pytest.mark.parametrize(
    ("name", "version"), [("", "1.0"), ("kafka python", "1.0"), ("-leading", "1.0"), ("ok", "1.0+local")]
)
def test_v3_with_client_software_outside_kip_511_pattern_gets_invalid_request(name, version):
    header = RequestHeader(ApiKey.API_VERSIONS, 3, 9, "c")
    body = ApiVersionsRequestV3(client_software_name=name, client_software_version=version)
    encoded = encode_response(18, 3, 9, handle_api_versions(header, body))
    # Kafka answers in the request's version. kafka-python reads any non-zero ApiVersions error as a
    # v0 body (only 35 is sent that way), so decode the v3 body with its generic message decoder.
    reply = ApiMessage.decode.__func__(OracleApiVersionsResponse, encoded[4:], version=3)
    assert reply.error_code == ErrorCode.invalid_request
    assert reply.api_keys == []


def test_supported_version_without_its_body_is_a_caller_error():
    with pytest.raises(ValueError, match="pass its decoded body"):
        handle_api_versions(RequestHeader(ApiKey.API_VERSIONS, 3, 1, None))


def test_other_api_keys_are_refused():
    with pytest.raises(ValueError):
        handle_api_versions(RequestHeader(ApiKey.METADATA, 8, 1, None))


def test_the_v0_downgrade_body_is_refused_for_a_supported_version():
    with pytest.raises(TypeError):
        encode_response(ApiKey.API_VERSIONS, 3, 1, unsupported_version_response())
