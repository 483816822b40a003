"""A decompression bomb cannot make a broker allocate without bound: a batch's records are read through each codec's
streaming reader up to codecs.MAX_DECOMPRESSED_BATCH_BYTES (docs/hostile-input.md)."""

from __future__ import annotations

import gzip
import tracemalloc

import lz4.frame
import pytest
import zstandard
from kafka import codec as kafka_codec

from broker.log.cleaner import codecs
from broker.log.cleaner.batch_filter import CodecUnavailable, keys_of
from broker.log.record_batch import parse_header
from broker.log.records import Record, build_batch
from tests.log.cleaner_support import open_log

BOMB_BYTES = 128 * 2**20  # what the records expand to
LIMIT = 2**20


def bombs() -> dict[str, tuple[int, bytes]]:
    zeros = bytes(BOMB_BYTES)
    return {
        "gzip": (codecs.GZIP, gzip.compress(zeros, mtime=0)),
        "zstd": (codecs.ZSTD, zstandard.ZstdCompressor().compress(zeros)),
        "lz4": (codecs.LZ4, lz4.frame.compress(zeros)),
        "snappy-xerial": (codecs.SNAPPY, kafka_codec.snappy_encode(zeros, xerial_compatible=True)),
        "snappy-plain": (codecs.SNAPPY, kafka_codec.snappy_encode(zeros, xerial_compatible=False)),
    }


BOMBS = bombs()


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_bomb_is_refused_after_reading_little_more_than_the_limit(name):
    codec, compressed = BOMBS[name]
    assert len(compressed) < BOMB_BYTES // 20
    tracemalloc.start()
    try:
        with pytest.raises(codecs.DecompressedTooLarge):
            codecs.decompress(codec, compressed, LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * LIMIT, f"{name}: {peak} bytes at the peak"


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_data_within_the_limit_comes_back_whole(name):
    codec, _ = BOMBS[name]
    data = b"kafkasim " * 1000
    compressed = codecs.compress(codec, data) if name != "snappy-plain" else kafka_codec.snappy_encode(data)
    assert codecs.decompress(codec, compressed, LIMIT) == data
    assert codecs.decompress(codec, compressed, len(data)) == data


def bomb_batch(timestamp: int) -> bytes:
    return build_batch([Record(b"key", bytes(BOMB_BYTES), timestamp)], compression=codecs.GZIP)


def test_a_compacted_logs_append_and_listoffsets_by_timestamp_stay_small_on_a_bomb(tmp_path, clock):
    log_ = open_log(tmp_path, clock, **{"segment.bytes": 1 << 24})
    log_.append_as_leader(build_batch([Record(b"k", b"v", clock())], compression=codecs.GZIP), leader_epoch=0)
    bomb = bomb_batch(clock() + 10)
    assert len(bomb) < 1 << 20
    header = parse_header(bomb, 0)
    with pytest.raises(CodecUnavailable):
        list(keys_of(bomb, header))
    tracemalloc.start()
    try:
        info = log_.append_as_leader(bomb, leader_epoch=0)  # its keys cannot be read: unchecked, as a missing codec
        found = log_.fetch_offset_by_timestamp(clock() + 5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.first_offset == 1
    assert found is not None and found.offset == 1  # the batch's first offset, as for a batch it cannot read
    assert peak < 4 * codecs.MAX_DECOMPRESSED_BATCH_BYTES, f"{peak} bytes at the peak"
