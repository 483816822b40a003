"""Protocol errors: exceptions where the connection cannot go on, values where the server decides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kio.schema.errors import ErrorCode

from .messages import RequestHeader


class ProtocolError(Exception):
    """The byte stream can no longer be trusted: close the connection."""


class InvalidFrameSize(ProtocolError):
    """A size prefix that is negative or above socket.request.max.bytes (Kafka's InvalidReceiveException)."""

    def __init__(self, size: int, max_bytes: int) -> None:
        super().__init__(
            f"invalid request size {size} (socket.request.max.bytes={max_bytes}): closing the connection;"
            " raise socket.request.max.bytes if a client really sends requests this large"
        )
        self.size = size
        self.max_bytes = max_bytes


# The values below are returned, not raised, by codec.decode_request. Apache Kafka answers only one of
# them (UnsupportedVersion of ApiVersions, see api_versions.py); for all others it closes the connection,
# since a client never sends a version the broker did not advertise.


@dataclass(frozen=True, slots=True)
class UnknownApiKey:
    header: RequestHeader
    error_code: ClassVar[ErrorCode] = ErrorCode.invalid_request

    @property
    def reason(self) -> str:
        return f"api_key {self.header.api_key} is not served by this broker"


@dataclass(frozen=True, slots=True)
class UnsupportedVersion:
    header: RequestHeader
    reason: str
    error_code: ClassVar[ErrorCode] = ErrorCode.unsupported_version


@dataclass(frozen=True, slots=True)
class MalformedRequest:
    """The frame does not parse as the request it claims to be; header is None if even that is unreadable."""

    header: RequestHeader | None
    reason: str
    error_code: ClassVar[ErrorCode] = ErrorCode.invalid_request


RequestError = UnknownApiKey | UnsupportedVersion | MalformedRequest
