"""Record batch v2 parsing, validation and rewriting (pure functions) and the record codec."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.log.errors import InvalidRecordBatchError
from broker.log.record_batch import (
    HEADER_SIZE,
    TIMESTAMP_TYPE_FLAG,
    assign_offset_and_epoch,
    check_batch_at,
    check_client_batch,
    parse_header,
    set_log_append_time,
    split_record_set,
)
from broker.log.records import GZIP, Record, build_batch, record_offsets_and_timestamps

NOW = 1_700_000_000_000


def batch(n: int = 3, *, timestamp: int = NOW, **kwargs: object) -> bytes:
    return build_batch([Record(b"key%d" % i, b"value-%d" % i, timestamp + i) for i in range(n)], **kwargs)


def with_fixed_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def test_crc32c_is_the_castagnoli_polynomial_from_the_c_extension():
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_header_fields_parse_as_written():
    header = parse_header(batch(3, producer_id=7, producer_epoch=1, base_sequence=4))
    assert header.magic == 2
    assert header.records_count == 3 and header.last_offset_delta == 2
    assert header.base_timestamp == NOW and header.max_timestamp == NOW + 2
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 4)
    assert header.partition_leader_epoch == -1 and header.base_offset == 0
    assert header.size == len(batch(3, producer_id=7, producer_epoch=1, base_sequence=4))


def test_a_record_set_splits_into_its_batches():
    first, second = batch(2), batch(5)
    batches = split_record_set(first + second, max_message_bytes=None)
    assert [position for position, _ in batches] == [0, len(first)]
    assert [h.records_count for _, h in batches] == [2, 5]


def test_a_flipped_payload_bit_is_corrupt_message():
    data = bytearray(batch())
    data[-1] ^= 0x01
    with pytest.raises(InvalidRecordBatchError) as e:
        split_record_set(bytes(data), max_message_bytes=None)
    assert e.value.error_code == ErrorCode.corrupt_message
    assert "CRC-32C mismatch" in str(e.value)


def test_the_crc_does_not_cover_base_offset_or_leader_epoch():
    data = bytearray(batch())
    assign_offset_and_epoch(data, 0, 123456789, 42)
    header = check_batch_at(data, 0, len(data))
    assert (header.base_offset, header.partition_leader_epoch) == (123456789, 42)


def test_legacy_magic_is_unsupported_for_message_format():
    data = bytearray(batch())
    data[16] = 1
    with pytest.raises(InvalidRecordBatchError) as e:
        split_record_set(bytes(data), max_message_bytes=None)
    assert e.value.error_code == ErrorCode.unsupported_for_message_format


def test_unknown_magic_is_corrupt_message():
    data = bytearray(batch())
    data[16] = 3
    with pytest.raises(InvalidRecordBatchError) as e:
        split_record_set(bytes(data), max_message_bytes=None)
    assert e.value.error_code == ErrorCode.corrupt_message


@pytest.mark.parametrize("batch_length", [-1, 0, 48])
def test_a_length_below_the_header_size_is_corrupt_message(batch_length: int):
    data = bytearray(batch())
    struct.pack_into(">i", data, 8, batch_length)
    with pytest.raises(InvalidRecordBatchError) as e:
        split_record_set(bytes(data), max_message_bytes=None)
    assert e.value.error_code == ErrorCode.corrupt_message


def test_a_length_beyond_the_data_is_corrupt_message():
    data = batch()
    with pytest.raises(InvalidRecordBatchError) as e:
        split_record_set(data[:-1], max_message_bytes=None)
    assert e.value.error_code == ErrorCode.corrupt_message


def test_trailing_bytes_after_the_last_batch_are_rejected():
    with pytest.raises(InvalidRecordBatchError) as e:
        split_record_set(batch() + b"\x00" * 5, max_message_bytes=None)
    assert e.value.error_code == ErrorCode.corrupt_message


def test_a_batch_above_max_message_bytes_is_message_too_large():
    data = batch()
    assert split_record_set(data, max_message_bytes=len(data))
    with pytest.raises(InvalidRecordBatchError) as e:
        split_record_set(data, max_message_bytes=len(data) - 1)
    assert e.value.error_code == ErrorCode.message_too_large


def test_check_batch_at_tells_a_torn_tail_from_corruption():
    data = batch()
    with pytest.raises(Exception) as torn:
        check_batch_at(data, 0, len(data) - 10)
    assert torn.value.torn
    corrupt = bytearray(data)
    corrupt[30] ^= 0xFF
    with pytest.raises(Exception) as bad:
        check_batch_at(corrupt, 0, len(corrupt))
    assert not bad.value.torn


def client_check(data: bytes, *, log_append_time: bool = False, now: int = NOW, max_diff: int = 2**63 - 1) -> None:
    check_client_batch(
        parse_header(data), log_append_time=log_append_time, now_ms=now, timestamp_difference_max_ms=max_diff
    )


def test_a_producer_batch_passes_the_leader_rules():
    client_check(batch())


def test_a_record_count_that_disagrees_with_last_offset_delta_is_invalid_record():
    data = bytearray(batch(3))
    struct.pack_into(">i", data, 23, 5)  # lastOffsetDelta
    with pytest.raises(InvalidRecordBatchError) as e:
        client_check(with_fixed_crc(data))
    assert e.value.error_code == ErrorCode.invalid_record
    assert "3 records but lastOffsetDelta is 5" in str(e.value)


def test_producers_must_send_base_offset_zero():
    data = bytearray(batch())
    assign_offset_and_epoch(data, 0, 9, -1)
    with pytest.raises(InvalidRecordBatchError) as e:
        client_check(bytes(data))
    assert e.value.error_code == ErrorCode.invalid_record


def test_producers_may_not_write_control_batches():
    data = bytearray(batch(1))
    struct.pack_into(">h", data, 21, 0x20)
    with pytest.raises(InvalidRecordBatchError) as e:
        client_check(with_fixed_crc(data))
    assert e.value.error_code == ErrorCode.invalid_record


def test_an_idempotent_batch_needs_a_base_sequence():
    with pytest.raises(InvalidRecordBatchError) as e:
        client_check(batch(producer_id=5, producer_epoch=0, base_sequence=-1))
    assert e.value.error_code == ErrorCode.invalid_record


def test_producers_may_not_claim_log_append_time():
    with pytest.raises(InvalidRecordBatchError) as e:
        client_check(batch(log_append_time=True))
    assert e.value.error_code == ErrorCode.invalid_timestamp
    client_check(batch(log_append_time=True), log_append_time=True)


def test_create_time_outside_the_allowed_difference_is_invalid_timestamp():
    client_check(batch(timestamp=NOW - 1000), max_diff=1000)
    with pytest.raises(InvalidRecordBatchError) as e:
        client_check(batch(timestamp=NOW - 1001), max_diff=1000)
    assert e.value.error_code == ErrorCode.invalid_timestamp


def test_assigning_offsets_rewrites_only_base_offset_and_leader_epoch():
    original = batch()
    data = bytearray(original)
    assign_offset_and_epoch(data, 0, 0x0102030405060708, 0x0A0B0C0D)
    changed = [i for i in range(len(data)) if data[i] != original[i]]
    assert set(changed) <= set(range(0, 8)) | set(range(12, 16))
    assert data[:8] == bytes.fromhex("0102030405060708") and data[12:16] == bytes.fromhex("0a0b0c0d")


def test_log_append_time_sets_the_flag_and_max_timestamp_and_reseals_the_crc():
    data = bytearray(batch())
    set_log_append_time(data, 0, len(data), NOW + 999)
    header = check_batch_at(data, 0, len(data))
    assert header.attributes & TIMESTAMP_TYPE_FLAG
    assert header.max_timestamp == NOW + 999
    assert [t for _, t in record_offsets_and_timestamps(bytes(data))] == [NOW + 999] * 3


@pytest.mark.parametrize("compression", [0, GZIP])
def test_records_decode_to_their_offsets_and_timestamps(compression: int):
    records = [Record(None, b"x" * 300, NOW - 5), Record(b"k", None, NOW + 70), Record(b"", b"", NOW)]
    data = build_batch(records, base_offset=100, compression=compression)
    assert parse_header(data).compression == compression
    assert list(record_offsets_and_timestamps(data)) == [(100, NOW - 5), (101, NOW + 70), (102, NOW)]
    assert len(data) > HEADER_SIZE


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_changed_byte_outside_offset_and_epoch_is_rejected(data):
    original = batch(data.draw(st.integers(1, 6)), compression=data.draw(st.sampled_from([0, GZIP])))
    position = data.draw(st.integers(0, len(original) - 1).filter(lambda p: not (p < 8 or 12 <= p < 16)))
    new_byte = data.draw(st.integers(0, 255).filter(lambda b: b != original[position]))
    damaged = original[:position] + bytes([new_byte]) + original[position + 1 :]
    with pytest.raises(InvalidRecordBatchError) as e:
        split_record_set(damaged, max_message_bytes=None)
    assert e.value.error_code in (ErrorCode.corrupt_message, ErrorCode.unsupported_for_message_format)
