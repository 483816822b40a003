"""OffsetIndex: sparse map from offset to the file position of the batch that ends at that offset."""

from __future__ import annotations

import struct
from bisect import bisect_right
from pathlib import Path

from broker.log.errors import CorruptIndexError
from broker.log.index_file import IndexFile


class OffsetIndex(IndexFile):
    """Entries (relative offset int32, position int32).

    An entry (o, p) says the batch starting at byte p has last offset o; a lookup for offset t takes
    the largest entry with o <= t and scans batches from p — Kafka's rule for ``.index`` files.
    """

    ENTRY = struct.Struct(">ii")

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._relative_offsets: list[int] = []
        self._positions: list[int] = []

    def load(self, log_size: int) -> None:
        """Read the file and sanity-check it against the log size. Raises CorruptIndexError."""
        offsets, positions = [], []
        previous_offset = previous_position = -1
        for relative_offset, position in self._read_entries():
            if relative_offset <= previous_offset or position <= previous_position:
                raise CorruptIndexError(f"{self.path}: entries are not strictly increasing")
            if relative_offset < 0 or position < 0 or position >= log_size:
                raise CorruptIndexError(
                    f"{self.path}: entry ({relative_offset}, {position}) is outside the {log_size}-byte segment"
                )
            offsets.append(relative_offset)
            positions.append(position)
            previous_offset, previous_position = relative_offset, position
        if len(offsets) > self.max_entries:
            raise CorruptIndexError(f"{self.path}: {len(offsets)} entries, more than {self.max_entries}")
        self._relative_offsets, self._positions = offsets, positions

    @property
    def entries(self) -> int:
        return len(self._positions)

    @property
    def is_full(self) -> bool:
        return len(self._positions) >= self.max_entries

    def last_entry(self) -> tuple[int, int] | None:
        if not self._positions:
            return None
        return self.base_offset + self._relative_offsets[-1], self._positions[-1]

    def entry(self, n: int) -> tuple[int, int]:
        return self.base_offset + self._relative_offsets[n], self._positions[n]

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self._relative_offsets and relative <= self._relative_offsets[-1]:
            raise ValueError(f"{self.path}: offset {offset} is not above the last entry")
        if self.is_full:
            raise ValueError(f"{self.path}: index is full ({self.max_entries} entries)")
        self._relative_offsets.append(relative)
        self._positions.append(position)
        self._write_entry(relative, position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, else (base offset, 0)."""
        i = bisect_right(self._relative_offsets, target_offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[i], self._positions[i]

    def lookup_by_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the largest entry starting at or before ``position``, else (base, 0)."""
        i = bisect_right(self._positions, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[i], self._positions[i]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        self._keep(bisect_right(self._relative_offsets, offset - self.base_offset - 1))

    def reset(self) -> None:
        """Empty the index, whatever the file held (it may never have been loaded)."""
        self._keep(0)
        self._truncate_file(0)

    def _keep(self, entries: int) -> None:
        if entries < len(self._positions):
            del self._relative_offsets[entries:], self._positions[entries:]
            self._truncate_file(entries)
