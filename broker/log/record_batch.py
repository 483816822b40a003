"""Record batch v2 headers: parse, validate and rewrite. Pure functions over bytes — no IO, no clock."""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c
from kio.schema.errors import ErrorCode

from broker.log.errors import InvalidRecordBatchError

# Header layout (big-endian): baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount.
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: batchLength counts the bytes after it
BASE_OFFSET_AND_LENGTH = struct.Struct(">qi")
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers [attributes, end of batch)
MAX_TIMESTAMP_OFFSET = 35

CURRENT_MAGIC = 2
NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1
MAX_RELATIVE_OFFSET = 2**31 - 1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


class MalformedBatch(Exception):
    """The bytes at a position are not a complete, intact v2 batch.

    ``torn`` is true when the data simply ends early (an interrupted write); every other defect is
    corruption. ``error_code`` is the Kafka code a producer gets for such a batch.
    """

    def __init__(self, error_code: ErrorCode, message: str, *, torn: bool = False) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.torn = torn


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """The 61-byte header at ``position``; the caller guarantees the bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buf, position))


def check_batch_at(buf: bytes | bytearray | memoryview, position: int, end: int) -> BatchHeader:
    """Header of the batch at ``position`` after checking its framing, magic and CRC-32C.

    ``end`` bounds the data (the record set or the file). Raises MalformedBatch.
    """
    remaining = end - position
    if remaining < LOG_OVERHEAD + 5:
        raise MalformedBatch(
            ErrorCode.corrupt_message, f"only {remaining} bytes left at position {position}", torn=True
        )
    _, batch_length = BASE_OFFSET_AND_LENGTH.unpack_from(buf, position)
    size = batch_length + LOG_OVERHEAD
    magic = buf[position + MAGIC_OFFSET]
    if magic != CURRENT_MAGIC:
        if magic in (0, 1):
            # This log stores v2 only and, unlike Kafka, never up-converts legacy message sets.
            raise MalformedBatch(
                ErrorCode.unsupported_for_message_format,
                f"message format v{magic} at position {position}; only record batch v2 is stored",
            )
        raise MalformedBatch(ErrorCode.corrupt_message, f"unknown magic {magic} at position {position}")
    if size < HEADER_SIZE:
        raise MalformedBatch(
            ErrorCode.corrupt_message,
            f"batch at position {position} declares {size} bytes, less than the {HEADER_SIZE}-byte header",
        )
    if size > remaining:
        raise MalformedBatch(
            ErrorCode.corrupt_message,
            f"batch at position {position} declares {size} bytes but only {remaining} follow",
            torn=True,
        )
    header = parse_header(buf, position)
    actual = crc32c.crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])
    if actual != header.crc:
        raise MalformedBatch(
            ErrorCode.corrupt_message,
            f"CRC-32C mismatch in batch at position {position} (stored {header.crc:#010x}, computed {actual:#010x})",
        )
    if header.last_offset_delta < 0:
        raise MalformedBatch(ErrorCode.corrupt_message, f"negative lastOffsetDelta at position {position}")
    return header


def split_record_set(
    records: bytes | bytearray | memoryview, *, max_message_bytes: int | None
) -> list[tuple[int, BatchHeader]]:
    """Every batch of a produce or fetch record set, as (position, header), each fully checked.

    The whole set is rejected if any batch is bad, including trailing bytes that are not a whole batch
    (Kafka silently ignores such a tail; refusing it keeps unvalidated bytes off the disk).
    """
    batches: list[tuple[int, BatchHeader]] = []
    position, end = 0, len(records)
    while position < end:
        try:
            header = check_batch_at(records, position, end)
        except MalformedBatch as e:
            raise InvalidRecordBatchError(e.error_code, str(e)) from None
        if max_message_bytes is not None and header.size > max_message_bytes:
            raise InvalidRecordBatchError(
                ErrorCode.message_too_large,
                f"batch of {header.size} bytes exceeds max.message.bytes={max_message_bytes}; "
                "send smaller batches (producer batch.size) or raise the topic's max.message.bytes",
            )
        batches.append((position, header))
        position += header.size
    return batches


def check_client_batch(
    header: BatchHeader,
    *,
    log_append_time: bool,
    now_ms: int,
    timestamp_difference_max_ms: int,
) -> None:
    """Kafka's leader-side rules for a batch that came from a producer (LogValidator)."""

    def invalid(code: ErrorCode, message: str) -> InvalidRecordBatchError:
        return InvalidRecordBatchError(code, f"batch {message}")

    if header.base_offset != 0:
        raise invalid(ErrorCode.invalid_record, f"baseOffset is {header.base_offset}; producers must send 0")
    if header.records_count <= 0:
        raise invalid(ErrorCode.invalid_record, f"declares {header.records_count} records")
    if header.records_count != header.last_offset_delta + 1:
        raise invalid(
            ErrorCode.invalid_record,
            f"holds {header.records_count} records but lastOffsetDelta is {header.last_offset_delta}",
        )
    if header.is_control:
        raise invalid(ErrorCode.invalid_record, "is a control batch; producers may not write those")
    if header.attributes & TRANSACTIONAL_FLAG and header.producer_id < 0:
        # a transaction is a producer's (ProducerStateManager keys it by producer id)
        raise invalid(ErrorCode.invalid_record, "is transactional but has no producer id")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise invalid(ErrorCode.invalid_record, f"of producer {header.producer_id} has no base sequence")
    if log_append_time:
        return
    if header.is_log_append_time:
        raise invalid(ErrorCode.invalid_timestamp, "sets LogAppendTime; only the broker may set it")
    for timestamp in (header.base_timestamp, header.max_timestamp):
        if timestamp != NO_TIMESTAMP and abs(timestamp - now_ms) > timestamp_difference_max_ms:
            raise invalid(
                ErrorCode.invalid_timestamp,
                f"timestamp {timestamp} is more than message.timestamp.difference.max.ms="
                f"{timestamp_difference_max_ms} away from the broker's clock {now_ms}",
            )


def assign_offset_and_epoch(
    buf: bytearray | memoryview, position: int, base_offset: int, partition_leader_epoch: int
) -> None:
    """Rewrite baseOffset and partitionLeaderEpoch in place; neither is covered by the CRC."""
    struct.pack_into(">q", buf, position, base_offset)
    struct.pack_into(">i", buf, position + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, position: int, size: int, timestamp: int) -> None:
    """Stamp the broker's time as maxTimestamp with the LogAppendTime bit, and re-seal the CRC.

    Kafka does the same in place for v2: readers then treat every record's timestamp as maxTimestamp.
    """
    (attributes,) = struct.unpack_from(">h", buf, position + ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_FLAG)
    struct.pack_into(">q", buf, position + MAX_TIMESTAMP_OFFSET, timestamp)
    crc = crc32c.crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])
    struct.pack_into(">I", buf, position + CRC_OFFSET, crc)


def read_varint(buf: bytes | memoryview, position: int) -> tuple[int, int]:
    """A zigzag varint of the record format (a record's length, deltas, key and value lengths): (value, next)."""
    shift = result = 0
    while True:
        byte = buf[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
