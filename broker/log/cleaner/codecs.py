"""The compression codecs of record batch v2, for the cleaner's rewrite of a compressed batch.

gzip comes from the standard library; snappy, lz4 and zstd from kafka-python's codec module (a kafkasim
dependency) when their libraries (python-snappy, lz4, zstandard) are installed. A batch whose codec is not
available is kept whole by the cleaner: never wrong, only less compact.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Callable

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

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


def decompress(codec: int, data: bytes) -> bytes:
    return data if codec == NONE else _codecs()[codec][0](data)


def compress(codec: int, data: bytes) -> bytes:
    return data if codec == NONE else _codecs()[codec][1](data)
