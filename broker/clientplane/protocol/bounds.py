"""Checks every array count in a request against the bytes left, before kio decodes the request.

kio 0.6.5's native reader reserves memory for a whole array from the count on the wire, before
reading any element (8 bytes per element). One corrupted int32 count asks for up to 17 GB, a
compact (varint) count up to 270 GB, and Rust aborts the process when an allocation fails: no
exception reaches Python, the broker just dies. Every element takes at least one byte, so a count
no larger than the bytes left keeps kio's reservation under 8x the frame size.

This walks the same kio schema classes kio decodes with, and only where arrays of arrays can
hide; it builds no values. kio's own primitive and array readers do the byte-level work.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import fields

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial._parse import get_field_reader
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_unsigned_varint,
)
from kio.static.protocol import Entity

# Takes (buffer, offset) and returns the offset just after the value.
Walker = Callable[[bytes, int], int]


class ArrayTooLong(ValueError):
    """An array count larger than the bytes that follow it."""


class UnexpectedNullArray(ValueError):
    """A null count for an array the schema does not let be null. Kafka's generated readers refuse it
    ("non-nullable field ... was serialized as null") and the request is malformed; kio would hand the
    handlers None where the schema promises a tuple."""


def check_array_lengths(entity_type: type[Entity], buffer: bytes, offset: int) -> int:
    """Walk one entity at offset, raising ArrayTooLong on an impossible count; return its end offset.

    Other malformations (truncation, bad varints) raise kio's own errors, as kio itself would.
    """
    return _entity_walker(entity_type)(buffer, offset)


def _read_count(buffer: bytes, offset: int, flexible: bool, nullable: bool) -> tuple[int, int]:
    reader = read_compact_array_length if flexible else read_legacy_array_length
    count, size = reader(buffer, offset)
    if (count is None or count == -1) and not nullable:
        raise UnexpectedNullArray(f"null array where the schema allows none, at byte {offset}")
    count = 0 if count is None or count < 0 else count
    offset += size
    if count > len(buffer) - offset:
        raise ArrayTooLong(f"array of {count} elements with only {len(buffer) - offset} bytes left")
    return count, offset


@functools.cache
def _has_arrays(entity_type: type[Entity]) -> bool:
    for field in fields(entity_type):
        kind = classify_field(field)
        if kind.is_array or (isinstance(kind, EntityField) and _has_arrays(kind.type_)):
            return True
    return False


@functools.cache
def _entity_walker(entity_type: type[Entity]) -> Walker:
    regular: list[Walker] = []
    tagged: dict[int, Walker] = {}
    for field in fields(entity_type):
        tag = get_field_tag(field)
        walker = _field_walker(entity_type, field, is_tag=tag is not None)
        if tag is None:
            regular.append(walker)
        else:
            tagged[tag] = walker
    flexible = entity_type.__flexible__

    def walk(buffer: bytes, offset: int) -> int:
        for walker in regular:
            offset = walker(buffer, offset)
        if flexible:
            offset = _walk_tagged_fields(tagged, buffer, offset)
        return offset

    return walk


def _walk_tagged_fields(tagged: dict[int, Walker], buffer: bytes, offset: int) -> int:
    count, size = read_unsigned_varint(buffer, offset)
    offset += size
    for _ in range(count):
        tag, size = read_unsigned_varint(buffer, offset)
        offset += size
        length, size = read_unsigned_varint(buffer, offset)
        offset += size
        end = offset + length
        if end > len(buffer):
            raise ArrayTooLong(f"tagged field {tag} of {length} bytes with only {len(buffer) - offset} left")
        walker = tagged.get(tag)
        if walker is not None:
            walker(memoryview(buffer)[:end], offset)
        offset = end
    return offset


def _field_walker(entity_type: type[Entity], field, is_tag: bool) -> Walker:
    kind = classify_field(field)
    flexible = entity_type.__flexible__
    nullable_array = is_optional(field)
    if isinstance(kind, EntityTupleField) and _has_arrays(kind.type_):
        element = _entity_walker(kind.type_)

        def walk_nested_array(buffer: bytes, offset: int) -> int:
            count, offset = _read_count(buffer, offset, flexible, nullable_array)
            for _ in range(count):
                offset = element(buffer, offset)
            return offset

        return walk_nested_array

    if isinstance(kind, EntityField) and _has_arrays(kind.type_):
        inner = _entity_walker(kind.type_)
        nullable = is_optional(field) and not is_tag

        def walk_entity(buffer: bytes, offset: int) -> int:
            if nullable:
                marker, size = read_int8(buffer, offset)
                offset += size
                if marker < 0:
                    return offset
            return inner(buffer, offset)

        return walk_entity

    # Flat values, and arrays whose elements hold no arrays: kio reads them itself once the
    # count is known to be possible.
    reader = get_field_reader(entity_type, field, entity_type.__name__ == "RequestHeader", is_tag)
    is_array = isinstance(kind, EntityTupleField | PrimitiveTupleField)

    def walk_flat(buffer: bytes, offset: int) -> int:
        if is_array:
            _read_count(buffer, offset, flexible, nullable_array)
        return offset + reader(buffer, offset)[1]

    return walk_flat
