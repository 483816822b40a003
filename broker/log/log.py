"""Log: one partition replica's segments — append, read, truncate, retain, flush."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import shutil
from bisect import bisect_right
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from kio.schema.errors import ErrorCode

from broker.log.cleaner.batch_filter import CodecUnavailable, keys_of
from broker.log.checkpoint_flusher import CheckpointFlusher, Deferred
from broker.log.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    fsync_directory,
)
from broker.log.config import LogConfig, TimestampType
from broker.log.errors import (
    CorruptCheckpointError,
    InvalidRecordBatchError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from broker.log.file_records import FileRegion, scan_batch_headers
from broker.log.leader_epoch_cache import LeaderEpochFileCache
from broker.log.log_dir_failure_channel import LogDirFailureChannel
from broker.log.log_loader import load_segments
from broker.log.record_batch import (
    NO_TIMESTAMP,
    BatchHeader,
    assign_offset_and_epoch,
    check_client_batch,
    parse_header,
    set_log_append_time,
    split_record_set,
)
from broker.log.retention import deletable_segments
from broker.log.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment
from broker.log.transactions import (
    AbortedTxn,
    TransactionTracker,
    control_record_type,
    end_transaction_marker,
    last_stable_offset,
)

log = logging.getLogger(__name__)

Clock = Callable[[], int]  # milliseconds

FLUSHED_OFFSET_CHECKPOINT = "kafkasim-flushed-offset-checkpoint"
EARLIEST_TIMESTAMP = -2  # ListOffsets sentinels
LATEST_TIMESTAMP = -1

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_Method = TypeVar("_Method", bound=Callable[..., Any])
_roll_flusher: ThreadPoolExecutor | None = None


def _roll_flush_executor() -> ThreadPoolExecutor:
    """One thread for the flushes a roll schedules (Kafka's scheduler task "flush-log"), shared by the logs: one
    fsync after another, as they would reach the disk anyway."""
    global _roll_flusher
    if _roll_flusher is None:
        _roll_flusher = ThreadPoolExecutor(1, thread_name_prefix="log-roll-flush")
    return _roll_flusher


def _fsync_all(fds: list[int]) -> None:
    """In the flush thread: fsync each descriptor, close them all, raise the first error."""
    error: OSError | None = None
    for fd in fds:
        try:
            if error is None:
                os.fsync(fd)
        except OSError as exc:
            error = exc
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
    if error is not None:
        raise error


def _storage_guarded(action: str) -> Callable[[_Method], _Method]:
    """The method runs under the log dir failure channel's guard (Kafka's maybeHandleIOException): an OSError
    takes the whole log directory offline and surfaces as KafkaStorageError; once the directory is offline
    the method is refused the same way, so nothing writes to a disk that has failed."""

    def wrap(method: _Method) -> _Method:
        @functools.wraps(method)
        def guarded(self: Log, *args: Any, **kwargs: Any) -> Any:
            parent = self.log_dir
            with self.log_dir_failure_channel.guard(
                    parent, lambda: f"Error while {action} {self.topic}-{self.partition} in dir {parent}"):
                return method(self, *args, **kwargs)

        return guarded  # type: ignore[return-value]

    return wrap


def parse_topic_partition(directory_name: str) -> tuple[str, int]:
    """``<topic>-<partition>`` as Kafka names partition directories."""
    match = _PARTITION_DIR.match(directory_name)
    if match is None:
        raise ValueError(f"{directory_name!r} is not a partition directory name (<topic>-<partition>)")
    return match.group(1), int(match.group(2))


def _check_keys_for_compaction(records: bytes | bytearray | memoryview, position: int, header: BatchHeader,
                               topic: str, partition: int) -> None:
    """Kafka's LogValidator.validateKey: a compacted topic refuses a record without a key (INVALID_RECORD), which
    compaction could never replace nor delete. A batch of a codec this process cannot read goes unchecked."""
    if header.is_control:
        return
    try:
        keys = [key for _, key in keys_of(memoryview(records)[position:position + header.size], header)]
    except CodecUnavailable:
        return
    if any(key is None for key in keys):
        raise InvalidRecordBatchError(
            ErrorCode.invalid_record,
            f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}.")


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did; the Produce response and the replica manager read it."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    valid_bytes: int
    batch_count: int

    @property
    def record_count(self) -> int:
        return self.last_offset - self.first_offset + 1


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int | None


class Log:
    """A partition replica's log in ``<log dir>/<topic>-<partition>``. Not thread-safe: one owner.

    Offsets: ``log_start_offset`` <= every readable offset < ``log_end_offset`` (LEO). The
    ``recovery_point`` is the offset below which everything has been fsynced.

    Every operation that touches files runs under the log dir failure channel's guard (Kafka's
    maybeHandleIOException): an OSError takes the whole log directory offline and surfaces as
    KafkaStorageError, and once the directory is offline every such operation is refused the same way.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        segments: list[LogSegment],
        *,
        leader_epoch_cache: LeaderEpochFileCache,
        log_start_offset: int,
        recovery_point: int,
        log_dir_failure_channel: LogDirFailureChannel | None = None,
    ) -> None:
        self.directory = directory
        # the guard on every read and append looks the directory up: a Path built and hashed per call cost a
        # tenth of an idle broker's CPU at 1000 partitions
        self.log_dir = directory.parent
        self.log_dir_failure_channel = log_dir_failure_channel or LogDirFailureChannel()
        self.topic, self.partition = parse_topic_partition(directory.name)
        self.config = config
        self._clock = clock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._log_end_offset = segments[-1].next_offset
        self._recovery_point = min(recovery_point, self._log_end_offset)
        self._last_flush_ms = clock()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        # told when segments start waiting for file.delete.delay.ms (the log manager then looks only at those logs)
        self.on_deletes_scheduled: Callable[[Log], None] | None = None
        self._directory_dirty = False
        self._truncations = 0  # a background flush's recovery point stands only if no truncation came meanwhile
        self._flushed_offset_file = OffsetCheckpointFile(directory / FLUSHED_OFFSET_CHECKPOINT)
        self._flushed_offset = self._recovery_point
        self.leader_epoch_cache = leader_epoch_cache
        self._txns = TransactionTracker()
        # replayed from the batches on first use, not at open, so start-up stays as fast as before transactions;
        # at once when recovery re-validated segments, whose .txnindex is then rebuilt (as Kafka's recovery does)
        self._txns_loaded = False
        if any(segment.txn_index_needs_rebuild for segment in segments):
            self._replay_transactions()

    # ----------------------------------------------------------------------------------------- open

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        clock: Clock,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        had_clean_shutdown: bool = False,
        log_dir_failure_channel: LogDirFailureChannel | None = None,
        checkpoint_flusher: CheckpointFlusher | None = None,
    ) -> Log:
        """Open (or create) the partition directory; recover it if the last shutdown was not clean.
        ``checkpoint_flusher``: where the leader-epoch checkpoint's deferred writes go (see LeaderEpochFileCache);
        without one every change is written at once."""
        parse_topic_partition(directory.name)
        directory.mkdir(parents=True, exist_ok=True)
        now = clock()
        opened: list[Log] = []
        epoch_checkpoint = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
        try:
            epoch_entries, rebuild_epochs = epoch_checkpoint.read(), False
        except CorruptCheckpointError as e:
            log.error("%s; rebuilding the leader epoch cache from the batch headers", e)
            epoch_entries, rebuild_epochs = [], True
        epochs = LeaderEpochFileCache(
            epoch_checkpoint, lambda: opened[0].log_end_offset if opened else 0, epoch_entries
        )

        def assign_recovered_epoch(epoch: int, start_offset: int) -> None:
            # Kafka's recovery only records epochs newer than the cache already knows.
            if epochs.latest_epoch is None or epoch > epochs.latest_epoch:
                epochs.assign(epoch, start_offset)

        segments = load_segments(
            directory,
            config,
            now,
            recovery_point=recovery_point,
            had_clean_shutdown=had_clean_shutdown,
            assign_epoch=assign_recovered_epoch,
        )
        if rebuild_epochs:
            epochs.clear_and_flush()
            for segment in segments:
                for _, header in scan_batch_headers(segment.fd, 0, segment.size):
                    if header.partition_leader_epoch >= 0:
                        assign_recovered_epoch(header.partition_leader_epoch, header.base_offset)
        if segments:
            log_start_offset = max(log_start_offset, segments[0].base_offset)
            if segments[-1].next_offset < log_start_offset:
                log.warning(
                    "%s: log end is below the log start offset %d; starting empty",
                    directory,
                    log_start_offset,
                )
                for segment in segments:
                    segment.delete()
                segments = []
        if not segments:
            segments = [LogSegment.create(directory, log_start_offset, config, now)]
        leo = segments[-1].next_offset
        instance = cls(
            directory,
            config,
            clock,
            segments,
            leader_epoch_cache=epochs,
            log_start_offset=log_start_offset,
            recovery_point=leo if had_clean_shutdown else recovery_point,
            log_dir_failure_channel=log_dir_failure_channel,
        )
        opened.append(instance)
        epochs.truncate_from_end(leo)
        epochs.truncate_from_start(log_start_offset)
        if config.simulate_unflushed_loss and not had_clean_shutdown:
            instance._lose_unflushed_tail()
        if checkpoint_flusher is not None:
            instance._defer_epoch_checkpoints(checkpoint_flusher)
        return instance

    def _defer_epoch_checkpoints(self, flusher: CheckpointFlusher) -> None:
        cache = self.leader_epoch_cache
        deferred = Deferred(take=cache.take_pending_write, on_error=self._epoch_checkpoint_failed)
        cache.defer = lambda _: flusher.schedule(cache, deferred)

    def _epoch_checkpoint_failed(self, error: OSError) -> None:
        """A deferred write failed in the flusher's thread: the same as a write failing here."""
        try:
            with self.log_dir_failure_channel.guard(
                    self.log_dir, f"Error while writing the leader epoch checkpoint of {self.topic}-{self.partition}"
                                  f" in dir {self.log_dir}"):
                raise error
        except KafkaStorageError as exc:
            log.error("%s", exc)

    def _lose_unflushed_tail(self) -> None:
        # The flushed-offset file is rewritten at every flush and truncation, so it is never older
        # than the recovery-point checkpoint, which the log manager writes only now and then.
        try:
            recorded = self._flushed_offset_file.read().get((self.topic, self.partition))
        except CorruptCheckpointError as e:
            log.error("%s; using the recovery point %d instead", e, self._recovery_point)
            recorded = None
        flushed = self._recovery_point if recorded is None else recorded
        if flushed < self._log_end_offset:
            log.warning(
                "%s-%d: kafkasim.log.simulate.unflushed.loss: dropping offsets %d..%d, never flushed",
                self.topic,
                self.partition,
                flushed,
                self._log_end_offset - 1,
            )
            log_start_offset = self._log_start_offset
            self.truncate_to(flushed)
            if self._log_end_offset < log_start_offset:
                # As at load time: a log ending below its start restarts empty at the start.
                self.truncate_fully_and_start_at(log_start_offset)
        # Everything left was flushed before the crash; flushing again covers the rebuilt indexes.
        self.flush()

    # ------------------------------------------------------------------------------------ properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def truncations(self) -> int:
        """How many truncations this log has had: work planned on its segments (a background flush, a cleaning)
        stands only if the count did not move, since a segment truncated and appended to again may keep its size."""
        return self._truncations

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def topic_partition(self) -> tuple[str, int]:
        return self.topic, self.partition


    # --------------------------------------------------------------------------------------- append

    @_storage_guarded("appending records to")
    def check_online(self) -> None:
        """Raises KafkaStorageError once this log's directory is offline. Kafka's Log.append validates a client
        batch (CRC, producer sequence) inside maybeHandleIOException, whose first step refuses an offline
        directory: a leader answers KAFKA_STORAGE_ERROR there, never a verdict on the batch's sequence."""

    @_storage_guarded("appending records to")
    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int, *,
                         from_coordinator: bool = False) -> LogAppendInfo | None:
        """Validate a producer's record set, assign offsets from the LEO, store it.

        Only baseOffset and partitionLeaderEpoch change (plus maxTimestamp and the CRC when the topic
        uses LogAppendTime). Raises InvalidRecordBatchError and writes nothing if any batch is bad.
        Returns None for an empty record set, which Kafka also accepts as a no-op.
        ``from_coordinator``: Kafka's AppendOrigin.Coordinator, the transaction markers a coordinator has the
        leader write (control batches, which a client's batches may not be); no client rule applies to them.
        """
        config = self.config
        batches = split_record_set(records, max_message_bytes=config.max_message_bytes)
        if not batches:
            return None
        now = self._clock()
        log_append_time = config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
        for _, header in batches if not from_coordinator else ():
            check_client_batch(
                header,
                log_append_time=log_append_time,
                now_ms=now,
                timestamp_difference_max_ms=config.message_timestamp_difference_max_ms,
            )
        if config.compact:
            for position, header in batches:
                _check_keys_for_compaction(records, position, header, self.topic, self.partition)
        self._check_fits_in_segment(len(records))
        data = bytearray(records)
        next_offset = self._log_end_offset
        assigned: list[tuple[int, BatchHeader]] = []
        for position, header in batches:
            assign_offset_and_epoch(data, position, next_offset, leader_epoch)
            if log_append_time:
                set_log_append_time(data, position, header.size, now)
            assigned.append((position, parse_header(data, position)))
            next_offset += header.last_offset_delta + 1
        return self._append(data, assigned, log_append_time=now if log_append_time else NO_TIMESTAMP)

    @_storage_guarded("appending records to")
    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo | None:
        """Store batches fetched from the leader byte for byte, after CRC and offset checks.

        Offsets must increase and start at or above the LEO (gaps are allowed, as in Kafka).
        Raises UnexpectedAppendOffsetError for data below the LEO.
        """
        # No max.message.bytes check: the leader accepted these batches and replicas stay identical.
        batches = split_record_set(records, max_message_bytes=None)
        if not batches:
            return None
        previous_next = None
        for _, header in batches:
            if previous_next is not None and header.base_offset < previous_next:
                raise InvalidRecordBatchError(
                    ErrorCode.unknown_server_error,
                    f"offsets out of order: batch at {header.base_offset} follows one ending at {previous_next - 1}",
                )
            previous_next = header.next_offset
        first = batches[0][1].base_offset
        if first < self._log_end_offset:
            raise UnexpectedAppendOffsetError(first, self._log_end_offset)
        self._check_fits_in_segment(len(records))
        return self._append(memoryview(records), batches, log_append_time=NO_TIMESTAMP)

    def _check_fits_in_segment(self, size: int) -> None:
        if size > self.config.segment_bytes:
            raise InvalidRecordBatchError(
                ErrorCode.record_list_too_large,
                f"{size} bytes cannot fit in a segment of segment.bytes={self.config.segment_bytes}",
            )

    def _append(
        self,
        data: bytes | bytearray | memoryview,
        batches: list[tuple[int, BatchHeader]],
        *,
        log_append_time: int,
    ) -> LogAppendInfo:
        first_offset = batches[0][1].base_offset
        last_offset = batches[-1][1].last_offset
        max_timestamp, offset_of_max = NO_TIMESTAMP, first_offset
        for _, header in batches:
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
        segment = self._maybe_roll(len(data), max_timestamp, first_offset, last_offset)
        segment.append(data, batches)
        self._log_end_offset = last_offset + 1
        if any(header.producer_id >= 0 for _, header in batches):
            self._ensure_transactions(until=first_offset)  # the batches just written are applied below
            typed = [(header, control_record_type(memoryview(data)[position:position + header.size])
                      if header.is_control else None) for position, header in batches]
            for aborted in self._txns.append(typed):
                segment.txn_index.append(aborted)
        for _, header in batches:
            if header.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        if self._log_end_offset - self._recovery_point >= self.config.flush_messages:
            self.flush()
        return LogAppendInfo(
            first_offset=first_offset,
            last_offset=last_offset,
            max_timestamp=max_timestamp,
            offset_of_max_timestamp=offset_of_max,
            log_append_time=log_append_time,
            log_start_offset=self._log_start_offset,
            valid_bytes=len(data),
            batch_count=len(batches),
        )

    @_storage_guarded("writing the leader epoch checkpoint of")
    def maybe_assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """Becoming leader: the new epoch starts at the LEO (Kafka's makeLeader)."""
        self.leader_epoch_cache.assign(leader_epoch, start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        return self.leader_epoch_cache.end_offset_for(leader_epoch)

    # ---------------------------------------------------------------------------------- transactions

    def _ensure_transactions(self, until: int | None = None) -> None:
        """Replay the log's transactions (below ``until``) unless done since the open or the last truncation."""
        if not self._txns_loaded:
            self._replay_transactions(until)

    @_storage_guarded("loading the transactions of")
    def _replay_transactions(self, until: int | None = None) -> None:
        """The transactions open and completed in the log, replayed from its batches below ``until`` (default: all;
        Kafka loads a producer snapshot and replays from it; there are no snapshots here). Segments that recovery
        re-validated get their ``.txnindex`` rebuilt on the way, as Kafka's LogSegment.recover does."""
        self._txns.clear()
        self._txns_loaded = True
        for segment in self._segments:
            rebuild = segment.txn_index_needs_rebuild
            if rebuild:
                segment.txn_index.reset()
            for position, header in scan_batch_headers(segment.fd, 0, segment.size):
                if until is not None and header.base_offset >= until:
                    break
                if header.producer_id < 0:
                    continue
                control_type = None
                if header.is_control:
                    control_type = control_record_type(os.pread(segment.fd, header.size, position))
                for aborted in self._txns.append([(header, control_type)]):
                    if rebuild:
                        segment.txn_index.append(aborted)
            segment.txn_index_needs_rebuild = False

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction open, or decided but with its marker not yet below the
        high watermark (Kafka's ProducerStateManager.firstUnstableOffset); None when there is none."""
        self._ensure_transactions()
        first = self._txns.first_unstable_offset(high_watermark)
        return None if first is None else max(first, self._log_start_offset)

    def last_stable_offset(self, high_watermark: int) -> int:
        """LSO = the first unstable offset if below the high watermark, else the high watermark."""
        return last_stable_offset(high_watermark, self.first_unstable_offset(high_watermark))

    @property
    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        self._ensure_transactions()
        return self._txns.ongoing

    @_storage_guarded("reading the transaction index of")
    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Kafka's Log.collectAbortedTransactions: the aborted transactions overlapping [start, upper bound), from
        the ``.txnindex`` of the segment holding ``start_offset`` on, until one entry's LSO reaches the bound."""
        self._ensure_transactions()
        found: list[AbortedTxn] = []
        for segment in self._segments[self._segment_index(start_offset):]:
            entries, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
            found.extend(entries)
            if complete:  # not before: a transaction begun below the bound may end in any later segment
                break
        return found

    def batch_headers(self) -> Iterator[BatchHeader]:
        """Every stored batch's header, oldest first (tools and tests; not part of the replica-log port)."""
        return (header for header, _ in self.producer_batches())

    def producer_batches(self) -> Iterator[tuple[BatchHeader, int | None]]:
        """Each batch's header with an end-transaction marker's coordinator epoch (None otherwise); a marker is read
        whole (a few dozen bytes), every other batch by its header only."""
        for segment in self.segments:
            for position, header in scan_batch_headers(segment.fd, 0, segment.size):
                marker = end_transaction_marker(os.pread(segment.fd, header.size, position)) \
                    if header.is_control and header.producer_id >= 0 else None
                yield header, None if marker is None else marker[1]

    # ----------------------------------------------------------------------------------------- roll

    def _maybe_roll(self, incoming_bytes: int, max_timestamp: int, first_offset: int, last_offset: int) -> LogSegment:
        segment = self.active_segment
        if segment.should_roll(
            incoming_bytes=incoming_bytes,
            max_timestamp=max_timestamp,
            last_offset=last_offset,
            now_ms=self._clock(),
            config=self.config,
        ):
            return self.roll(first_offset)
        return segment

    @_storage_guarded("rolling a new segment of")
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected, LEO) and flush everything before it."""
        new_base = max(expected_next_offset or 0, self._log_end_offset)
        active = self.active_segment
        if new_base == active.base_offset:
            if active.size:
                raise RuntimeError(f"cannot roll {active}: a segment already starts at {new_base}")
            return active
        active.on_become_inactive()
        segment = LogSegment.create(self.directory, new_base, self.config, self._clock())
        self._segments.append(segment)
        self._bases.append(new_base)
        self._directory_dirty = True
        log.info("%s-%d: rolled new segment at offset %d", self.topic, self.partition, new_base)
        # Kafka schedules this flush ("flush-log") instead of making the append that rolled wait for it; the recovery
        # point then moves to the new base offset
        if not self._flush_in_background(new_base):
            self.flush(new_base)
        return segment

    def _flush_in_background(self, offset: int) -> bool:
        """The roll's flush of everything below ``offset``: the fsyncs in a thread, the recovery point moved on the
        loop once they are done, so the produce or the follower's fetch that rolled does not wait for the disk.
        On a loaded disk those fsyncs took 5-25 ms of the event loop at each roll (the rolled segment's MiB, its
        indexes, the directory), every produce and fetch of the broker waiting; a follower's stall delays an acks=all
        produce as much as the leader's (docs/compaction.md). The recovery point moves only after the fsyncs, and
        not if the log was truncated meanwhile, so recovery never trusts what is not on disk. False (nothing done,
        flush in place) without a running event loop (tools, tests of the log alone) or with simulated loss."""
        if self.config.simulate_unflushed_loss:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if offset <= self._recovery_point:
            return True
        self.leader_epoch_cache.flush_pending()  # recovery rebuilds epochs only above the recovery point
        fds: list[int] = []
        try:
            first = self._segment_index(self._recovery_point)
            for segment in self._segments[first:]:
                if segment.base_offset >= offset and segment is not self._segments[first]:
                    break
                fds.extend(segment.dup_for_sync())
            if self._directory_dirty:  # left dirty: a flush in place meanwhile fsyncs the directory again
                fds.append(os.open(self.directory, os.O_RDONLY))
        except OSError:
            for fd in fds:
                os.close(fd)
            return False  # the flush in place meets the error too, and reports it through the failure channel
        truncations = self._truncations
        future = _roll_flush_executor().submit(_fsync_all, fds)

        def done(_: Future) -> None:  # on the loop
            if future.exception() is not None:
                with contextlib.suppress(KafkaStorageError):
                    self.flush(offset)  # raises again there, and takes the log directory offline as any flush does
                return
            if self._truncations == truncations and offset > self._recovery_point:
                self._recovery_point = min(offset, self._log_end_offset)
                self._last_flush_ms = self._clock()

        def back_to_loop(f: Future) -> None:  # in the flush thread
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the broker stopped): nothing to move
                loop.call_soon_threadsafe(done, f)

        future.add_done_callback(back_to_loop)
        return True

    # ----------------------------------------------------------------------------------------- read

    @_storage_guarded("reading from")
    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FileRegion:
        """Whole batches from the one holding ``start_offset`` (it may start earlier), all below
        ``max_offset`` (default: the LEO), from a single segment. Raises OffsetOutOfRangeError."""
        if start_offset < self._log_start_offset or start_offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} of {self.topic}-{self.partition} is outside "
                f"[{self._log_start_offset}, {self._log_end_offset}]; reset to the log start or end"
            )
        bound = self._log_end_offset if max_offset is None else min(max_offset, self._log_end_offset)
        if start_offset < bound:
            for i in range(self._segment_index(start_offset), len(self._segments)):
                segment = self._segments[i]
                if segment.base_offset >= bound:
                    break
                max_position = segment.size
                if bound < segment.next_offset:
                    found = segment.translate_offset(bound)
                    max_position = found[0] if found else segment.size
                region = segment.read(
                    start_offset, max_bytes, max_position=max_position, min_one_message=min_one_message
                )
                if region is not None:
                    return region
        active = self.active_segment
        return FileRegion(active.log_path, active.fd, active.size, 0)

    @_storage_guarded("reading from")
    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: the first record with a timestamp >= ``timestamp``; -2 earliest, -1 latest."""
        cache = self.leader_epoch_cache
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(
                NO_TIMESTAMP, self._log_start_offset, cache.epoch_for_offset(self._log_start_offset)
            )
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self._log_end_offset, cache.latest_epoch)
        for segment in self._segments:
            if segment.next_offset <= self._log_start_offset or segment.largest_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
            if found is not None:
                found_timestamp, offset, epoch = found
                return TimestampAndOffset(found_timestamp, offset, epoch if epoch >= 0 else None)
        return None

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    # ------------------------------------------------------------------------------------- truncate

    @_storage_guarded("truncating")
    def truncate_to(self, target_offset: int) -> bool:
        """Follower truncation: drop every batch holding an offset >= ``target_offset``.

        A batch that straddles the target goes entirely, so the LEO may end below the target.
        Returns whether anything was removed.
        """
        if target_offset < 0:
            raise ValueError(f"cannot truncate to negative offset {target_offset}")
        if target_offset >= self._log_end_offset:
            return False
        log.info(
            "%s-%d: truncating from LEO %d to %d",
            self.topic,
            self.partition,
            self._log_end_offset,
            target_offset,
        )
        if target_offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(target_offset)
            return True
        keep = bisect_right(self._bases, target_offset)
        # Newest first: a crash part-way leaves a shorter log, never one with a hole.
        self._remove_segments(self._segments[keep:][::-1])
        active = self.active_segment
        active.truncate_to(target_offset, self._clock())
        active.reopen_as_active()
        self._after_truncation()
        return True

    @_storage_guarded("truncating")
    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """A replica that fell off the leader's log start: empty the log, restart it at ``new_offset``."""
        log.info("%s-%d: truncating everything, restarting at offset %d", self.topic, self.partition, new_offset)
        self._remove_segments(self._segments[::-1])
        self._segments.append(LogSegment.create(self.directory, new_offset, self.config, self._clock()))
        self._bases.append(new_offset)
        self.leader_epoch_cache.clear_and_flush()
        self._log_start_offset = new_offset
        self._recovery_point = new_offset  # nothing below the new start is left to flush
        if self.config.simulate_unflushed_loss:
            self._record_flushed_offset(new_offset)
        self._after_truncation()

    def _after_truncation(self) -> None:
        self._truncations += 1
        self._log_end_offset = self.active_segment.next_offset
        self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
        self._recovery_point = min(self._recovery_point, self._log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
        self._txns_loaded = False  # the open and decided transactions are replayed again when next needed
        if self.config.simulate_unflushed_loss and self._flushed_offset > self._log_end_offset:
            self._record_flushed_offset(self._log_end_offset)
        self.delete_expired_files()

    # ------------------------------------------------------------------------------------ retention

    @_storage_guarded("moving the log start offset of")
    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool:
        """DeleteRecords, or a follower catching up with the leader's log start offset.

        Whole segments below it go at :meth:`delete_segments_below_log_start` or the next
        :meth:`delete_old_segments`. The caller enforces Kafka's bound of the high watermark; the log only
        refuses offsets beyond its end.
        """
        if new_log_start_offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot move the log start of {self.topic}-{self.partition} to {new_log_start_offset}, "
                f"beyond the log end offset {self._log_end_offset}"
            )
        if new_log_start_offset <= self._log_start_offset:
            return False
        self._log_start_offset = new_log_start_offset
        self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
        return True

    @_storage_guarded("deleting segments of")
    def delete_old_segments(self, high_watermark: int) -> int:
        """Apply retention.ms, retention.bytes and the log start offset; returns segments deleted.

        A compact-only log (cleanup.policy=compact) keeps its segments whatever their age and size, as Kafka's
        deleteOldSegments: only the log start offset (DeleteRecords) removes them; the cleaner shrinks them."""
        time_and_size = self.config.delete
        count, reasons = deletable_segments(
            self._segments,
            log_end_offset=self._log_end_offset,
            high_watermark=high_watermark,
            log_start_offset=self._log_start_offset,
            retention_ms=self.config.retention_ms if time_and_size else -1,
            retention_bytes=self.config.retention_bytes if time_and_size else -1,
            now_ms=self._clock(),
        )
        if count == 0:
            return 0
        log.info("%s-%d: retention deletes %s", self.topic, self.partition, "; ".join(reasons))
        if count == len(self._segments):
            self.roll()  # Kafka keeps an (empty) active segment at the LEO
        self._remove_segments(self._segments[:count])
        if self._segments[0].base_offset > self._log_start_offset:
            self._log_start_offset = self._segments[0].base_offset
            self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self.delete_expired_files()
        return count

    @_storage_guarded("deleting segments of")
    def delete_segments_below_log_start(self, high_watermark: int) -> int:
        """Kafka's deleteLogStartOffsetBreachedSegments alone: every whole segment whose records all lie below
        the log start offset (the next segment starts at or below it), never one holding the high watermark or
        the active segment. Returns segments deleted (renamed ``.deleted``, removed after file.delete.delay.ms)."""
        count, reasons = deletable_segments(
            self._segments,
            log_end_offset=self._log_end_offset,
            high_watermark=high_watermark,
            log_start_offset=self._log_start_offset,
            retention_ms=-1,
            retention_bytes=-1,
            now_ms=self._clock(),
        )
        if count == 0:
            return 0
        log.info("%s-%d: %s", self.topic, self.partition, "; ".join(reasons))
        self._remove_segments(self._segments[:count])
        self.delete_expired_files()
        return count

    @_storage_guarded("swapping cleaned segments into")
    def replace_segments(self, cleaned: LogSegment, old_segments: list[LogSegment], *,
                         sync_directory: bool = True) -> None:
        """Swap the cleaner's new segment in for ``old_segments`` (consecutive, none of them active), crash-safely
        as Kafka's replaceSegments: ``.cleaned`` → ``.swap``, the old segments renamed ``.deleted`` (deleted after
        file.delete.delay.ms, so a fetch reading them finishes), then ``.swap`` stripped. A crash at any step is
        finished at the next load (log_loader): leftover ``.cleaned`` files go, a ``.swap`` log completes its swap.

        ``sync_directory=False`` leaves out the two directory fsyncs, as Kafka 2.8's renames do (its
        ``FileRecords.renameTo`` does not flush the directory): the renames are the kernel's at once, so a process
        crash (kill -9) sees them all, and a journaling file system (ext4, xfs) commits metadata operations in
        their order, so after a power loss a ``.deleted`` name never exists without the ``.swap`` made before it.
        The caller then fsyncs the directory once, off the event loop, before the cleaner's checkpoint
        (:meth:`broker.log.cleaner.manager.CleanerManager.make_durable`): each fsync took 10-100 ms of the loop.
        """
        first = self._segments.index(old_segments[0])
        if self._segments[first:first + len(old_segments)] != old_segments or \
                first + len(old_segments) >= len(self._segments) or cleaned.base_offset != old_segments[0].base_offset:
            raise ValueError(f"{self.topic}-{self.partition}: the cleaned segment {cleaned} does not replace "
                             f"consecutive inactive segments {old_segments}")
        # the cleaned segment's .txnindex is the cleaning's: the aborted transactions whose markers it kept while
        # removing their data (Kafka's CleanedTransactionMetadata); an entry whose marker and data are gone goes
        cleaned.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        if sync_directory:
            fsync_directory(self.directory)
        self._remove_segments(old_segments)
        self._segments.insert(first, cleaned)
        self._bases.insert(first, cleaned.base_offset)
        cleaned.change_file_suffixes(SWAP_SUFFIX, "")
        if sync_directory:
            fsync_directory(self.directory)

    def _remove_segments(self, segments: list[LogSegment]) -> None:
        deadline = self._clock() + self.config.file_delete_delay_ms
        for segment in segments:
            index = self._segments.index(segment)
            del self._segments[index], self._bases[index]
            segment.rename_to_deleted()
            self._pending_deletes.append((deadline, segment))
        self._directory_dirty = True
        if segments and self.on_deletes_scheduled is not None:
            self.on_deletes_scheduled(self)

    @property
    def has_pending_deletes(self) -> bool:
        """Segments renamed to ``.deleted`` wait for ``file.delete.delay.ms`` (:meth:`delete_expired_files`)."""
        return bool(self._pending_deletes)

    @_storage_guarded("deleting segments of")
    def delete_expired_files(self) -> None:
        """Physically delete segments whose ``file.delete.delay.ms`` has passed."""
        if not self._pending_deletes:
            return  # the usual case, asked of every log every second
        now = self._clock()
        due = [s for deadline, s in self._pending_deletes if deadline <= now]
        self._pending_deletes = [(d, s) for d, s in self._pending_deletes if d > now]
        for segment in due:
            segment.delete()

    # ---------------------------------------------------------------------------------------- flush

    @_storage_guarded("flushing")
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, offset); advance the recovery point.
        A deferred leader-epoch checkpoint is written first: recovery rebuilds epochs only above the recovery
        point."""
        self.leader_epoch_cache.flush_pending()
        target = self._log_end_offset if offset is None else min(offset, self._log_end_offset)
        if target <= self._recovery_point:
            return
        first = self._segment_index(self._recovery_point)
        for segment in self._segments[first:]:
            if segment.base_offset >= target and segment is not self._segments[first]:
                break
            segment.flush()
        if self._directory_dirty:
            fsync_directory(self.directory)
            self._directory_dirty = False
        self._recovery_point = target
        self._last_flush_ms = self._clock()
        if self.config.simulate_unflushed_loss:
            self._record_flushed_offset(target)

    def flush_if_due(self) -> bool:
        """Kafka's flush.ms policy (the log manager calls this periodically). The test needs no storage guard (it
        touches no file; flush has its own): entering one for each of a thousand idle logs every second cost more
        than the rest of an idle broker's log maintenance."""
        # nothing unflushed first: it is the cheaper test, and the usual answer for an idle log
        if self._log_end_offset > self._recovery_point and self._clock() - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    def _record_flushed_offset(self, offset: int) -> None:
        self._flushed_offset = offset
        self._flushed_offset_file.write({(self.topic, self.partition): offset})

    # ---------------------------------------------------------------------------------------- close

    def close(self) -> None:
        """Close files without flushing (the log manager flushes before a clean shutdown)."""
        for segment in self._segments:
            segment.close()
        for _, segment in self._pending_deletes:
            segment.close()
        self._pending_deletes = []

    def delete(self) -> None:
        """Remove the partition directory (the replica is gone from this broker)."""
        self.leader_epoch_cache.close()
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, end={self._log_end_offset}, "
            f"segments={len(self._segments)})"
        )
