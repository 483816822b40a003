"""What offset and time indexes share: a file of fixed-size big-endian entries, mirrored in memory.

Kafka memory-maps indexes preallocated to segment.index.bytes and trims them on roll; here entries live
in Python lists (binary search with bisect) and the file only ever holds whole entries, so a file is
always in the trimmed form Kafka reads. Writes are buffered: an index never needs to be durable before
its segment is flushed, because recovery rebuilds the indexes of every segment it re-validates.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO

from broker.log.errors import CorruptIndexError


class IndexFile:
    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_index_size // self.ENTRY.size
        self._file: BinaryIO | None = open(path, "ab")

    def _read_entries(self) -> list[tuple[int, ...]]:
        data = self.path.read_bytes()
        if len(data) % self.ENTRY.size:
            raise CorruptIndexError(
                f"{self.path} is {len(data)} bytes, not a multiple of the {self.ENTRY.size}-byte entry"
            )
        return list(self.ENTRY.iter_unpack(data))

    def _write_entry(self, *fields: int) -> None:
        assert self._file is not None, f"{self.path} is closed"
        self._file.write(self.ENTRY.pack(*fields))

    def _truncate_file(self, entries: int) -> None:
        assert self._file is not None, f"{self.path} is closed"
        self._file.flush()
        os.truncate(self.path, entries * self.ENTRY.size)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def dup_for_sync(self) -> list[int]:
        """Its buffered entries handed to the kernel, and a descriptor of its own to fsync elsewhere (a thread), which
        stays valid whatever happens to this index meanwhile (closed, renamed, deleted)."""
        if self._file is None:
            return []
        self._file.flush()
        return [os.dup(self._file.fileno())]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def rename(self, new_path: Path) -> None:
        if self._file is not None:
            self._file.flush()
        os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
