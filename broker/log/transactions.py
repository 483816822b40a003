"""The log side of transactions (KIP-98): control records, the ongoing and completed transactions a log holds,
its first unstable offset, and the aborted transaction index (``.txnindex``), as Kafka 2.8's
ProducerStateManager (ongoingTxns, unreplicatedTxns, lastStableOffset), TransactionIndex and
ControlRecordType/EndTransactionMarker.

``TransactionTracker`` is pure: the log feeds it every batch it appends (leader and follower) or replays at
load, and writes the aborted transactions it returns to the ``.txnindex`` of the segment holding the marker.
``TransactionIndex`` is the file: 34-byte big-endian entries, appended only, cut at truncation.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.log.record_batch import HEADER_SIZE, TRANSACTIONAL_FLAG, BatchHeader, read_varint

# ControlRecordType: key = int16 version (0), int16 type. 2 and 3 are Raft's (KIP-595); other types are UNKNOWN.
CONTROL_KEY = struct.Struct(">hh")
ABORT, COMMIT = 0, 1
CONTROL_KEY_VERSION = 0
# EndTransactionMarker: value = int16 version (0), int32 coordinator epoch.
END_TXN_MARKER_VALUE = struct.Struct(">hi")
END_TXN_MARKER_VERSION = 0

# TransactionIndex: version int16 (0), producerId int64, firstOffset int64, lastOffset int64, lastStableOffset int64.
TXN_INDEX_ENTRY = struct.Struct(">hqqqq")
TXN_INDEX_ENTRY_SIZE = TXN_INDEX_ENTRY.size  # 34
TXN_INDEX_VERSION = 0
TXN_INDEX_SUFFIX = ".txnindex"


def is_transactional(header: BatchHeader) -> bool:
    return bool(header.attributes & TRANSACTIONAL_FLAG)


def _control_key(view: memoryview) -> tuple[int, int] | None:
    """(type, position of the record's value) from the key of a control batch's (first) record; None when the batch
    has no record or its key is not a control key (Kafka's ControlRecordType.parse reads the same key). Control
    batches are written uncompressed (the coordinator's markers always are)."""
    try:
        position = HEADER_SIZE
        _, position = read_varint(view, position)  # record length
        position += 1  # attributes
        _, position = read_varint(view, position)  # timestamp delta
        _, position = read_varint(view, position)  # offset delta
        key_length, position = read_varint(view, position)
        if key_length < CONTROL_KEY.size:
            return None
        version, control_type = CONTROL_KEY.unpack_from(view, position)
    except (IndexError, struct.error):
        return None
    return (control_type, position + key_length) if version >= 0 else None


def control_record_type(batch: bytes | bytearray | memoryview) -> int | None:
    """The type of a control batch's (first) record: ABORT, COMMIT, another known or unknown type; None when the
    batch has no record or its key is not a control key."""
    key = _control_key(memoryview(batch))
    return None if key is None else key[0]


def control_record(control_type: int, coordinator_epoch: int) -> tuple[bytes, bytes]:
    """(key, value) of an end-transaction marker record (EndTransactionMarker)."""
    return (CONTROL_KEY.pack(CONTROL_KEY_VERSION, control_type),
            END_TXN_MARKER_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch))


def end_transaction_marker(batch: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of a control batch holding an EndTransactionMarker (ABORT or COMMIT);
    None for any other control record or a batch too short to hold one."""
    view = memoryview(batch)
    key = _control_key(view)
    if key is None or key[0] not in (ABORT, COMMIT):
        return None
    control_type, position = key
    try:
        value_length, position = read_varint(view, position)
        if value_length < END_TXN_MARKER_VALUE.size:
            return None
        _, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(view, position)
    except (IndexError, struct.error):
        return None
    return control_type, coordinator_epoch


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended: the producer's first transactional offset up to the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One ``.txnindex`` entry. ``last_stable_offset``: the log's LSO when the abort marker was written (the first
    offset of the earliest transaction of another producer still open, else last_offset + 1); a fetch stops
    scanning the index at an entry whose LSO passes its upper bound."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return TXN_INDEX_ENTRY.pack(TXN_INDEX_VERSION, self.producer_id, self.first_offset, self.last_offset,
                                    self.last_stable_offset)

    @classmethod
    def decode(cls, data: bytes | memoryview, position: int = 0) -> AbortedTxn:
        version, producer_id, first, last, lso = TXN_INDEX_ENTRY.unpack_from(data, position)
        if version != TXN_INDEX_VERSION:
            raise ValueError(f"unexpected aborted transaction index entry version {version}")
        return cls(producer_id, first, last, lso)


class TransactionTracker:
    """The transactions of one log: open ones by producer (first offset), and completed ones whose marker is not
    yet below the high watermark. Pure; offsets only ever grow while appending, truncation rebuilds from the log."""

    def __init__(self) -> None:
        self._current: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self._ongoing: dict[int, int] = {}  # first offset -> producer id (Kafka's ongoingTxns)
        self._unreplicated: list[CompletedTxn] = []  # by marker offset

    @property
    def ongoing(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return dict(self._current)

    def clear(self) -> None:
        self._current.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    def append(self, batches: Iterable[tuple[BatchHeader, int | None]]) -> list[AbortedTxn]:
        """Batches appended together, with their control record type (None for data batches). Returns the
        aborted transactions to write to the ``.txnindex``. As Log.append: the transactions this append starts
        are open before its markers complete theirs, so they count for the LSO recorded with an abort."""
        completed: list[CompletedTxn] = []
        for header, control_type in batches:
            producer_id = header.producer_id
            if producer_id < 0:
                continue
            if header.is_control:
                if control_type not in (ABORT, COMMIT):
                    continue  # UNKNOWN (and Raft's) control records are ignored
                first = self._current.pop(producer_id, None)
                # an empty transaction (marker without data) affects neither the LSO nor the index
                if first is not None:
                    completed.append(CompletedTxn(producer_id, first, header.base_offset, control_type == ABORT))
            elif is_transactional(header) and producer_id not in self._current:
                self._current[producer_id] = header.base_offset
                self._ongoing[header.base_offset] = producer_id
        aborted = []
        for txn in completed:
            if txn.is_aborted:
                others = [first for first, pid in self._ongoing.items() if pid != txn.producer_id]
                lso = min(others) if others else txn.last_offset + 1
                aborted.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
            self._ongoing.pop(txn.first_offset, None)
            self._unreplicated.append(txn)
        return aborted

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction that is open or whose marker is not below the high
        watermark (Kafka drops the latter when the HW passes the marker); None when there is none."""
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]
        firsts = [t.first_offset for t in self._unreplicated]
        firsts.extend(self._ongoing)
        return min(firsts) if firsts else None


def last_stable_offset(high_watermark: int, first_unstable_offset: int | None) -> int:
    """Kafka's Log.lastStableOffset: the first unstable offset if below the high watermark, else the HW."""
    if first_unstable_offset is not None and first_unstable_offset < high_watermark:
        return first_unstable_offset
    return high_watermark


class TransactionIndex:
    """A segment's ``<base>.txnindex``: the aborted transactions whose ABORT marker lies in the segment, in marker
    order. Created on the first append (a segment without aborts has no file); entries are kept in memory."""

    def __init__(self, path: Path, *, new: bool) -> None:
        self.path = path
        if new:
            path.unlink(missing_ok=True)
        self._entries: list[AbortedTxn] | None = [] if new else None

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = list(self._read())
        return list(self._entries)

    def _read(self) -> Iterator[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        # A torn last entry (a crash mid-write) is ignored; the segment's recovery rewrites the file.
        for position in range(0, len(data) - TXN_INDEX_ENTRY_SIZE + 1, TXN_INDEX_ENTRY_SIZE):
            yield AbortedTxn.decode(data, position)

    def sanity_check(self, base_offset: int) -> None:
        """Kafka's TransactionIndex.sanityCheck, plus whole entries: raises ValueError for a file that cannot be
        this segment's index (the segment is then recovered and the index rebuilt)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            self._entries = []
            return
        if size % TXN_INDEX_ENTRY_SIZE:
            raise ValueError(f"{self.path} holds {size} bytes, not whole {TXN_INDEX_ENTRY_SIZE}-byte entries")
        self._entries = None
        for entry in self.entries:  # decode checks each version
            if entry.last_offset < base_offset or entry.first_offset > entry.last_offset:
                raise ValueError(f"{self.path}: entry {entry} does not belong to the segment at {base_offset}")

    def append(self, entry: AbortedTxn) -> None:
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(f"{self.path}: the aborted transaction {entry} does not come after "
                             f"{entries[-1]}: last offsets must increase")
        with open(self.path, "ab") as f:
            f.write(entry.encode())
        assert self._entries is not None
        self._entries.append(entry)

    def reset(self) -> None:
        """Recovery rebuilds the index: empty it (the file goes)."""
        self.path.unlink(missing_ok=True)
        self._entries = []

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset`` (Kafka's TransactionIndex.truncateTo)."""
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) == len(entries):
            return
        self._rewrite(keep)

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            self.reset()
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(e.encode() for e in entries))
        os.replace(tmp, self.path)
        self._entries = list(entries)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's TransactionIndex.collectAbortedTxns: the entries overlapping [fetch_offset, upper bound), and
        whether the search is complete (an entry's LSO reached the upper bound: no later segment can add any)."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def dup_for_sync(self) -> list[int]:
        """A descriptor of the file to fsync elsewhere (see ``IndexFile.dup_for_sync``); none when there is no file."""
        try:
            return [os.open(self.path, os.O_RDONLY)]
        except FileNotFoundError:
            return []

    def flush(self) -> None:
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, new_path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
