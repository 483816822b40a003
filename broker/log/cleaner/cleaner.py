"""Cleaner: one cleaning of one log (Kafka's Cleaner.doClean): the offset map over the dirty section, then the
segments from the log start to the end of the map rewritten, in groups, into ``.cleaned`` segments.

It runs on a cleaner thread, away from the broker's event loop, and reads only what the loop handed it in a
:class:`CleaningPlan`: the segments as they were then, through file descriptors of its own (a segment deleted or
renamed meanwhile stays readable). It changes nothing the log serves: the loop swaps the cleaned segments in
afterwards (:meth:`broker.log.log.Log.replace_segments`), after checking the log still holds the sources.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from broker.log.cleaner.batch_filter import CodecUnavailable, filter_batch, keys_of, should_retain_record
from broker.log.cleaner.offset_map import OffsetMap
from broker.log.cleaner.selection import LogToClean, SegmentFacts, group_segments
from broker.log.cleaner.throttler import Throttler
from broker.log.config import LogConfig
from broker.log.file_records import scan_batch_headers
from broker.log.record_batch import HEADER_SIZE, TRANSACTIONAL_FLAG, BatchHeader, parse_header
from broker.log.segment import CLEANED_SUFFIX, LogSegment

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


@dataclass
class CleaningPlan:
    directory: Path
    config: LogConfig
    candidate: LogToClean
    delete_horizon_ms: int
    sources: list[SourceSegment]  # every segment of the log, the active one last

    def close(self) -> None:
        for source in self.sources:
            with contextlib.suppress(OSError):
                os.close(source.fd)


@dataclass
class CleanerStats:
    """What a cleaning did, for the trace and the log line (Kafka's CleanerStats)."""

    started: float = field(default_factory=time.monotonic)
    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_kept_whole: int = 0  # copied without looking (control, transactional, or a codec not available)
    keys: int = 0
    map_utilization: float = 0.0
    duration_s: float = 0.0


@dataclass
class CleanedGroup:
    cleaned: LogSegment
    sources: list[SourceSegment]


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
    """Map the dirty section and write the cleaned groups. None when the dirty section holds no batch.
    Raises CleaningAborted when ``should_stop`` turns true (nothing is left behind then)."""
    stats = CleanerStats()
    groups: list[CleanedGroup] = []
    try:
        last_batch_of_producer = _last_batch_of_each_producer(plan)
        offset_map.clear()
        candidate = plan.candidate
        for source in plan.sources[:-1]:
            if source.base_offset >= candidate.first_uncleanable_offset:
                break
            if _next_base(plan, source) <= candidate.first_dirty_offset:
                continue
            if _map_segment(source, candidate.first_dirty_offset, offset_map, throttler, stats, should_stop):
                break  # full: this pass ends at the last batch mapped
        stats.keys, stats.map_utilization = len(offset_map), offset_map.utilization
        if offset_map.latest_offset < 0:
            return None
        end_offset = offset_map.latest_offset + 1
        to_clean = [s for s in plan.sources[:-1] if s.base_offset < end_offset]
        by_base = {s.base_offset: s for s in to_clean}
        for facts_group in group_segments([s.facts for s in to_clean], max_size=plan.config.segment_bytes,
                                          max_index_size=plan.config.segment_index_bytes,
                                          first_uncleanable=candidate.first_uncleanable_offset):
            sources = [by_base[f.base_offset] for f in facts_group]
            cleaned = LogSegment.create(plan.directory, sources[0].base_offset, plan.config, now_ms,
                                        file_suffix=CLEANED_SUFFIX)
            groups.append(CleanedGroup(cleaned, sources))
            for source in sources:
                _clean_into(source, cleaned, offset_map,
                            retain_deletes=source.facts.last_modified_ms > plan.delete_horizon_ms,
                            last_batch_of_producer=last_batch_of_producer, throttler=throttler, stats=stats,
                            should_stop=should_stop)
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.set_last_modified_ms(sources[-1].facts.last_modified_ms)  # Kafka keeps the sources' mtime
        stats.duration_s = time.monotonic() - stats.started
        return CleaningResult(end_offset, groups, stats)
    except BaseException:
        for group in groups:
            group.cleaned.delete()
        raise


def _next_base(plan: CleaningPlan, source: SourceSegment) -> int:
    i = plan.sources.index(source)
    return plan.sources[i + 1].base_offset if i + 1 < len(plan.sources) else 2**63 - 1


def _batches(source: SourceSegment) -> Iterator[tuple[BatchHeader, memoryview]]:
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


def _read(source: SourceSegment, position: int, length: int) -> bytes:
    length = min(length, source.facts.size - position)
    data = os.pread(source.fd, length, position)
    if len(data) < length:
        raise OSError(f"{source.segment.log_path} shrank to {position + len(data)} bytes while being cleaned "
                      f"(planned at {source.facts.size}): it was truncated")
    return data


def _last_batch_of_each_producer(plan: CleaningPlan) -> dict[int, int]:
    """producer id → base offset of its last batch in the log (the batch whose sequence must survive)."""
    last: dict[int, int] = {}
    for source in plan.sources:
        for _, header in scan_batch_headers(source.fd, 0, source.facts.size):
            if header.producer_id >= 0:
                last[header.producer_id] = header.base_offset
    return last


def _kept_whole(header: BatchHeader) -> bool:
    # kafkasim has no transaction coordinator, so no markers to apply: control and transactional batches are kept
    return header.is_control or bool(header.attributes & TRANSACTIONAL_FLAG)


def _map_segment(source: SourceSegment, start: int, offset_map: OffsetMap, throttler: Throttler,
                 stats: CleanerStats, should_stop: Callable[[], bool]) -> bool:
    """Put the segment's keyed records at or after ``start`` in the map; True when the map filled up."""
    for header, batch in _batches(source):
        if should_stop():
            raise CleaningAborted()
        if header.last_offset < start:
            continue
        throttler.maybe_throttle(header.size)
        stats.map_bytes_read += header.size
        if not _kept_whole(header):
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


def _clean_into(source: SourceSegment, cleaned: LogSegment, offset_map: OffsetMap, *, retain_deletes: bool,
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
        written: bytes | None
        if _kept_whole(header):
            written = bytes(batch)
            stats.batches_kept_whole += 1
        else:
            try:
                filtered = filter_batch(batch, header, keep, retain_empty=(
                    header.producer_id >= 0 and last_batch_of_producer.get(header.producer_id) == header.base_offset))
            except CodecUnavailable:
                log.warning("%s: batch at offset %d uses codec %d, not available here; kept whole",
                            source.segment.log_path, header.base_offset, header.compression)
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
