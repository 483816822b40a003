"""ApiVersions (api_key 18): the first request on every connection, and the classic compatibility trap."""

from __future__ import annotations

import re
from datetime import timedelta

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32Timedelta
from kio.static.protocol import RequestPayload, ResponsePayload

from .messages import RequestHeader
from .versions import SUPPORTED_VERSIONS, ApiKey, is_implemented

# KIP-511: Kafka answers INVALID_REQUEST to client software names/versions outside this pattern.
_CLIENT_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def handle_api_versions(
    header: RequestHeader, request: RequestPayload | None = None, throttle_time_ms: int = 0
) -> ResponsePayload:
    """The kio ApiVersionsResponse to send; encode it with codec.encode_response(18, header.api_version, ...).

    request is the decoded body, or None when the version is unsupported (its body need not decode:
    the answer depends on the header alone).
    """
    if header.api_key != ApiKey.API_VERSIONS:
        raise ValueError(f"not an ApiVersions request: api_key {header.api_key}")
    if not is_implemented(ApiKey.API_VERSIONS, header.api_version):
        return unsupported_version_response()
    if request is None:
        raise ValueError(f"ApiVersions v{header.api_version} is supported: pass its decoded body")
    if header.api_version >= 3 and not _valid_client_software(request):
        return _response(header.api_version, ErrorCode.invalid_request, (), throttle_time_ms)
    matrix = tuple((r.api_key, r.min_version, r.max_version) for r in SUPPORTED_VERSIONS.values())
    return _response(header.api_version, ErrorCode.none, matrix, throttle_time_ms)


def unsupported_version_response() -> ResponsePayload:
    """UNSUPPORTED_VERSION in a v0 body listing only ApiVersions' own range.

    A client that sent a version above ours can always parse a v0 body (Kafka <= 2.3 did the same):
    librdkafka then retries with v0 on the same connection, kafka-python with min(4, our max).
    Closing the connection instead makes librdkafka reconnect every 50 ms forever. v0 is always
    supported, so a v0 request never gets here: kafka-python 3 answers error 35 on v0 with a tight
    loop of v0 requests.
    """
    own = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
    return _response(0, ErrorCode.unsupported_version, ((own.api_key, own.min_version, own.max_version),), 0)


def _response(
    version: int, error_code: ErrorCode, api_keys: tuple[tuple[int, int, int], ...], throttle_time_ms: int
) -> ResponsePayload:
    module = load_payload_module(ApiKey.API_VERSIONS, version, EntityType.response)
    fields: dict[str, object] = {
        "error_code": error_code,
        "api_keys": tuple(
            module.ApiVersion(api_key=i16(int(key)), min_version=i16(low), max_version=i16(high))
            for key, low, high in api_keys
        ),
    }
    if version >= 1:
        fields["throttle_time"] = i32Timedelta.parse(timedelta(milliseconds=throttle_time_ms))
    return module.ApiVersionsResponse(**fields)


def _valid_client_software(request: RequestPayload) -> bool:
    return all(
        _CLIENT_SOFTWARE.fullmatch(value)
        for value in (request.client_software_name, request.client_software_version)
    )
