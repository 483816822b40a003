"""LogSegment: one ``<base offset>.log`` file with its ``.index``, ``.timeindex`` and (after an abort) ``.txnindex``."""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from broker.log.config import LogConfig
from broker.log.errors import CorruptIndexError
from broker.log.file_records import FileRegion, scan_batch_headers
from broker.log.offset_index import OffsetIndex
from broker.log.record_batch import (
    MAX_RELATIVE_OFFSET,
    NO_TIMESTAMP,
    BatchHeader,
    MalformedBatch,
    check_batch_at,
)
from broker.log.records import CompressionUnavailable, record_offsets_and_timestamps
from broker.log.time_index import TimeIndex
from broker.log.transactions import TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX = ".log", ".index", ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX, SWAP_SUFFIX = ".cleaned", ".swap"  # the log cleaner's new segments, before and at their swap

# Called during recovery with (partitionLeaderEpoch, baseOffset) of each re-validated batch.
EpochAssigner = Callable[[int, int], None]


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """A segment's files plus the bookkeeping Kafka keeps beside them.

    ``size`` counts validated bytes only; the file never holds more once the segment is loaded.
    """

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, created_ms: int, *, new: bool,
                 file_suffix: str = ""):
        self.base_offset = base_offset
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX + file_suffix)
        index_path = directory / segment_file_name(base_offset, INDEX_SUFFIX + file_suffix)
        time_index_path = directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX + file_suffix)
        if new:
            for path in (index_path, time_index_path):
                path.unlink(missing_ok=True)
        self._indexes_missing = not (index_path.exists() and time_index_path.exists())
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if new else 0)
        self._fd: int | None = os.open(self.log_path, flags, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(index_path, base_offset, config.segment_index_bytes)
        self.time_index = TimeIndex(time_index_path, base_offset, config.segment_index_bytes)
        # the aborted transactions whose marker is here; created on the first abort (Kafka's lazy TransactionIndex)
        self.txn_index = TransactionIndex(directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX + file_suffix),
                                          new=new)
        # set by recover(): the log replays this segment's transactions into the emptied .txnindex
        self.txn_index_needs_rebuild = False
        self.created_ms = created_ms
        self._index_interval_bytes = config.index_interval_bytes
        self._bytes_since_last_index_entry = 0
        self._next_offset = base_offset
        # (timestamp, offset) of the largest batch maxTimestamp so far; None = load lazily from disk.
        self._max_timestamp: tuple[int, int] | None = (NO_TIMESTAMP, base_offset) if new else None
        self._first_batch_timestamp: int | None = None

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int, *,
               file_suffix: str = "") -> LogSegment:
        """A new empty segment; the log cleaner writes its segments with ``file_suffix=".cleaned"`` (Kafka's
        LogSegment.open with a file suffix) and renames them at the swap (:meth:`change_file_suffixes`)."""
        return cls(directory, base_offset, config, now_ms, new=True, file_suffix=file_suffix)

    @classmethod
    def open(cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        """An existing segment; call :meth:`sanity_check` or :meth:`recover` before using it."""
        return cls(directory, base_offset, config, now_ms, new=False)

    @property
    def fd(self) -> int:
        assert self._fd is not None, f"{self.log_path} is closed"
        return self._fd

    @property
    def next_offset(self) -> int:
        """One past the last offset stored here (the base offset when empty)."""
        return self._next_offset

    # ----------------------------------------------------------------------------------------- load

    def sanity_check(self) -> None:
        """Trust a segment that needs no recovery, after cheap checks.

        Loads both indexes (CorruptIndexError if they make no sense) and walks the batch headers from
        the last index entry to the end of the file (MalformedBatch on a torn or broken tail).
        """
        if self._indexes_missing:
            raise CorruptIndexError(f"index files of {self.log_path} are missing")
        try:
            self.txn_index.sanity_check(self.base_offset)
        except ValueError as e:
            raise CorruptIndexError(str(e)) from None
        self.offset_index.load(self.size)
        self.time_index.load()
        if self.time_index.entries > self.offset_index.entries + 1:
            # Time entries are written with offset entries, plus one when the segment rolls.
            raise CorruptIndexError(f"{self.time_index.path} has more entries than {self.offset_index.path} allows")
        _, position = self.offset_index.lookup_by_position(self.size)
        next_offset = self.base_offset
        for _, header in scan_batch_headers(self.fd, position, self.size):
            next_offset = header.next_offset
        if self.offset_index.entries and next_offset <= self.offset_index.last_entry()[0]:
            raise CorruptIndexError(f"{self.offset_index.path} points past the data of {self.log_path}")
        if self.time_index.entries and self.time_index.last_entry()[1] >= next_offset:
            raise CorruptIndexError(f"{self.time_index.path} points past the data of {self.log_path}")
        self._next_offset = next_offset
        self._restore_index_counter()

    def recover(self, assign_epoch: EpochAssigner | None = None) -> int:
        """Re-validate every batch, rebuild both indexes, cut at the first bad byte. Returns bytes cut.

        Kafka's rule: a header that does not fit, a size below the header size, a wrong magic or CRC,
        or offsets that go backwards end the valid data; everything from there is truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.txn_index_needs_rebuild = True
        self._bytes_since_last_index_entry = 0
        self._max_timestamp = (NO_TIMESTAMP, self.base_offset)
        self._first_batch_timestamp = None
        file_size = os.fstat(self.fd).st_size
        position, next_offset, problem = 0, self.base_offset, None
        if file_size:
            with mmap.mmap(self.fd, file_size, access=mmap.ACCESS_READ) as data:
                while position < file_size:
                    try:
                        header = check_batch_at(data, position, file_size)
                    except MalformedBatch as e:
                        problem = str(e)
                        break
                    if header.base_offset < next_offset or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
                        offsets = f"{header.base_offset}..{header.last_offset}"
                        problem = f"batch at position {position} has offsets {offsets}, out of order"
                        break
                    if position == 0:
                        self._first_batch_timestamp = header.max_timestamp
                    self._index_batch(position, header)
                    if assign_epoch is not None and header.partition_leader_epoch >= 0:
                        assign_epoch(header.partition_leader_epoch, header.base_offset)
                    next_offset = header.next_offset
                    position += header.size
        self._next_offset = next_offset
        self.size = position
        if position < file_size:
            os.ftruncate(self.fd, position)
            log.warning("%s: cut %d bytes at position %d: %s", self.log_path, file_size - position, position, problem)
        return file_size - position

    # --------------------------------------------------------------------------------------- append

    def append(self, data: bytes | bytearray | memoryview, batches: Sequence[tuple[int, BatchHeader]]) -> None:
        """Write validated batches (positions relative to ``data``) at the end, then index them."""
        self._ensure_max_timestamp()
        start = self.size
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(self.fd, view[written:], start + written)
            for position, header in batches:
                if start + position == 0:
                    self._first_batch_timestamp = header.max_timestamp
                self._index_batch(start + position, header)
        except OSError:
            # A full disk fails a write part-way: cut the file back to the last whole batch, so nothing of a
            # batch that was refused stays behind. Should the cut fail too, the next start's recovery cuts
            # the torn tail. The in-memory indexes may now be ahead of the file; the caller takes the log
            # directory offline, so they are never used again.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise
        self.size = start + len(view)
        self._next_offset = batches[-1][1].next_offset

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        # One rule for appends and for recovery, applied per batch, so a rebuilt index equals the
        # incrementally written one: an entry when more than index.interval.bytes were appended since
        # the previous entry (so never for the first batch), pointing at this batch's start.
        assert self._max_timestamp is not None
        if header.max_timestamp > self._max_timestamp[0]:
            self._max_timestamp = (header.max_timestamp, header.last_offset)
        if self._bytes_since_last_index_entry > self._index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(*self._max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += header.size

    def _restore_index_counter(self) -> None:
        last = self.offset_index.last_entry()
        self._bytes_since_last_index_entry = self.size - (last[1] if last else 0)

    # ----------------------------------------------------------------------------------------- roll

    def should_roll(
        self, *, incoming_bytes: int, max_timestamp: int, last_offset: int, now_ms: int, config: LogConfig
    ) -> bool:
        """Kafka's roll conditions, checked before each append."""
        if self.size > config.segment_bytes - incoming_bytes:
            return True
        if self.size > 0 and self._time_waited_for_roll(now_ms, max_timestamp) > config.segment_ms:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return last_offset - self.base_offset > MAX_RELATIVE_OFFSET

    def _time_waited_for_roll(self, now_ms: int, max_timestamp: int) -> int:
        # Kafka measures segment age by record time (first batch's maxTimestamp) when there is one.
        first = self.first_batch_timestamp()
        if first is not None and first >= 0:
            return max_timestamp - first
        return now_ms - self.created_ms

    def first_batch_timestamp(self) -> int | None:
        if self._first_batch_timestamp is None and self.size > 0:
            for _, header in scan_batch_headers(self.fd, 0, self.size):
                self._first_batch_timestamp = header.max_timestamp
                break
        return self._first_batch_timestamp

    def on_become_inactive(self) -> None:
        """A rolled segment's time index ends with its largest timestamp (Kafka's final entry)."""
        self._ensure_max_timestamp()
        assert self._max_timestamp is not None
        self.time_index.maybe_append(*self._max_timestamp, skip_full_check=True)

    def reopen_as_active(self) -> None:
        """Undo :meth:`on_become_inactive`: keep only time entries written with an offset entry.

        Every time entry is written together with an offset entry and never points past it; only the
        final entry of a roll does. Dropping entries beyond the last offset entry therefore leaves
        exactly what a rebuild of this segment would produce.
        """
        last = self.offset_index.last_entry()
        self.time_index.truncate_after(last[0] if last else self.base_offset - 1)
        self._max_timestamp = None

    # ----------------------------------------------------------------------------------------- read

    def translate_offset(self, offset: int, starting_position: int = 0) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``, if any."""
        _, indexed_position = self.offset_index.lookup(offset)
        start = max(indexed_position, starting_position)
        for position, header in scan_batch_headers(self.fd, start, self.size):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(self, start_offset: int, max_bytes: int, *, max_position: int, min_one_message: bool) -> FileRegion | None:
        """Whole batches from the one holding ``start_offset``, ending at or before ``max_position``.

        None when no batch here reaches ``start_offset``. The first batch is returned even when larger
        than ``max_bytes`` if ``min_one_message`` (KIP-74), so a consumer can always make progress.
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start, first = found
        limit = min(max_position, self.size)
        first_end = start + first.size
        if first_end > limit:
            return self._region(start, 0)
        wanted_end = min(limit, start + max_bytes)
        if wanted_end < first_end:
            return self._region(start, first.size if min_one_message else 0)
        # An index entry marks a batch start; everything before one at or below wanted_end fits.
        _, indexed_position = self.offset_index.lookup_by_position(wanted_end)
        end = max(first_end, indexed_position)
        for position, header in scan_batch_headers(self.fd, end, limit):
            if position + header.size > wanted_end:
                break
            end = position + header.size
        return self._region(start, end - start)

    def _region(self, position: int, size: int) -> FileRegion:
        return FileRegion(self.log_path, self.fd, position, size)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int, int] | None:
        """(timestamp, offset, leader epoch) of the first record at or after ``starting_offset`` whose
        timestamp is >= ``timestamp``; the time index narrows the scan (Kafka's ListOffsets rule).

        Records of a batch that cannot be read here (its codec's library missing, or records expanding past
        codecs.MAX_DECOMPRESSED_BATCH_BYTES) give the batch's first offset (never later than Kafka's answer) with
        the batch's maxTimestamp.
        """
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, start = self.offset_index.lookup(max(indexed_offset, starting_offset))
        for position, header in scan_batch_headers(self.fd, start, self.size):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            batch = os.pread(self.fd, header.size, position)
            try:
                for offset, record_timestamp in record_offsets_and_timestamps(batch):
                    if record_timestamp >= timestamp and offset >= starting_offset:
                        return record_timestamp, offset, header.partition_leader_epoch
            except CompressionUnavailable:
                return (
                    header.max_timestamp,
                    max(header.base_offset, starting_offset),
                    header.partition_leader_epoch,
                )
        return None

    @property
    def largest_timestamp(self) -> int:
        """Largest batch timestamp, or the file's modification time when there is none (Kafka's rule)."""
        self._ensure_max_timestamp()
        assert self._max_timestamp is not None
        if self._max_timestamp[0] >= 0:
            return self._max_timestamp[0]
        return int(os.stat(self.log_path).st_mtime * 1000)

    def _ensure_max_timestamp(self) -> None:
        if self._max_timestamp is not None:
            return
        # The last time entry holds the maximum up to its offset; only later batches can beat it.
        timestamp, offset = self.time_index.last_entry()
        _, position = self.offset_index.lookup(offset)
        for _, header in scan_batch_headers(self.fd, position, self.size):
            if header.max_timestamp > timestamp:
                timestamp, offset = header.max_timestamp, header.last_offset
        self._max_timestamp = (timestamp, offset)

    # ------------------------------------------------------------------------------------- truncate

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Remove the batch holding ``offset`` and everything after it. Returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        self.offset_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        self.reopen_as_active()
        removed = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self._restore_index_counter()
        if position == 0:
            self._next_offset = self.base_offset
            self._first_batch_timestamp = None
            self.created_ms = now_ms
        else:
            self._next_offset = header.base_offset
        return removed

    # ---------------------------------------------------------------------------------------- files

    def dup_for_sync(self) -> list[int]:
        """Descriptors of its own of the segment's files, for :meth:`flush`'s fsyncs in a thread (Log.roll): they stay
        valid if the segment is closed, renamed or deleted meanwhile. The caller closes them."""
        fds = [os.dup(self.fd)]
        try:
            for index in (self.offset_index, self.time_index, self.txn_index):
                fds.extend(index.dup_for_sync())
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the three files from ``<name><old_suffix>`` to ``<name><new_suffix>``; the indexes first, so a
        log file under the new name means its indexes were renamed too (the swap's commit point is the log)."""
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(index.path.with_name(index.path.name.removesuffix(old_suffix) + new_suffix))
        new_log_path = self.log_path.with_name(self.log_path.name.removesuffix(old_suffix) + new_suffix)
        os.replace(self.log_path, new_log_path)
        self.log_path = new_log_path

    @property
    def last_modified_ms(self) -> int:
        """The log file's modification time (Kafka's LogSegment.lastModified, which the delete horizon uses)."""
        return int(os.fstat(self.fd).st_mtime * 1000)

    def set_last_modified_ms(self, ms: int) -> None:
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))

    def rename_to_deleted(self) -> None:
        """First step of Kafka's asynchronous delete: open regions stay readable until :meth:`delete`."""
        new_log_path = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.replace(self.log_path, new_log_path)
        self.log_path = new_log_path
        for index in (self.offset_index, self.time_index, self.txn_index):
            if index.path.exists():
                index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self._next_offset})"
