"""Plain-data values the codec hands to the server: a request header and a decoded request."""

from __future__ import annotations

from dataclasses import dataclass

from kio.static.protocol import RequestPayload


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The request header fields every version shares (client_id is None when absent or unreadable)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Request:
    """A fully decoded request: header plus the kio request object of exactly that version."""

    header: RequestHeader
    body: RequestPayload
