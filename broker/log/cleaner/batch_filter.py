"""Rewriting one record batch v2 without the records the cleaner drops (Kafka's MemoryRecords.filterTo). Pure.

A batch keeping every record is copied byte for byte. Otherwise a new batch keeps the header's base offset,
lastOffsetDelta (so offsets, the producer's last sequence and the next batch's position do not change), attributes
(codec, timestamp type, transactional flag), producer id, epoch, base sequence and partition leader epoch; its
records keep their offsets and timestamps, re-encoded against the first kept record's timestamp, recompressed with
the batch's codec, and the CRC-32C is computed again. A batch losing every record goes, unless it is the last batch
of its producer id, which stays as an empty header so the producer's sequence survives (Kafka's RETAIN_EMPTY).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

import crc32c

from broker.log.cleaner import codecs
from broker.log.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchHeader,
)
from broker.log.records import read_varint, write_varint

# (offset, key or None, has a value) → keep the record?
KeepRecord = Callable[[int, bytes | None, bool], bool]


class Outcome(Enum):
    COPIED = "copied"        # every record kept: the original bytes
    REWRITTEN = "rewritten"  # some records kept: a new batch
    EMPTIED = "emptied"      # no record kept, header retained for the producer's sequence
    DROPPED = "dropped"      # no record kept, batch gone


@dataclass(frozen=True, slots=True)
class FilteredBatch:
    outcome: Outcome
    data: bytes | None  # the batch to write, None when dropped
    records_read: int
    records_kept: int


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a batch, as stored: its timestamp and offset deltas are against the batch's bases."""

    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: bytes  # the header count and headers, as encoded

    def encode(self, timestamp_delta: int) -> bytes:
        body = bytes((self.attributes,)) + write_varint(timestamp_delta) + write_varint(self.offset_delta) \
            + _bytes_field(self.key) + _bytes_field(self.value) + self.headers
        return write_varint(len(body)) + body


class CodecUnavailable(Exception):
    """The batch's records cannot be read here (its codec is not available, or they expand past
    codecs.MAX_DECOMPRESSED_BATCH_BYTES); the caller keeps the batch as it is."""


def _body(batch: bytes | memoryview, header: BatchHeader) -> bytes:
    """The batch's records, decompressed, bounded. Raises CodecUnavailable."""
    if not codecs.available(header.compression):
        raise CodecUnavailable(f"codec {header.compression} is not available")
    try:
        return codecs.decompress(header.compression, bytes(memoryview(batch)[HEADER_SIZE:header.size]),
                                 codecs.MAX_DECOMPRESSED_BATCH_BYTES)
    except codecs.DecompressedTooLarge as exc:
        raise CodecUnavailable(str(exc)) from None


def records_of(batch: bytes | memoryview, header: BatchHeader) -> list[Record]:
    """Every record of one complete batch (decompressed). Raises CodecUnavailable."""
    body = _body(batch, header)
    records, position = [], 0
    for _ in range(header.records_count):
        length, position = read_varint(body, position)
        end = position + length
        attributes = body[position]
        timestamp_delta, position = read_varint(body, position + 1)
        offset_delta, position = read_varint(body, position)
        key, position = _read_bytes(body, position)
        value, position = _read_bytes(body, position)
        records.append(Record(attributes, timestamp_delta, offset_delta, key, value, body[position:end]))
        position = end
    return records


def keys_of(batch: bytes | memoryview, header: BatchHeader) -> Iterator[tuple[int, bytes | None]]:
    """(offset delta, key) of every record, for the offset map: values and headers are skipped, not parsed.
    Raises CodecUnavailable."""
    body = _body(batch, header)
    position = 0
    for _ in range(header.records_count):
        length, position = read_varint(body, position)
        end = position + length
        _, at = read_varint(body, position + 1)  # timestamp delta
        offset_delta, at = read_varint(body, at)
        key, _ = _read_bytes(body, at)
        yield offset_delta, key
        position = end


def filter_batch(batch: bytes | memoryview, header: BatchHeader, keep: KeepRecord, *,
                 retain_empty: bool) -> FilteredBatch:
    """The batch without the records ``keep`` refuses. Raises CodecUnavailable for a codec not available here."""
    records = records_of(batch, header)
    kept = [r for r in records if keep(header.base_offset + r.offset_delta, r.key, r.value is not None)]
    if len(kept) == len(records):
        if not records and not retain_empty:
            return FilteredBatch(Outcome.DROPPED, None, 0, 0)
        return FilteredBatch(Outcome.COPIED, bytes(batch), len(records), len(records))
    if not kept:
        if retain_empty:
            return FilteredBatch(Outcome.EMPTIED, empty_batch(header), len(records), 0)
        return FilteredBatch(Outcome.DROPPED, None, len(records), 0)
    return FilteredBatch(Outcome.REWRITTEN, rebuild_batch(header, kept), len(records), len(kept))


def rebuild_batch(header: BatchHeader, kept: list[Record]) -> bytes:
    """A batch of the kept records with the original header's fields (see the module's docstring)."""
    if header.is_log_append_time or header.base_timestamp == NO_TIMESTAMP:
        # readers give every record the batch's time (LogAppendTime), or none: timestamps stay as they were
        base_timestamp, max_timestamp = header.base_timestamp, header.max_timestamp
        encoded = b"".join(r.encode(r.timestamp_delta) for r in kept)
    else:
        timestamps = [header.base_timestamp + r.timestamp_delta for r in kept]
        base_timestamp, max_timestamp = timestamps[0], max(timestamps)
        encoded = b"".join(r.encode(t - base_timestamp) for r, t in zip(kept, timestamps, strict=True))
    body = codecs.compress(header.compression, encoded)
    return _seal(header._replace(batch_length=HEADER_SIZE - LOG_OVERHEAD + len(body), base_timestamp=base_timestamp,
                                 max_timestamp=max_timestamp, records_count=len(kept)), body)


def empty_batch(header: BatchHeader) -> bytes:
    """Kafka's writeEmptyHeader: no records, no codec, both timestamps the batch's maxTimestamp."""
    return _seal(header._replace(batch_length=HEADER_SIZE - LOG_OVERHEAD,
                                 attributes=header.attributes & ~COMPRESSION_MASK,
                                 base_timestamp=header.max_timestamp, records_count=0), b"")


def _seal(header: BatchHeader, body: bytes) -> bytes:
    batch = bytearray(HEADER.pack(*header._replace(crc=0))) + body
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def _read_bytes(buf: bytes, position: int) -> tuple[bytes | None, int]:
    length, position = read_varint(buf, position)
    if length < 0:
        return None, position
    return buf[position:position + length], position + length


def _bytes_field(data: bytes | None) -> bytes:
    return write_varint(-1) if data is None else write_varint(len(data)) + data


def should_retain_record(offset: int, key: bytes | None, has_value: bool, *, latest_key_offset: Callable[[bytes], int],
                         map_latest_offset: int, retain_deletes: bool) -> bool:
    """Kafka's Cleaner.shouldRetainRecord: a record past the mapped section stays; a keyless record goes (a compacted
    topic cannot hold one); a record goes when its key has a later offset, or when it is a tombstone (no value) in a
    segment older than the delete horizon (``retain_deletes`` false)."""
    if offset > map_latest_offset:
        return True
    if key is None:
        return False
    found = latest_key_offset(key)
    redundant = found >= 0 and offset < found
    obsolete_delete = not retain_deletes and not has_value
    return not redundant and not obsolete_delete
