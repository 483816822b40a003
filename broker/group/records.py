"""The key and value formats of __consumer_offsets records (Kafka's GroupMetadataManager schemas, 2.x):
OffsetCommitKey v1 / OffsetCommitValue v3 (with the committed leader epoch; v1 when the commit carried its own
expire timestamp, as Kafka writes it; v0 to v3 are read) and GroupMetadataKey v2 /
GroupMetadataValue v3 (with static member ids). kio has no schemas for these, so they are written here;
a null value is a tombstone that deletes the key."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class RecordFormatError(ValueError):
    """A __consumer_offsets record this broker cannot read (unknown version or truncated)."""


@dataclass(frozen=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None = None  # only value v1 has it


@dataclass(frozen=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...] = field(default_factory=tuple)


# --- writing -----------------------------------------------------------------------------------------

def _string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    data = value.encode()
    return _I16.pack(len(data)) + data


def _bytes(value: bytes) -> bytes:
    return _I32.pack(len(value)) + value


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        return (_I16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(key.group_id) + _string(key.topic)
                + _I32.pack(key.partition))
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(key.group_id)


def encode_offset_value(value: OffsetValue) -> bytes:
    if value.expire_timestamp is not None:
        return (_I16.pack(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY) + _I64.pack(value.offset) + _string(value.metadata)
                + _I64.pack(value.commit_timestamp) + _I64.pack(value.expire_timestamp))
    return (_I16.pack(OFFSET_COMMIT_VALUE_VERSION) + _I64.pack(value.offset) + _I32.pack(value.leader_epoch)
            + _string(value.metadata) + _I64.pack(value.commit_timestamp))


def encode_group_value(value: GroupValue) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
    out += _string(value.protocol_type) + _I32.pack(value.generation_id)
    out += _string(value.protocol_name) + _string(value.leader_id) + _I64.pack(value.current_state_timestamp)
    out += _I32.pack(len(value.members))
    for member in value.members:
        out += _string(member.member_id) + _string(member.group_instance_id)
        out += _string(member.client_id) + _string(member.client_host)
        out += _I32.pack(member.rebalance_timeout_ms) + _I32.pack(member.session_timeout_ms)
        out += _bytes(member.subscription) + _bytes(member.assignment)
    return bytes(out)


# --- reading -----------------------------------------------------------------------------------------

class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def _take(self, unpacker: struct.Struct) -> int:
        try:
            (value,) = unpacker.unpack_from(self.data, self.position)
        except struct.error:
            raise RecordFormatError(f"record truncated at byte {self.position}") from None
        self.position += unpacker.size
        return value

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def string(self) -> str | None:
        length = self.i16()
        if length < 0:
            return None
        return self._raw(length).decode()

    def bytes_(self) -> bytes:
        length = self.i32()
        return b"" if length < 0 else self._raw(length)

    def _raw(self, length: int) -> bytes:
        end = self.position + length
        if end > len(self.data):
            raise RecordFormatError(f"record truncated: {length} bytes wanted at byte {self.position}")
        chunk, self.position = bytes(self.data[self.position:end]), end
        return chunk


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    reader = _Reader(data)
    version = reader.i16()
    if version in (0, 1):
        return OffsetKey(reader.string() or "", reader.string() or "", reader.i32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupKey(reader.string() or "")
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    reader = _Reader(data)
    version = reader.i16()
    if version == OFFSET_COMMIT_VALUE_VERSION:
        return OffsetValue(reader.i64(), reader.i32(), reader.string() or "", reader.i64())
    if version in (0, 2):  # offset, metadata, commit timestamp
        return OffsetValue(reader.i64(), -1, reader.string() or "", reader.i64())
    if version == OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY:
        return OffsetValue(reader.i64(), -1, reader.string() or "", reader.i64(), reader.i64())
    raise RecordFormatError(f"unknown offset commit value version {version}")


def decode_group_value(data: bytes) -> GroupValue:
    reader = _Reader(data)
    version = reader.i16()
    if version != GROUP_METADATA_VALUE_VERSION:
        raise RecordFormatError(f"group metadata value version {version} is not read by kafkasim (only v3)")
    protocol_type = reader.string() or ""
    generation = reader.i32()
    protocol, leader, timestamp = reader.string(), reader.string(), reader.i64()
    members = []
    for _ in range(reader.i32()):
        members.append(MemberValue(reader.string() or "", reader.string(), reader.string() or "",
                                   reader.string() or "", reader.i32(), reader.i32(), reader.bytes_(),
                                   reader.bytes_()))
    return GroupValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))
