"""OffsetMap: key → last offset over a log's dirty section, with the capacity of Kafka's SkimpyOffsetMap. Pure."""

from __future__ import annotations

import hashlib

# SkimpyOffsetMap's entry: a 16-byte MD5 of the key and an 8-byte offset
BYTES_PER_ENTRY = 24
DEFAULT_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor


def key_hash(key: bytes | memoryview) -> bytes:
    """Kafka keys the map by the MD5 of the record key: two keys with one hash count as one key (as in Kafka)."""
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """The latest offset of each key hash seen, up to ``memory_bytes / 24 × load_factor`` keys.

    Kafka's map is a fixed array; a Python dict takes several times the memory per entry, but the number of keys one
    pass maps (and so how far a pass gets on a log with many keys) is Kafka's.
    """

    def __init__(self, memory_bytes: int, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        self.slots = memory_bytes // BYTES_PER_ENTRY
        if self.slots < 1:
            raise ValueError(f"a map of {memory_bytes} bytes holds no entry of {BYTES_PER_ENTRY} bytes")
        self.max_keys = max(1, int(self.slots * load_factor))
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # the last offset of the last batch mapped

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def full(self) -> bool:
        return len(self._offsets) >= self.max_keys

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots

    def put(self, key: bytes | memoryview, offset: int) -> bool:
        """Record ``offset`` as the key's latest; False (nothing recorded) once the map is full: Kafka's pass stops
        at the first keyed record it meets then, even one whose key is mapped already."""
        if self.full:
            return False
        self._offsets[key_hash(key)] = offset
        return True

    def get(self, key: bytes | memoryview) -> int:
        """The key's latest offset, -1 when the key is not in the map."""
        return self._offsets.get(key_hash(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1
