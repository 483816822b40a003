"""Responses whose record sets stay in the segment files until the socket sends them (Kafka's
FileRecords + sendfile). kio encodes the response with a random placeholder in each records field;
the encoded bytes are then cut at the placeholders, and each gap is filled by a file region."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

from kio.static.protocol import ResponsePayload

from broker.log.file_records import FileRegion

from .codec import encode_response

PLACEHOLDER_BYTES = 16
_LENGTH = struct.Struct(">i")

Part = bytes | FileRegion


@dataclass
class ZeroCopyResponse:
    """A response plus the file regions its placeholders stand for."""

    response: ResponsePayload
    regions: dict[bytes, FileRegion] = field(default_factory=dict)

    def placeholder(self, region: FileRegion) -> bytes:
        token = os.urandom(PLACEHOLDER_BYTES)
        self.regions[token] = region
        return token


def encode_zero_copy(api_key: int, api_version: int, correlation_id: int, response: ZeroCopyResponse) -> list[Part]:
    """Header and body as a list of byte strings and file regions, in wire order (no size prefix)."""
    encoded = encode_response(api_key, api_version, correlation_id, response.response)
    found = sorted((encoded.index(token), token) for token in response.regions)
    parts: list[Part] = []
    position = 0
    for at, token in found:
        # records are int32-length-prefixed bytes in every non-flexible version we answer
        if encoded[at - 4 : at] != _LENGTH.pack(PLACEHOLDER_BYTES):
            raise ValueError("a records placeholder is not length-prefixed as records are")
        region = response.regions[token]
        parts.append(encoded[position : at - 4] + _LENGTH.pack(region.size))
        parts.append(region)
        position = at + PLACEHOLDER_BYTES
    parts.append(encoded[position:])
    return parts


def parts_size(parts: list[Part]) -> int:
    return sum(part.size if isinstance(part, FileRegion) else len(part) for part in parts)


def materialize(parts: list[Part]) -> bytes:
    """The same bytes the socket would carry, read into memory (tests, and transports without sendfile)."""
    return b"".join(part.read_bytes() if isinstance(part, FileRegion) else part for part in parts)
