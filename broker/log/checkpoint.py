"""Checkpoint files in Kafka's text format: ``<version>\\n<count>\\n<entry>\\n...``, replaced atomically."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

from broker.log.errors import CorruptCheckpointError

T = TypeVar("T")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"  # high watermarks
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


def write_atomically(path: Path, text: str) -> None:
    """Write ``<name>.tmp``, fsync it, rename it over ``path``, fsync the directory.

    A crash at any point leaves either the old or the new file, never a mix.
    """
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def write_all_atomically(files: Sequence[tuple[Path, str]]) -> None:
    """Many files, each replaced atomically as ``write_atomically`` does, with two syncs of their file system in all
    instead of two fsyncs per file: every ``.tmp`` is written, then made durable, then renamed over its file, then
    the renames made durable. A crash at any point leaves each file either old or new, never a mix."""
    written: list[tuple[Path, Path]] = []
    for path, text in files:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        written.append((tmp, path))
    if not written:
        return
    if not _syncfs(written[0][1].parent):
        for tmp, _ in written:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for tmp, path in written:
        os.replace(tmp, path)
    if not _syncfs(written[0][1].parent):
        for directory in {path.parent for _, path in written}:
            fsync_directory(directory)


def _syncfs(directory: Path) -> bool:
    """syncfs(2) of the file system holding ``directory`` (one journal commit for everything written there);
    False where there is none (not Linux), and the caller fsyncs file by file."""
    if _libc is None:
        return False
    fd = os.open(directory, os.O_RDONLY)
    try:
        if _libc.syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), str(directory))
    finally:
        os.close(fd)
    return True


def _load_libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.syncfs.argtypes = [ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


_libc = _load_libc()


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointFile(Generic[T]):
    """One checkpoint file; entries are written space-separated and read split on any whitespace."""

    def __init__(
        self,
        path: Path,
        version: int,
        format_entry: Callable[[T], str],
        parse_entry: Callable[[list[str]], T],
    ) -> None:
        self.path = path
        self.version = version
        self._format_entry = format_entry
        self._parse_entry = parse_entry

    def write(self, entries: Iterable[T]) -> None:
        write_atomically(self.path, self.render(entries))

    def render(self, entries: Iterable[T]) -> str:
        lines = [self._format_entry(entry) for entry in entries]
        return "".join(f"{line}\n" for line in [str(self.version), str(len(lines)), *lines])

    def read(self) -> list[T]:
        """The entries; an empty list when the file does not exist. Raises CorruptCheckpointError."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except UnicodeDecodeError:
            raise CorruptCheckpointError(self.path, "not UTF-8 text") from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) < 2:
            raise CorruptCheckpointError(self.path, "missing version or entry count line")
        version, count = self._parse_int(lines[0], "version"), self._parse_int(lines[1], "entry count")
        if version != self.version:
            raise CorruptCheckpointError(self.path, f"unsupported version {version}, expected {self.version}")
        if count != len(lines) - 2:
            raise CorruptCheckpointError(self.path, f"declares {count} entries but holds {len(lines) - 2}")
        entries = []
        for line in lines[2:]:
            try:
                entries.append(self._parse_entry(line.split()))
            except (ValueError, IndexError):
                raise CorruptCheckpointError(self.path, f"malformed line {line!r}") from None
        return entries

    def _parse_int(self, line: str, what: str) -> int:
        try:
            return int(line.strip())
        except ValueError:
            raise CorruptCheckpointError(self.path, f"{what} line {line!r} is not a number") from None


def _fields(parts: list[str], n: int) -> list[str]:
    if len(parts) != n:
        raise ValueError(f"expected {n} fields, got {len(parts)}")
    return parts


class OffsetCheckpointFile:
    """``<topic> <partition> <offset>`` per line: recovery points, high watermarks, log start offsets."""

    VERSION = 0

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[tuple[str, int], int]] = CheckpointFile(
            path, self.VERSION, _format_offset_entry, _parse_offset_entry
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self._file.write(sorted(offsets.items()))

    def read(self) -> dict[tuple[str, int], int]:
        return dict(self._file.read())


def _format_offset_entry(entry: tuple[tuple[str, int], int]) -> str:
    (topic, partition), offset = entry
    return f"{topic} {partition} {offset}"


def _parse_offset_entry(parts: list[str]) -> tuple[tuple[str, int], int]:
    topic, partition, offset = _fields(parts, 3)
    return (topic, int(partition)), int(offset)


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCheckpointFile:
    """``<epoch> <start offset>`` per line, one file per partition directory."""

    VERSION = 0

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, self.VERSION, lambda e: f"{e.epoch} {e.start_offset}", _parse_epoch_entry
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, entries: Iterable[EpochEntry]) -> None:
        self._file.write(entries)

    def render(self, entries: Iterable[EpochEntry]) -> str:
        return self._file.render(entries)

    def read(self) -> list[EpochEntry]:
        return self._file.read()


def _parse_epoch_entry(parts: list[str]) -> EpochEntry:
    epoch, start_offset = _fields(parts, 2)
    return EpochEntry(int(epoch), int(start_offset))
