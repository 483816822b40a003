"""The compression codecs of record batch v2, for the cleaner's rewrite of a compressed batch and for reading the
records of one (a compacted topic's keys at append, ListOffsets by timestamp).

gzip comes from the standard library; snappy, lz4 and zstd from kafka-python's codec module (a kafkasim
dependency) when their libraries (python-snappy, lz4, zstandard) are installed. A batch whose codec is not
available is kept whole by the cleaner: never wrong, only less compact.

Decompression is bounded: a few KiB of gzip can expand to gigabytes (a decompression bomb), and a produce request
must not make a broker allocate without bound. ``decompress(..., max_bytes)`` reads at most ``max_bytes + 1``
bytes of output through each codec's streaming reader (snappy: its blocks declare their lengths first) and raises
DecompressedTooLarge beyond that.
"""

from __future__ import annotations

import functools
import gzip
import io
import struct
from collections.abc import Callable

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
# The most a batch's records may expand to before a reader gives up on them (the batch is then kept whole by the
# cleaner, left unchecked at append, and ListOffsets answers its first offset): 16x the 1 MB that message.max.bytes
# and the clients' batch.size allow a batch by default. Kafka 2.8 decompresses record by record and has no such
# bound; kafkasim reads a batch at once, so it needs one (docs/hostile-input.md).
MAX_DECOMPRESSED_BATCH_BYTES = 16 * 2**20

_Coder = Callable[[bytes], bytes]


@functools.cache
def _codecs() -> dict[int, tuple[_Coder, _Coder]]:
    """codec id → (decompress, compress), for the codecs this process has. Looked up on first use: importing
    kafka-python's codec module imports its whole package, half a second of every broker's start otherwise."""
    from kafka import codec as kafka_codec

    found: dict[int, tuple[_Coder, _Coder]] = {
        GZIP: (gzip.decompress, lambda data: gzip.compress(data, mtime=0)),
    }
    if kafka_codec.has_snappy():
        # Java clients write xerial-framed snappy; the decoder reads that and plain snappy
        found[SNAPPY] = (kafka_codec.snappy_decode, kafka_codec.snappy_encode)
    if kafka_codec.has_lz4():
        found[LZ4] = (kafka_codec.lz4_decode, kafka_codec.lz4_encode)  # the LZ4 frame format of magic v1+
    if kafka_codec.has_zstd():
        found[ZSTD] = (kafka_codec.zstd_decode, kafka_codec.zstd_encode)
    return found


def available(codec: int) -> bool:
    return codec == NONE or codec in _codecs()


class DecompressedTooLarge(ValueError):
    """A batch's records expand past the bound its reader allows."""


def decompress(codec: int, data: bytes, max_bytes: int | None = None) -> bytes:
    if codec == NONE:
        return data
    if max_bytes is None:
        return _codecs()[codec][0](data)
    out = _bounded(codec, data, max_bytes)
    if len(out) > max_bytes:
        raise DecompressedTooLarge(f"the records of a {len(data)}-byte batch expand past {max_bytes} bytes")
    return out


def _bounded(codec: int, data: bytes, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of the decompressed data, never more in memory."""
    if codec == GZIP:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as reader:
            return reader.read(max_bytes + 1)
    if codec == ZSTD:
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
            return reader.read(max_bytes + 1)
    if codec == LZ4:
        import lz4.frame

        with lz4.frame.LZ4FrameFile(io.BytesIO(data)) as reader:
            return reader.read(max_bytes + 1)
    if codec == SNAPPY:
        declared = _snappy_declared_length(data)
        if declared > max_bytes:
            raise DecompressedTooLarge(f"the batch's snappy blocks declare {declared} bytes, more than {max_bytes}")
        return _codecs()[codec][0](data)
    raise KeyError(codec)


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, version, compatible version


def _snappy_declared_length(data: bytes) -> int:
    """The uncompressed length snappy's blocks declare up front (each raw block starts with it as a varint): the
    sum over xerial's chunks (Java clients and librdkafka), or the one block of plain snappy."""
    if not data.startswith(_XERIAL_MAGIC):
        return _varint_prefix(data, 0)
    total, position = 0, _XERIAL_HEADER
    while position + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, position)
        total += _varint_prefix(data, position + 4)
        position += 4 + max(size, 0)
    return total


def _varint_prefix(data: bytes, position: int) -> int:
    value, shift = 0, 0
    for byte in data[position:position + 5]:
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    return value


def compress(codec: int, data: bytes) -> bytes:
    return data if codec == NONE else _codecs()[codec][1](data)
