"""Cleaner: one cleaning of one log (Kafka's Cleaner.doClean): the offset map over the dirty section, then the
segments from the log start to the end of the map rewritten, in groups, into ``.cleaned`` segments.

The loop plans a cleaning (:class:`CleaningPlan`: the segments as they were then, each through a file descriptor of
the plan's own, so a segment deleted or renamed meanwhile stays readable). The work itself, :func:`clean_job`, reads
only plain data (:class:`CleaningJob`) and those descriptors, so it runs in a cleaner worker process
(:mod:`broker.log.cleaner.worker`, the broker's way) or in this one (:func:`clean`, for tests and the bench). It
writes the ``.cleaned`` files and answers with what it wrote (:class:`CleaningOutcome`); the broker opens them
(:meth:`CleaningPlan.result_of`) and swaps them in afterwards (:meth:`broker.log.log.Log.replace_segments`), after
checking the log still holds the sources. It changes nothing the log serves.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from broker.log.cleaner.batch_filter import (
    CodecUnavailable,
    empty_batch,
    filter_batch,
    keys_of,
    should_retain_record,
)
from broker.log.cleaner.offset_map import OffsetMap
from broker.log.cleaner.selection import LogToClean, SegmentFacts, group_segments
from broker.log.cleaner.throttler import Throttler
from broker.log.cleaner.transactions import CleanedTransactions, overlapping
from broker.log.config import LogConfig
from broker.log.file_records import scan_batch_headers
from broker.log.record_batch import HEADER_SIZE, BatchHeader, parse_header
from broker.log.segment import CLEANED_SUFFIX, LogSegment, segment_file_name
from broker.log.transactions import AbortedTxn, control_record_type

log = logging.getLogger(__name__)

APPEND_CHUNK_BYTES = 1 << 20
READ_CHUNK_BYTES = 1 << 20  # Kafka's log.cleaner.io.buffer.size is 512 KiB, split between reading and writing


class CleaningAborted(Exception):
    """The cleaner was told to stop (broker shutdown, log deleted): the ``.cleaned`` files are gone again."""


@dataclass
class SourceSegment:
    """A segment as the loop saw it when the cleaning was planned; ``fd`` is the plan's own (closed by it)."""

    segment: LogSegment
    facts: SegmentFacts
    fd: int

    @property
    def base_offset(self) -> int:
        return self.facts.base_offset


@dataclass(frozen=True)
class JobSegment:
    """A source segment as the cleaning work sees it: its facts and name; its descriptor travels beside the job."""

    facts: SegmentFacts
    path: str


@dataclass(frozen=True)
class CleaningJob:
    """What :func:`clean_job` needs, as plain data (pickled to the worker process)."""

    directory: Path
    config: LogConfig
    candidate: LogToClean
    delete_horizon_ms: int
    now_ms: int
    sources: list[JobSegment]  # every segment of the log, the active one last
    aborted: list[AbortedTxn] = field(default_factory=list)  # the log's aborted transactions in the range read


@dataclass
class _Readable:
    """A source segment during the work: facts, name and a readable descriptor."""

    facts: SegmentFacts
    path: str
    fd: int

    @property
    def base_offset(self) -> int:
        return self.facts.base_offset


@dataclass
class CleaningPlan:
    directory: Path
    config: LogConfig
    candidate: LogToClean
    delete_horizon_ms: int
    sources: list[SourceSegment]  # every segment of the log, the active one last
    aborted: list[AbortedTxn] = field(default_factory=list)  # from the .txnindex files, read on the loop
    truncations: int = 0  # the log's truncation count when planned: a truncation meanwhile abandons the cleaning

    def job(self, now_ms: int) -> CleaningJob:
        return CleaningJob(self.directory, self.config, self.candidate, self.delete_horizon_ms, now_ms,
                           [JobSegment(s.facts, str(s.segment.log_path)) for s in self.sources], list(self.aborted))

    def fds(self) -> list[int]:
        return [s.fd for s in self.sources]

    def result_of(self, outcome: CleaningOutcome | None) -> CleaningResult | None:
        """The outcome's ``.cleaned`` segments opened here (written by the work, maybe in another process), for the
        swap. If one cannot be opened, every file of the outcome is removed and the error raised."""
        if outcome is None:
            return None
        by_base = {s.base_offset: s for s in self.sources}
        groups: list[CleanedGroup] = []
        try:
            for cleaned_base, source_bases in outcome.groups:
                cleaned = LogSegment(self.directory, cleaned_base, self.config, outcome.now_ms, new=False,
                                     file_suffix=CLEANED_SUFFIX)
                groups.append(CleanedGroup(cleaned, [by_base[b] for b in source_bases]))
                cleaned.sanity_check()
        except BaseException:
            for group in groups:
                group.cleaned.close()
            self.remove_cleaned_files()
            raise
        return CleaningResult(outcome.end_offset, groups, outcome.stats)

    def remove_cleaned_files(self) -> None:
        """Remove any ``.cleaned`` file of a segment of this plan (a cleaning that died half-way: only the cleaning
        in progress on this log writes them)."""
        bases = {segment_file_name(s.base_offset, "") for s in self.sources}
        with contextlib.suppress(OSError):  # the log's directory may be gone or offline by now
            for path in self.directory.glob(f"*{CLEANED_SUFFIX}"):
                if path.name[:20] in bases:
                    path.unlink(missing_ok=True)

    def close(self) -> None:
        for source in self.sources:
            with contextlib.suppress(OSError):
                os.close(source.fd)


@dataclass
class CleanerStats:
    """What a cleaning did, for the trace and the log line (Kafka's CleanerStats)."""

    started: float = field(default_factory=time.monotonic)
    pid: int = field(default_factory=os.getpid)  # the process that did the work (and wrote the .cleaned files)
    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_kept_whole: int = 0  # copied without looking (a marker kept, or a codec not available)
    aborted_batches_removed: int = 0
    markers_removed: int = 0
    keys: int = 0
    map_utilization: float = 0.0
    duration_s: float = 0.0


@dataclass
class CleanedGroup:
    cleaned: LogSegment
    sources: list[SourceSegment]


@dataclass(frozen=True)
class CleaningOutcome:
    """What :func:`clean_job` wrote: each ``.cleaned`` segment's base offset with its sources' base offsets."""

    end_offset: int  # the next first dirty offset (the checkpoint)
    groups: list[tuple[int, list[int]]]
    stats: CleanerStats
    now_ms: int


@dataclass
class CleaningResult:
    end_offset: int  # the next first dirty offset (the checkpoint)
    groups: list[CleanedGroup]
    stats: CleanerStats

    def discard(self) -> None:
        for group in self.groups:
            with contextlib.suppress(OSError):  # the log's directory may be gone or offline by now
                group.cleaned.delete()


def clean(plan: CleaningPlan, offset_map: OffsetMap, throttler: Throttler, *, now_ms: int,
          should_stop: Callable[[], bool] = lambda: False) -> CleaningResult | None:
    """The cleaning in this process (tests, the bench): :func:`clean_job`, then its segments opened for the swap."""
    return plan.result_of(clean_job(plan.job(now_ms), plan.fds(), offset_map, throttler, should_stop=should_stop))


def clean_job(job: CleaningJob, fds: list[int], offset_map: OffsetMap, throttler: Throttler, *,
              should_stop: Callable[[], bool] = lambda: False) -> CleaningOutcome | None:
    """Map the dirty section and write the cleaned groups, reading the sources through ``fds`` (one per segment of
    ``job.sources``; the caller closes them). None when the dirty section holds no batch.
    Raises CleaningAborted when ``should_stop`` turns true (nothing is left behind then, nor on any error)."""
    stats = CleanerStats()
    written: list[LogSegment] = []
    sources = [_Readable(s.facts, s.path, fd) for s, fd in zip(job.sources, fds, strict=True)]
    try:
        last_batch_of_producer = _last_batch_of_each_producer(sources)
        offset_map.clear()
        candidate = job.candidate
        for i, source in enumerate(sources[:-1]):
            if source.base_offset >= candidate.first_uncleanable_offset:
                break
            if sources[i + 1].base_offset <= candidate.first_dirty_offset:
                continue
            txns = CleanedTransactions(overlapping(job.aborted, source.base_offset, sources[i + 1].base_offset))
            if _map_segment(source, candidate.first_dirty_offset, offset_map, throttler, stats, should_stop, txns):
                break  # full: this pass ends at the last batch mapped
        stats.keys, stats.map_utilization = len(offset_map), offset_map.utilization
        if offset_map.latest_offset < 0:
            return None
        end_offset = offset_map.latest_offset + 1
        to_clean = [s for s in sources[:-1] if s.base_offset < end_offset]
        by_base = {s.base_offset: s for s in to_clean}
        groups: list[tuple[int, list[int]]] = []
        for facts_group in group_segments([s.facts for s in to_clean], max_size=job.config.segment_bytes,
                                          max_index_size=job.config.segment_index_bytes,
                                          first_uncleanable=candidate.first_uncleanable_offset):
            group = [by_base[f.base_offset] for f in facts_group]
            cleaned = LogSegment.create(job.directory, group[0].base_offset, job.config, job.now_ms,
                                        file_suffix=CLEANED_SUFFIX)
            written.append(cleaned)
            groups.append((cleaned.base_offset, [s.base_offset for s in group]))
            group_end = next((s.base_offset for s in sources if s.base_offset > group[-1].base_offset), end_offset)
            # one view of the transactions per group, as Kafka's cleanSegments
            txns = CleanedTransactions(overlapping(job.aborted, group[0].base_offset, group_end))
            for source in group:
                _clean_into(source, cleaned, offset_map, txns,
                            retain_deletes=source.facts.last_modified_ms > job.delete_horizon_ms,
                            last_batch_of_producer=last_batch_of_producer, throttler=throttler, stats=stats,
                            should_stop=should_stop)
            for entry in txns.cleaned_index:  # the aborted transactions whose markers stay, with data gone now
                cleaned.txn_index.append(entry)
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.set_last_modified_ms(group[-1].facts.last_modified_ms)  # Kafka keeps the sources' mtime
            cleaned.close()
        stats.duration_s = time.monotonic() - stats.started
        return CleaningOutcome(end_offset, groups, stats, job.now_ms)
    except BaseException:
        for cleaned in written:
            with contextlib.suppress(OSError):  # the log's directory may be gone by now
                cleaned.delete()
        raise


def _batches(source: _Readable) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Each batch of the segment as planned, read in chunks with pread (no mmap: a segment a follower truncates
    meanwhile would fault a mapping; here it ends the cleaning with an error instead)."""
    size, position = source.facts.size, 0
    chunk, chunk_start = b"", 0
    while position < size:
        if position + HEADER_SIZE > chunk_start + len(chunk):
            chunk, chunk_start = _read(source, position, max(READ_CHUNK_BYTES, HEADER_SIZE)), position
        header = parse_header(chunk, position - chunk_start)
        if position + header.size > chunk_start + len(chunk):
            chunk, chunk_start = _read(source, position, max(READ_CHUNK_BYTES, header.size)), position
        yield header, memoryview(chunk)[position - chunk_start:position - chunk_start + header.size]
        position += header.size


def _read(source: _Readable, position: int, length: int) -> bytes:
    length = min(length, source.facts.size - position)
    data = os.pread(source.fd, length, position)
    if len(data) < length:
        raise OSError(f"{source.path} shrank to {position + len(data)} bytes while being cleaned "
                      f"(planned at {source.facts.size}): it was truncated")
    return data


def _last_batch_of_each_producer(sources: list[_Readable]) -> dict[int, int]:
    """producer id → base offset of its last data batch in the log (the batch whose sequence must survive: Kafka's
    lastDataOffset), or of its last marker for a producer with no data batch left."""
    last_data: dict[int, int] = {}
    last_marker: dict[int, int] = {}
    for source in sources:
        for _, header in scan_batch_headers(source.fd, 0, source.facts.size):
            if header.producer_id >= 0:
                (last_marker if header.is_control else last_data)[header.producer_id] = header.base_offset
    return {**last_marker, **last_data}


def _map_segment(source: _Readable, start: int, offset_map: OffsetMap, throttler: Throttler,
                 stats: CleanerStats, should_stop: Callable[[], bool], txns: CleanedTransactions) -> bool:
    """Put the segment's keyed records at or after ``start`` in the map, but those of markers and of aborted
    transactions (Kafka's buildOffsetMapForSegment); True when the map filled up."""
    for header, batch in _batches(source):
        if should_stop():
            raise CleaningAborted()
        # the transactions' view follows every batch, those before ``start`` too (a transaction may begin there)
        if header.is_control:
            txns.on_control_batch(header, control_record_type(batch))
            mapped = False
        else:
            mapped = not txns.on_data_batch(header)
        if header.last_offset < start:
            continue
        throttler.maybe_throttle(header.size)
        stats.map_bytes_read += header.size
        if mapped:
            try:
                keys = list(keys_of(batch, header))
            except CodecUnavailable:
                keys = []
            for offset_delta, key in keys:
                stats.map_records_read += 1
                offset = header.base_offset + offset_delta
                if key is not None and offset >= start and not offset_map.put(key, offset):
                    return True
        offset_map.update_latest_offset(header.last_offset)
    return False


def _clean_into(source: _Readable, cleaned: LogSegment, offset_map: OffsetMap, txns: CleanedTransactions, *,
                retain_deletes: bool,
                last_batch_of_producer: dict[int, int], throttler: Throttler, stats: CleanerStats,
                should_stop: Callable[[], bool]) -> None:
    def keep(offset: int, key: bytes | None, has_value: bool) -> bool:
        return should_retain_record(offset, key, has_value, latest_key_offset=offset_map.get,
                                    map_latest_offset=offset_map.latest_offset, retain_deletes=retain_deletes)

    pending = bytearray()
    pending_batches: list[tuple[int, BatchHeader]] = []

    def write_pending() -> None:
        if pending_batches:
            cleaned.append(pending, pending_batches)
            stats.bytes_written += len(pending)
            throttler.maybe_throttle(len(pending))
            pending.clear()
            pending_batches.clear()

    for header, batch in _batches(source):
        if should_stop():
            raise CleaningAborted()
        throttler.maybe_throttle(header.size)
        stats.bytes_read += header.size
        last_of_producer = header.producer_id >= 0 and last_batch_of_producer.get(header.producer_id) == \
            header.base_offset
        written: bytes | None
        if header.is_control:
            # a marker goes only past the delete horizon, as tombstones do, and once its transaction's data is gone
            if txns.on_control_batch(header, control_record_type(batch)) and not retain_deletes:
                stats.markers_removed += 1
                written = empty_batch(header) if last_of_producer and header.records_count else \
                    bytes(batch) if last_of_producer else None
            else:
                written = bytes(batch)
                stats.batches_kept_whole += 1
        elif txns.on_data_batch(header):  # data of an aborted transaction: gone whole
            stats.aborted_batches_removed += 1
            stats.records_read += header.records_count
            written = empty_batch(header) if last_of_producer else None
        else:
            try:
                filtered = filter_batch(batch, header, keep, retain_empty=last_of_producer)
            except CodecUnavailable:
                log.warning("%s: batch at offset %d uses codec %d, not available here; kept whole",
                            source.path, header.base_offset, header.compression)
                written = bytes(batch)
                stats.batches_kept_whole += 1
            else:
                written = filtered.data
                stats.records_read += filtered.records_read
                stats.records_kept += filtered.records_kept
        if written is not None:
            pending_batches.append((len(pending), parse_header(written, 0)))
            pending += written
            if len(pending) >= APPEND_CHUNK_BYTES:
                write_pending()
    write_pending()
