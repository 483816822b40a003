"""Request frames to kio request objects, kio response objects to response bytes (without size prefix)."""

from __future__ import annotations

import io

import kio.schema.api_versions.v0.response as api_versions_v0
import kio.schema.request_header.v1.header as request_header_v1
import kio.schema.request_header.v2.header as request_header_v2
import kio.schema.response_header.v0.header as response_header_v0
import kio.schema.response_header.v1.header as response_header_v1
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.serial.readers import read_int16, read_int32, read_nullable_legacy_string
from kio.static.protocol import ResponsePayload

from .bounds import check_array_lengths
from .errors import MalformedRequest, RequestError, UnknownApiKey, UnsupportedVersion
from .messages import Request, RequestHeader
from .versions import SUPPORTED_VERSIONS, ApiKey, api_spec, is_supported

_REQUEST_HEADERS = {1: request_header_v1.RequestHeader, 2: request_header_v2.RequestHeader}
_RESPONSE_HEADERS = {0: response_header_v0.ResponseHeader, 1: response_header_v1.ResponseHeader}
_API_VERSIONS_V0_RESPONSE = api_versions_v0.ApiVersionsResponse

# What kio raises on bytes that do not match the schema (found by fuzzing real frames): its own
# DecodeError family; ValueError for over-long varints, booleans other than 0/1, array lengths below
# -1, durations beyond Python's timedelta, and bounds.ArrayTooLong; KeyError for an unknown tagged field.
_KIO_DECODE_ERRORS = (SerialError, ValueError, KeyError)

# api_key int16 + api_version int16 + correlation_id int32: the part of the header every version has.
_FIXED_HEADER_BYTES = 8


def decode_request(frame: bytes) -> Request | RequestError:
    """Decode one request frame (the bytes after the size prefix).

    Never raises on bad input: returns a Request, or UnknownApiKey / UnsupportedVersion /
    MalformedRequest carrying as much of the header as could be read.
    """
    if len(frame) < _FIXED_HEADER_BYTES:
        return MalformedRequest(None, f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, _ = read_int16(frame, 0)
    api_version, _ = read_int16(frame, 2)
    correlation_id, _ = read_int32(frame, 4)
    header = RequestHeader(api_key, api_version, correlation_id, _peek_client_id(frame))

    if api_key not in SUPPORTED_VERSIONS:
        return UnknownApiKey(header)
    spec = api_spec(api_key, api_version)
    if spec is None:
        supported = SUPPORTED_VERSIONS[api_key]
        if is_supported(api_key, api_version):
            reason = (
                f"{ApiKey(api_key).name} v{api_version} is advertised for old librdkafka but not"
                f" implemented (v{supported.implemented_from}+ only)"
            )
        else:
            reason = (
                f"{ApiKey(api_key).name} v{api_version} is outside the advertised"
                f" {supported.min_version}-{supported.max_version}"
            )
        return UnsupportedVersion(header, reason)

    header_class = _REQUEST_HEADERS[spec.request_header_version]
    try:
        check_array_lengths(spec.request_class, frame, check_array_lengths(header_class, frame, 0))
        _, header_size = entity_reader(header_class)(frame, 0)
        body, body_size = entity_reader(spec.request_class)(frame, header_size)
    except _KIO_DECODE_ERRORS as error:
        return MalformedRequest(header, f"{spec.request_class.__name__} v{api_version}: {_describe(error)}")
    if header_size + body_size != len(frame):
        return MalformedRequest(header, _trailing(spec.request_class, len(frame) - header_size - body_size))
    return Request(header, body)


def encode_response(api_key: int, api_version: int, correlation_id: int, response: ResponsePayload) -> bytes:
    """Encode header + body for a request of (api_key, api_version); prefix with framing.frame_response.

    The response must be the kio class of exactly that version, with one exception: the v0
    ApiVersionsResponse that answers an ApiVersions version the broker does not support.
    """
    spec = api_spec(api_key, api_version)
    expected = None if spec is None else spec.response_class
    is_api_versions_downgrade = (
        spec is None and api_key == ApiKey.API_VERSIONS and type(response) is _API_VERSIONS_V0_RESPONSE
    )
    if type(response) is not expected and not is_api_versions_downgrade:
        raise TypeError(
            f"{type(response).__module__}.{type(response).__name__} cannot answer api_key {api_key}"
            f" v{api_version}; expected {expected}"
        )
    header_version = 0 if spec is None else spec.response_header_version
    header_class = _RESPONSE_HEADERS[header_version]
    buffer = io.BytesIO()
    entity_writer(header_class)(buffer, header_class(correlation_id=correlation_id))
    entity_writer(type(response))(buffer, response)
    return buffer.getvalue()


def _peek_client_id(frame: bytes) -> str | None:
    # Request headers v1 and v2 both carry client_id as a classic int16-length string right after
    # the fixed part (v2 keeps it non-compact on purpose), so it can be read before the version is known.
    try:
        client_id, _ = read_nullable_legacy_string(frame, _FIXED_HEADER_BYTES)
    except _KIO_DECODE_ERRORS:
        return None
    return client_id


def _trailing(request_class: type, count: int) -> str:
    return f"{count} trailing bytes after {request_class.__name__} v{request_class.__version__}"


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"
