"""The records inside a v2 batch: build a batch from records, and walk records for their timestamps.

The log itself never needs this (batches are stored as sent); building serves tests, the benchmark and
internal writers, walking serves ListOffsets by timestamp, which answers with a record's offset.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import crc32c

from broker.log.cleaner import codecs
from broker.log.record_batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_FLAG,
    TRANSACTIONAL_FLAG,
    parse_header,
    read_varint,
)
from broker.log.transactions import ABORT, COMMIT, control_record

NONE, GZIP = 0, 1


class Record(NamedTuple):
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


class CompressionUnavailable(Exception):
    """The batch's records cannot be read here: its codec's library is missing, or they expand past
    codecs.MAX_DECOMPRESSED_BATCH_BYTES (a decompression bomb)."""


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: int = NONE,
    log_append_time: bool = False,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """A complete record batch v2 (as a producer would send it, with offset deltas 0..n-1)."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    base_timestamp = records[0].timestamp
    body = bytearray()
    for delta, record in enumerate(records):
        body += _encode_record(record, delta, base_timestamp)
    if compression == GZIP:
        body = bytearray(gzip.compress(bytes(body), mtime=0))
    elif compression != NONE:
        raise CompressionUnavailable(f"cannot compress with codec {compression}")
    attributes = compression
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_FLAG
    if transactional:
        attributes |= TRANSACTIONAL_FLAG
    if control:
        attributes |= CONTROL_FLAG
    max_timestamp = max(r.timestamp for r in records)
    header = HEADER.pack(
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(body),
        partition_leader_epoch,
        2,
        0,
        attributes,
        len(records) - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch = bytearray(header) + body
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def build_end_txn_marker(
    *,
    producer_id: int,
    producer_epoch: int,
    abort: bool,
    coordinator_epoch: int = 0,
    timestamp: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker as the coordinator has a leader write it: a control batch (transactional and control
    bits), base sequence -1, one record whose key is ControlRecordType (version 0, ABORT 0 / COMMIT 1) and whose
    value is EndTransactionMarker (version 0, coordinator epoch)."""
    key, value = control_record(ABORT if abort else COMMIT, coordinator_epoch)
    return build_batch([Record(key, value, timestamp)], base_offset=base_offset,
                       partition_leader_epoch=partition_leader_epoch, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=-1, transactional=True, control=True)


def record_offsets_and_timestamps(batch: bytes | bytearray | memoryview) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of every record of one complete batch, in order."""
    header = parse_header(batch, 0)
    if header.is_log_append_time:
        # LogAppendTime: every record's timestamp is the batch's maxTimestamp.
        for delta in range(header.last_offset_delta + 1):
            yield header.base_offset + delta, header.max_timestamp
        return
    body = bytes(memoryview(batch)[HEADER_SIZE : header.size])
    if header.compression != NONE:
        if not codecs.available(header.compression):
            raise CompressionUnavailable(f"codec {header.compression} is not available to decompress")
        try:
            body = codecs.decompress(header.compression, body, codecs.MAX_DECOMPRESSED_BATCH_BYTES)
        except codecs.DecompressedTooLarge as exc:
            raise CompressionUnavailable(str(exc)) from None
    position = 0
    for _ in range(header.records_count):
        length, position = read_varint(body, position)
        end = position + length
        position += 1  # record attributes, unused
        timestamp_delta, position = read_varint(body, position)
        offset_delta, position = read_varint(body, position)
        timestamp = NO_TIMESTAMP if header.base_timestamp == NO_TIMESTAMP else header.base_timestamp + timestamp_delta
        yield header.base_offset + offset_delta, timestamp
        position = end


def _encode_record(record: Record, offset_delta: int, base_timestamp: int) -> bytes:
    out = bytearray(b"\x00")
    out += write_varint(record.timestamp - base_timestamp)
    out += write_varint(offset_delta)
    out += _bytes_field(record.key)
    out += _bytes_field(record.value)
    out += write_varint(len(record.headers))
    for name, value in record.headers:
        out += _bytes_field(name.encode())
        out += _bytes_field(value)
    return write_varint(len(out)) + bytes(out)


def _bytes_field(data: bytes | None) -> bytes:
    if data is None:
        return write_varint(-1)
    return write_varint(len(data)) + data


def write_varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


