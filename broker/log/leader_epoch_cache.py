"""LeaderEpochFileCache: which leader epoch began at which offset, persisted on every change."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from broker.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from broker.log.checkpoint_flusher import PendingWrite

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """Entries (epoch, start offset), strictly increasing in both columns.

    ``log_end_offset`` is read when answering for the latest epoch, as Kafka's cache reads the log's.
    The truncation *policies* that use this cache (KIP-101/279) live with the replica fetcher.

    Persisting: a truncation writes the checkpoint at once. An ``assign`` of a newer epoch (a new leader's
    epoch, the first batch of an epoch) may be handed to ``defer`` (Kafka 3.7, KAFKA-15046):
    the file is then written later, off the loop, by the log's checkpoint flusher. That is safe because the
    entry is rebuilt if a crash loses it: recovery re-reads the epochs of every batch above the recovery point,
    and ``flush_pending`` runs before the recovery point moves (``Log.flush``); an epoch with no batch yet,
    lost, only makes the broker's answer for it the previous epoch's, which is what its log holds. Each
    write carries the generation of the content it writes, under a lock: an older content never replaces a
    newer one, whichever thread comes last.
    """

    def __init__(
        self,
        checkpoint: LeaderEpochCheckpointFile | None,
        log_end_offset: Callable[[], int],
        entries: list[EpochEntry] | None = None,
    ) -> None:
        self._checkpoint = checkpoint
        self._log_end_offset = log_end_offset
        self._entries: list[EpochEntry] = list(entries or [])
        # returns False when it cannot defer; the change is then written at once
        self.defer: Callable[[LeaderEpochFileCache], bool] | None = None
        self._generation = 0   # bumped by every change
        self._written = 0      # the generation the file holds
        self._write_lock = threading.Lock()
        self._closed = False

    @classmethod
    def load(cls, checkpoint: LeaderEpochCheckpointFile, log_end_offset: Callable[[], int]) -> LeaderEpochFileCache:
        """The cache as last checkpointed. Raises CorruptCheckpointError."""
        return cls(checkpoint, log_end_offset, checkpoint.read())

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed.

        Kafka's rule: nothing to do if it is the latest epoch and does not start earlier; otherwise
        first drop every entry from the end whose epoch or start offset is not below the new one.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"cannot assign epoch {epoch} at offset {start_offset}")
        if self._entries:
            latest = self._entries[-1]
            if epoch == latest.epoch and start_offset >= latest.start_offset:
                return False
        # An entry of an older epoch starting at or after the new one (an empty epoch: a new leader's at its LEO
        # is replaced at that same offset by the next leader's) is dropped by recovery too, when it meets the
        # newer epoch's batch: such a change may be deferred. Dropping a newer epoch is a truncation.
        epoch_went_back = False
        while self._entries and (self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset):
            removed = self._entries.pop()
            epoch_went_back = epoch_went_back or removed.epoch >= epoch
            # every new leader of an empty partition does it: a line per partition, hundreds per LeaderAndIsr
            log.log(logging.INFO if removed.epoch >= epoch else logging.DEBUG,
                    "leader epoch cache: dropped %s, superseded by epoch %d at %d", removed, epoch, start_offset)
        self._entries.append(EpochEntry(epoch, start_offset))
        if epoch_went_back:
            self._flush()  # a truncation: written at once
        else:
            self._generation += 1
            if self.defer is None or not self.defer(self):
                self._write(self._generation, list(self._entries))
        return True

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as an OffsetsForLeaderEpoch response carries them (KIP-279).

        The end offset of an epoch is the start offset of the next larger epoch, or the log end
        offset for the latest epoch; a request older than every entry gets the first start offset.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, self._log_end_offset()
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [e for e in self._entries if e.epoch <= requested_epoch]
        if not floor:
            return requested_epoch, higher.start_offset
        return floor[-1].epoch, higher.start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds ``offset`` (for ListOffsets answers), if known."""
        found = None
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        keep = [e for e in self._entries if e.start_offset < end_offset]
        if len(keep) != len(self._entries):
            self._entries = keep
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries starting at or before ``start_offset``; the last dropped epoch now starts there."""
        dropped = [e for e in self._entries if e.start_offset <= start_offset]
        if not dropped or (len(dropped) == 1 and dropped[0].start_offset == start_offset):
            return
        self._entries = [EpochEntry(dropped[-1].epoch, start_offset)] + [
            e for e in self._entries if e.start_offset > start_offset
        ]
        self._flush()

    def clear_and_flush(self) -> None:
        self._entries = []
        self._flush()

    @property
    def has_pending_write(self) -> bool:
        return self._checkpoint is not None and not self._closed and self._written < self._generation

    def take_pending_write(self) -> PendingWrite | None:
        """On the loop: the pending content, for another thread to write, or None if the file is current."""
        if not self.has_pending_write:
            return None
        assert self._checkpoint is not None
        generation = self._generation
        return PendingWrite(self._checkpoint.path, self._checkpoint.render(self._entries),
                            lambda: self._begin_write(generation), lambda ok: self._end_write(generation, ok))

    def _begin_write(self, generation: int) -> bool:
        self._write_lock.acquire()
        if self._closed or generation <= self._written:
            self._write_lock.release()
            return False
        return True

    def _end_write(self, generation: int, ok: bool) -> None:
        if ok:
            self._written = generation
        self._write_lock.release()

    def flush_pending(self) -> None:
        """Writes a deferred change now (before the recovery point moves, at a clean shutdown)."""
        if self.has_pending_write:
            self._write(self._generation, list(self._entries))

    def close(self) -> None:
        """The log is going away (deleted): a write still pending or under way in another thread is dropped,
        and none starts after this returns."""
        with self._write_lock:
            self._closed = True

    def _flush(self) -> None:
        self._generation += 1
        self._write(self._generation, list(self._entries))

    def _write(self, generation: int, entries: list[EpochEntry]) -> None:
        if self._checkpoint is None:
            return
        with self._write_lock:
            if self._closed or generation <= self._written:
                return
            self._checkpoint.write(entries)
            self._written = generation
