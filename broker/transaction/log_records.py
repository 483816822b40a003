"""The key and value formats of __transaction_state records (Kafka's TransactionLogKey / TransactionLogValue
v0, not flexible): key = int16 version, TransactionalId string; value = int16 version, ProducerId int64,
ProducerEpoch int16, TransactionTimeoutMs int32, TransactionStatus int8, TransactionPartitions
[]{Topic string, PartitionIds []int32} (null when Empty), TransactionLastUpdateTimestampMs int64,
TransactionStartTimestampMs int64. A null value is the tombstone of an expired transactional id. kio has no
schemas for them, so they are written here. Pure."""

from __future__ import annotations

import struct

from broker.transaction.metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnState, TxnTransitMetadata

KEY_VERSION = 0
VALUE_VERSION = 0
_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class TransactionLogFormatError(ValueError):
    """A __transaction_state record this broker cannot read (unknown version or truncated)."""


def _string(value: str) -> bytes:
    data = value.encode()
    return _I16.pack(len(data)) + data


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: struct.Struct) -> int:
        if self.at + fmt.size > len(self.data):
            raise TransactionLogFormatError(f"record truncated at byte {self.at} of {len(self.data)}")
        (value,) = fmt.unpack_from(self.data, self.at)
        self.at += fmt.size
        return value

    def string(self) -> str:
        length = self.take(_I16)
        if length < 0 or self.at + length > len(self.data):
            raise TransactionLogFormatError(f"bad string length {length} at byte {self.at}")
        value = self.data[self.at:self.at + length].decode()
        self.at += length
        return value


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    version = reader.take(_I16)
    if version != KEY_VERSION:
        raise TransactionLogFormatError(f"__transaction_state key version {version} is not known (0 is)")
    return reader.string()


def encode_value(transit: TxnTransitMetadata) -> bytes:
    parts = [_I16.pack(VALUE_VERSION), _I64.pack(transit.producer_id), _I16.pack(transit.producer_epoch),
             _I32.pack(transit.txn_timeout_ms), _I8.pack(transit.state.byte)]
    if transit.state is TxnState.EMPTY:
        if transit.topic_partitions:
            raise ValueError("an Empty transaction has no partitions")
        parts.append(_I32.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(transit.topic_partitions):
            by_topic.setdefault(topic, []).append(partition)
        parts.append(_I32.pack(len(by_topic)))
        for topic, partitions in by_topic.items():
            parts.append(_string(topic) + _I32.pack(len(partitions)) + b"".join(_I32.pack(p) for p in partitions))
    parts += [_I64.pack(transit.txn_last_update_timestamp), _I64.pack(transit.txn_start_timestamp)]
    return b"".join(parts)


def decode_value(data: bytes | None) -> TxnTransitMetadata | None:
    """The stored metadata, or None for a tombstone. The previous producer id and epoch are not stored (v0):
    they read back as unknown."""
    if data is None:
        return None
    reader = _Reader(data)
    version = reader.take(_I16)
    if version != VALUE_VERSION:
        raise TransactionLogFormatError(f"__transaction_state value version {version} is not known (0 is)")
    producer_id, epoch, timeout = reader.take(_I64), reader.take(_I16), reader.take(_I32)
    state = TxnState.of_byte(reader.take(_I8))
    partitions: set[tuple[str, int]] = set()
    count = reader.take(_I32)
    for _ in range(max(count, 0)):
        topic = reader.string()
        partitions.update((topic, reader.take(_I32)) for _ in range(reader.take(_I32)))
    last_update, start = reader.take(_I64), reader.take(_I64)
    return TxnTransitMetadata(producer_id=producer_id, last_producer_id=NO_PRODUCER_ID, producer_epoch=epoch,
                              last_producer_epoch=NO_PRODUCER_EPOCH, txn_timeout_ms=timeout, state=state,
                              topic_partitions=frozenset(partitions), txn_start_timestamp=start,
                              txn_last_update_timestamp=last_update)
