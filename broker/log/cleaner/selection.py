"""Which log to clean and how much of it (Kafka's LogCleanerManager and Cleaner's grouping). Pure: the caller hands
in what it read of each segment, and "now"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.log.config import LONG_MAX

INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    """What the choice needs of one segment; the last one given is the active segment."""

    base_offset: int
    size: int
    largest_timestamp: int = -1      # Kafka's LogSegment.largestTimestamp (min.compaction.lag.ms)
    first_batch_timestamp: int = -1  # the first batch's maxTimestamp, -1 when unknown (max.compaction.lag.ms)
    last_modified_ms: int = 0        # the log file's mtime (the delete horizon)
    index_bytes: int = 0
    time_index_bytes: int = 0


@dataclass(frozen=True, slots=True)
class LogToClean:
    """One compacted log's dirty state (Kafka's LogToClean): [first dirty, first uncleanable) is cleanable."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False
    max_compaction_delay_ms: int = 0  # how long past max.compaction.lag.ms its oldest dirty record is (Kafka's)

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def first_dirty_offset(checkpointed: int | None, log_start_offset: int, log_end_offset: int) -> int:
    """The checkpointed offset, or the log start when there is none or it is outside [log start, LEO]."""
    if checkpointed is None or checkpointed < log_start_offset or checkpointed > log_end_offset:
        return log_start_offset
    return checkpointed


def first_uncleanable_offset(segments: Sequence[SegmentFacts], first_dirty: int, *, min_compaction_lag_ms: int,
                             now_ms: int, first_unstable_offset: int | None = None) -> int:
    """The active segment's base, or with min.compaction.lag.ms the base of the first dirty segment holding a record
    newer than the lag, or the base of the segment holding the first unstable offset (a transaction still open, or
    whose marker is not replicated yet: its fate is not known); never below the first dirty offset (Kafka's
    cleanableOffsets, rounded down to a segment's base as its calculateCleanableBytes does)."""
    bound = segments[-1].base_offset
    if first_unstable_offset is not None:
        holding = [s.base_offset for s in segments if s.base_offset <= first_unstable_offset]
        bound = min(bound, holding[-1] if holding else segments[0].base_offset)
    if min_compaction_lag_ms > 0:
        for segment in _dirty_inactive(segments, first_dirty):
            if segment.largest_timestamp > now_ms - min_compaction_lag_ms:
                bound = min(bound, segment.base_offset)
                break
    return max(first_dirty, bound)


def log_to_clean(topic: str, partition: int, segments: Sequence[SegmentFacts], first_dirty: int, *,
                 min_compaction_lag_ms: int, max_compaction_lag_ms: int, now_ms: int,
                 first_unstable_offset: int | None = None) -> LogToClean:
    first_uncleanable = first_uncleanable_offset(segments, first_dirty, min_compaction_lag_ms=min_compaction_lag_ms,
                                                 now_ms=now_ms, first_unstable_offset=first_unstable_offset)
    # Kafka's logSegments(from, to): from the segment holding ``from`` to the last one starting below ``to``
    clean = sum(s.size for s in _overlapping(segments, -1, first_dirty))
    cleanable = sum(s.size for s in _overlapping(segments, first_dirty, first_uncleanable))
    need_now, delay = False, 0
    if max_compaction_lag_ms < LONG_MAX:
        stamps = [s.first_batch_timestamp for s in _dirty_inactive(segments, first_dirty)
                  if s.first_batch_timestamp >= 0]
        need_now = bool(stamps) and min(stamps) < now_ms - max_compaction_lag_ms
        # Kafka's LogCleanerManager.maxCompactionDelay (first batch timestamps above 0 only)
        positive = [stamp for stamp in stamps if stamp > 0]
        clean_until = now_ms - max(max_compaction_lag_ms, 0)
        if positive and min(positive) < clean_until:
            delay = clean_until - min(positive)
    return LogToClean(topic, partition, first_dirty, first_uncleanable, clean, cleanable, need_now, delay)


def is_cleanable(candidate: LogToClean, min_cleanable_ratio: float) -> bool:
    """Kafka's rule: overdue by max.compaction.lag.ms with something to clean, or a ratio above the minimum."""
    return (candidate.need_compaction_now and candidate.cleanable_bytes > 0) or \
        candidate.cleanable_ratio > min_cleanable_ratio


def filthiest(candidates: Sequence[tuple[LogToClean, float]]) -> LogToClean | None:
    """The cleanable candidate (with its min.cleanable.dirty.ratio) of the highest dirty ratio, if any."""
    eligible = [c for c, ratio in candidates if is_cleanable(c, ratio)]
    return max(eligible, key=lambda c: c.cleanable_ratio, default=None)


def delete_horizon_ms(segments: Sequence[SegmentFacts], first_dirty: int, delete_retention_ms: int) -> int:
    """Tombstones in segments last modified before this go: the last clean segment's mtime − delete.retention.ms,
    0 when nothing is clean yet (Kafka 2.8; KIP-534 later moved the horizon into each batch)."""
    clean = [s for s in segments if s.base_offset < first_dirty]
    return clean[-1].last_modified_ms - delete_retention_ms if clean else 0


def group_segments(segments: Sequence[SegmentFacts], *, max_size: int, max_index_size: int,
                   first_uncleanable: int) -> list[list[SegmentFacts]]:
    """Consecutive segments grouped while the log bytes stay within segment.bytes, each index within
    segment.index.bytes, and the offsets within an int of the group's base (Kafka's groupSegmentsBySize)."""
    groups: list[list[SegmentFacts]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size, index_size, time_size = segments[i].size, segments[i].index_bytes, segments[i].time_index_bytes
        i += 1
        while i < len(segments):
            candidate = segments[i]
            # the candidate's last offset, bounded by the next base (or the first uncleanable offset)
            last_offset = (segments[i + 1].base_offset if i + 1 < len(segments) else first_uncleanable) - 1
            if (log_size + candidate.size > max_size or index_size + candidate.index_bytes > max_index_size
                    or time_size + candidate.time_index_bytes > max_index_size
                    or last_offset - group[0].base_offset > INT_MAX):
                break
            group.append(candidate)
            log_size += candidate.size
            index_size += candidate.index_bytes
            time_size += candidate.time_index_bytes
            i += 1
        groups.append(group)
    return groups


def _overlapping(segments: Sequence[SegmentFacts], start: int, end: int) -> list[SegmentFacts]:
    chosen = []
    for i, segment in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if segment.base_offset >= end:
            break
        if upper is None or upper > start:
            chosen.append(segment)
    return chosen


def _dirty_inactive(segments: Sequence[SegmentFacts], first_dirty: int) -> list[SegmentFacts]:
    return [s for s in _overlapping(segments[:-1], first_dirty, segments[-1].base_offset)]
