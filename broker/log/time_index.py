"""TimeIndex: sparse map from "largest timestamp so far" to the offset where it was first seen."""

from __future__ import annotations

import struct
from bisect import bisect_right
from pathlib import Path

from broker.log.errors import CorruptIndexError
from broker.log.index_file import IndexFile
from broker.log.record_batch import NO_TIMESTAMP


class TimeIndex(IndexFile):
    """Entries (timestamp int64, relative offset int32), increasing in both — Kafka's ``.timeindex``."""

    ENTRY = struct.Struct(">qi")

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._timestamps: list[int] = []
        self._relative_offsets: list[int] = []

    def load(self) -> None:
        """Read the file and sanity-check it. Raises CorruptIndexError."""
        timestamps, offsets = [], []
        for timestamp, relative_offset in self._read_entries():
            if timestamps and (timestamp <= timestamps[-1] or relative_offset < offsets[-1]):
                raise CorruptIndexError(f"{self.path}: entries are not increasing")
            if relative_offset < 0:
                raise CorruptIndexError(f"{self.path}: negative relative offset {relative_offset}")
            timestamps.append(timestamp)
            offsets.append(relative_offset)
        if len(offsets) > self.max_entries:
            raise CorruptIndexError(f"{self.path}: {len(offsets)} entries, more than {self.max_entries}")
        self._timestamps, self._relative_offsets = timestamps, offsets

    @property
    def entries(self) -> int:
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        # Kafka keeps the last slot free for the entry written when the segment rolls.
        return len(self._timestamps) >= self.max_entries - 1

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (NO_TIMESTAMP, base offset) when empty."""
        if not self._timestamps:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[-1], self.base_offset + self._relative_offsets[-1]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Append only when the timestamp is larger than the last entry's (Kafka's rule)."""
        last_timestamp, last_offset = self.last_entry()
        if timestamp <= last_timestamp:
            return
        if self._timestamps and offset < last_offset:
            raise ValueError(f"{self.path}: offset {offset} is below the last entry's {last_offset}")
        if not skip_full_check and self.is_full:
            raise ValueError(f"{self.path}: index is full")
        relative = offset - self.base_offset
        self._timestamps.append(timestamp)
        self._relative_offsets.append(relative)
        self._write_entry(timestamp, relative)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target, else (NO_TIMESTAMP, base)."""
        i = bisect_right(self._timestamps, target_timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[i], self.base_offset + self._relative_offsets[i]

    def truncate_after(self, offset: int) -> None:
        """Drop every entry whose offset is > ``offset`` (``offset`` < base offset drops all)."""
        self._keep(bisect_right(self._relative_offsets, offset - self.base_offset))

    def reset(self) -> None:
        """Empty the index, whatever the file held (it may never have been loaded)."""
        self._keep(0)
        self._truncate_file(0)

    def _keep(self, entries: int) -> None:
        if entries < len(self._timestamps):
            del self._timestamps[entries:], self._relative_offsets[entries:]
            self._truncate_file(entries)
