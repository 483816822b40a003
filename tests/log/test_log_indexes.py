"""OffsetIndex and TimeIndex: Kafka's file format, binary-search lookups, truncation, sanity checks."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from broker.log.errors import CorruptIndexError
from broker.log.offset_index import OffsetIndex
from broker.log.time_index import TimeIndex

BASE = 1000


def offset_index(tmp_path: Path, max_bytes: int = 1 << 20) -> OffsetIndex:
    return OffsetIndex(tmp_path / "00000000000000001000.index", BASE, max_bytes)


def time_index(tmp_path: Path, max_bytes: int = 1 << 20) -> TimeIndex:
    return TimeIndex(tmp_path / "00000000000000001000.timeindex", BASE, max_bytes)


def test_offset_index_file_holds_big_endian_relative_offset_and_position(tmp_path: Path):
    index = offset_index(tmp_path)
    index.append(BASE + 5, 4100)
    index.append(BASE + 70000, 8300)
    index.close()
    assert index.path.read_bytes() == struct.pack(">ii", 5, 4100) + struct.pack(">ii", 70000, 8300)


def test_offset_lookup_finds_the_largest_entry_at_or_below_the_target(tmp_path: Path):
    rng = random.Random(7)
    index = offset_index(tmp_path)
    offsets = sorted(rng.sample(range(1, 100_000), 500))
    for position, offset in enumerate(offsets):
        index.append(BASE + offset, position * 10 + 1)
    for target in [BASE - 1, BASE, *(BASE + rng.randrange(0, 100_010) for _ in range(2000))]:
        below = [(o, p * 10 + 1) for p, o in enumerate(offsets) if BASE + o <= target]
        expected = (BASE + below[-1][0], below[-1][1]) if below else (BASE, 0)
        assert index.lookup(target) == expected


def test_offset_index_reloads_what_it_wrote(tmp_path: Path):
    index = offset_index(tmp_path)
    for i in range(1, 50):
        index.append(BASE + i * 3, i * 100)
    index.close()
    reloaded = offset_index(tmp_path)
    reloaded.load(log_size=10_000)
    assert [reloaded.entry(i) for i in range(reloaded.entries)] == [(BASE + i * 3, i * 100) for i in range(1, 50)]


def test_offset_index_entries_must_increase(tmp_path: Path):
    index = offset_index(tmp_path)
    index.append(BASE + 5, 100)
    with pytest.raises(ValueError):
        index.append(BASE + 5, 200)


def test_offset_index_is_full_at_segment_index_bytes(tmp_path: Path):
    index = offset_index(tmp_path, max_bytes=20)  # room for two 8-byte entries
    index.append(BASE + 1, 10)
    assert not index.is_full
    index.append(BASE + 2, 20)
    assert index.is_full
    with pytest.raises(ValueError):
        index.append(BASE + 3, 30)


def test_offset_index_truncation_drops_entries_at_or_above_the_offset(tmp_path: Path):
    index = offset_index(tmp_path)
    for i in range(1, 6):
        index.append(BASE + i * 10, i * 100)
    index.truncate_to(BASE + 30)
    assert index.last_entry() == (BASE + 20, 200)
    assert index.path.stat().st_size == 16
    index.append(BASE + 25, 250)
    index.close()
    assert index.path.read_bytes()[-8:] == struct.pack(">ii", 25, 250)


@pytest.mark.parametrize(
    "content",
    [
        b"\x00" * 7,  # not a whole entry
        struct.pack(">ii", 5, 100) + struct.pack(">ii", 5, 200),  # offsets not increasing
        struct.pack(">ii", 5, 100) + struct.pack(">ii", 6, 50),  # positions going back
        struct.pack(">ii", 5, 99_999),  # beyond the log
        struct.pack(">ii", -1, 10),  # below the base offset
    ],
)
def test_a_broken_offset_index_fails_its_sanity_check(tmp_path: Path, content: bytes):
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, BASE, 1 << 20).load(log_size=1000)


def test_time_index_file_holds_big_endian_timestamp_and_relative_offset(tmp_path: Path):
    index = time_index(tmp_path)
    index.maybe_append(1_700_000_000_123, BASE + 7)
    index.close()
    assert index.path.read_bytes() == struct.pack(">qi", 1_700_000_000_123, 7)


def test_time_index_appends_only_larger_timestamps(tmp_path: Path):
    index = time_index(tmp_path)
    index.maybe_append(500, BASE + 1)
    index.maybe_append(500, BASE + 2)
    index.maybe_append(400, BASE + 3)
    index.maybe_append(-1, BASE + 4)
    index.maybe_append(600, BASE + 5)
    assert index.entries == 2 and index.last_entry() == (600, BASE + 5)


def test_time_lookup_finds_the_largest_timestamp_at_or_below_the_target(tmp_path: Path):
    index = time_index(tmp_path)
    for i in range(1, 100):
        index.maybe_append(i * 10, BASE + i * 2)
    assert index.lookup(5) == (-1, BASE)
    assert index.lookup(10) == (10, BASE + 2)
    assert index.lookup(555) == (550, BASE + 110)
    assert index.lookup(10**12) == (990, BASE + 198)


def test_time_index_keeps_its_last_slot_for_the_roll(tmp_path: Path):
    index = time_index(tmp_path, max_bytes=36)  # three 12-byte entries
    index.maybe_append(1, BASE + 1)
    assert not index.is_full
    index.maybe_append(2, BASE + 2)
    assert index.is_full
    index.maybe_append(3, BASE + 3, skip_full_check=True)
    assert index.entries == 3


def test_time_index_truncate_after_keeps_entries_up_to_the_offset(tmp_path: Path):
    index = time_index(tmp_path)
    for i in range(1, 6):
        index.maybe_append(i * 100, BASE + i * 10)
    index.truncate_after(BASE + 30)
    assert index.last_entry() == (300, BASE + 30)
    index.truncate_after(BASE - 1)
    assert index.entries == 0 and index.path.stat().st_size == 0


@pytest.mark.parametrize(
    "content",
    [
        b"\x00" * 13,
        struct.pack(">qi", 100, 5) + struct.pack(">qi", 100, 6),
        struct.pack(">qi", 100, 5) + struct.pack(">qi", 200, 4),
    ],
)
def test_a_broken_time_index_fails_its_sanity_check(tmp_path: Path, content: bytes):
    path = tmp_path / "00000000000000001000.timeindex"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError):
        TimeIndex(path, BASE, 1 << 20).load()
