"""A partition log read whole batches at a time, from one offset to another: how a coordinator replays its
``__consumer_offsets`` or ``__transaction_state`` partition when it becomes the leader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from broker.log.record_batch import HEADER_SIZE, parse_header


class _Region(Protocol):
    def read_bytes(self) -> bytes: ...


class ReadableLog(Protocol):
    """The file-backed Log, or the tests' in-memory one (both implement the replica_log port)."""

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None) -> _Region: ...


def read_batches(log: ReadableLog, start_offset: int, end_offset: int,
                 max_bytes: int) -> Iterator[tuple[bytes, int]]:
    """(batches, from_offset): the whole v2 batches holding offsets in [start_offset, end_offset), one read of up to
    ``max_bytes`` (at least one batch) at a time. A read returns the batch holding ``from_offset``, which may begin
    below it, so the records below ``from_offset`` are ones an earlier chunk already gave. Stops at an empty read or
    one that ends no further than where it began."""
    position = start_offset
    while position < end_offset:
        data = log.read(position, max_bytes, max_offset=end_offset).read_bytes()
        if not data:
            return
        yield data, position
        last, at = position, 0
        while at + HEADER_SIZE <= len(data):
            header = parse_header(data, at)
            last = max(last, header.next_offset)
            at += header.size
        if last <= position:
            return
        position = last
