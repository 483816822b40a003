"""Segment file access without loading data: walk batch headers, and hand out regions for sendfile."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.log.record_batch import CURRENT_MAGIC, HEADER_SIZE, BatchHeader, MalformedBatch, parse_header

SCAN_CHUNK_BYTES = 8192


@dataclass(frozen=True, slots=True)
class FileRegion:
    """Whole, validated batches at [position, position + size) of a segment file.

    The network layer sends it with ``os.sendfile(socket, fd, position, size)``. ``fd`` belongs to the
    segment and stays open until the segment is closed or physically deleted (retention and
    truncation delete ``file.delete.delay.ms`` later, as Kafka does, so in-flight sends finish).
    """

    path: Path
    fd: int
    position: int
    size: int

    def read_bytes(self) -> bytes:
        chunks, position, left = [], self.position, self.size
        while left > 0:
            chunk = os.pread(self.fd, left, position)
            if not chunk:
                raise EOFError(f"{self.path} ends before byte {position + left}")
            chunks.append(chunk)
            position += len(chunk)
            left -= len(chunk)
        return b"".join(chunks)


def scan_batch_headers(
    fd: int, start: int, end: int, *, chunk_size: int = SCAN_CHUNK_BYTES
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch in [start, end) of an already validated file.

    Only framing is checked (magic, size, fits before ``end``), not the CRC; raises MalformedBatch
    when the framing is broken, e.g. on a torn tail.
    """
    position = start
    buffer, buffer_start = b"", start
    while position < end:
        if position + HEADER_SIZE > buffer_start + len(buffer):
            buffer = os.pread(fd, min(max(chunk_size, HEADER_SIZE), end - position), position)
            buffer_start = position
            if len(buffer) < HEADER_SIZE:
                raise MalformedBatch(
                    ErrorCode.corrupt_message, f"incomplete batch header at position {position}", torn=True
                )
        header = parse_header(buffer, position - buffer_start)
        if header.magic != CURRENT_MAGIC or header.size < HEADER_SIZE:
            raise MalformedBatch(ErrorCode.corrupt_message, f"no valid batch header at position {position}")
        if position + header.size > end:
            raise MalformedBatch(
                ErrorCode.corrupt_message,
                f"batch at position {position} declares {header.size} bytes, beyond byte {end}",
                torn=True,
            )
        yield position, header
        position += header.size
