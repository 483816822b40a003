"""CleanerManager: the loop's side of the cleaner (Kafka's LogCleanerManager): which compacted log is dirtiest, the
plan a cleaner thread works from, the swap of its result into the log, and ``cleaner-offset-checkpoint``.

Everything here runs on the broker's event loop, which owns the logs; only the cleaning's work
(:func:`broker.log.cleaner.cleaner.clean_job`) runs elsewhere, in a cleaner worker process, and the fsyncs that make a
swap durable run on a thread (:meth:`CleanerManager.make_durable`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import field, make_dataclass
from pathlib import Path

from broker.log.checkpoint import OffsetCheckpointFile, fsync_directory
from broker.log.cleaner.cleaner import CleaningPlan, CleaningResult, SourceSegment
from broker.log.cleaner.selection import (
    LogToClean,
    SegmentFacts,
    delete_horizon_ms,
    filthiest,
    first_dirty_offset,
    log_to_clean,
)
from broker.log.errors import CorruptCheckpointError
from broker.log.log import Log
from broker.log.offset_index import OffsetIndex
from broker.log.time_index import TimeIndex
from traces.events import LogCleaned, TraceEvent

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LONG_MAX = 2**63 - 1

TopicPartition = tuple[str, int]


def _own_fields(event_type: type[TraceEvent]) -> list[tuple[str, object]]:
    """An event's fields past those every event has, in its order, with their types."""
    return [(name, info.annotation) for name, info in event_type.model_fields.items()
            if name not in TraceEvent.model_fields and name != "event"]


def _event_fields(report) -> dict[str, object]:
    """The report as the LogCleaned event's fields."""
    return {name: getattr(report, name) for name, _ in _own_fields(LogCleaned)}


# One finished cleaning, for the trace and the log line: the LogCleaned event's fields (traces/events.py holds their
# one list), and the process that did the work (a cleaner worker process, this one in tests).
CleaningReport = make_dataclass("CleaningReport", [*_own_fields(LogCleaned), ("cleaner_pid", int, field(default=0))],
                                frozen=True, namespace={"event_fields": _event_fields})


def segment_facts(log_: Log, *, with_timestamps: bool) -> list[SegmentFacts]:
    facts = []
    for segment in log_.segments:
        largest = first = -1
        if with_timestamps and segment.size:
            largest = segment.largest_timestamp
            first = segment.first_batch_timestamp() or -1
        facts.append(SegmentFacts(
            segment.base_offset, segment.size, largest_timestamp=largest, first_batch_timestamp=first,
            last_modified_ms=segment.last_modified_ms,
            index_bytes=segment.offset_index.entries * OffsetIndex.ENTRY.size,
            time_index_bytes=segment.time_index.entries * TimeIndex.ENTRY.size))
    return facts


class CleanerManager:
    def __init__(self, logs: Callable[[], dict[TopicPartition, Log]], clock: Callable[[], int],
                 high_watermarks: Callable[[], Mapping[TopicPartition, int]] | None = None) -> None:
        self._logs = logs
        self._clock = clock
        # the replicas' high watermarks: a transaction whose marker is above it is not settled yet (the first
        # unstable offset); without them (tests) the log end offset stands in
        self._high_watermarks = high_watermarks
        self.in_progress: set[TopicPartition] = set()
        self.uncleanable: set[TopicPartition] = set()  # a cleaning failed (KIP-346): skipped until restart
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        # checkpoints written off the loop (make_durable): one writer at a time, and never an older snapshot over a
        # newer one
        self._write_lock = threading.Lock()
        self._snapshots = 0
        self._written_snapshot: dict[Path, int] = {}
        # LogCleanerManager's gauges: the highest dirty ratio and the largest compaction delay seen at the last
        # choice, and when that was
        self.dirtiest_ratio = 0.0
        self.max_compaction_delay_ms = 0
        self.time_of_last_run_ms = clock()

    # ------------------------------------------------------------------------------------ checkpoint

    def checkpointed_offsets(self, log_dir: Path) -> dict[TopicPartition, int]:
        if log_dir not in self._checkpoints:
            try:
                self._checkpoints[log_dir] = OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).read()
            except CorruptCheckpointError as exc:
                log.error("%s; every compacted log in %s is dirty from its start again", exc, log_dir)
                self._checkpoints[log_dir] = {}
        return self._checkpoints[log_dir]

    def _write_checkpoint(self, log_dir: Path) -> None:
        OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).write(self._checkpoint_snapshot(log_dir))

    def _checkpoint_snapshot(self, log_dir: Path) -> dict[TopicPartition, int]:
        # only the logs still here: a deleted log's entry goes at the next write (Kafka updates it at the delete)
        here = {tp for tp, opened in self._logs().items() if opened.log_dir == log_dir}
        offsets = {tp: o for tp, o in self.checkpointed_offsets(log_dir).items() if tp in here}
        self._checkpoints[log_dir] = offsets
        return dict(offsets)

    def make_durable(self, opened: Log) -> Callable[[], None]:
        """After ``done_cleaning(..., sync=False)``, on the loop: the I/O that makes the swap durable, to run on a
        thread: the log directory's fsync (the swap's renames), then the checkpoint (temp file, fsync, rename,
        directory fsync), in that order, so the checkpoint never names an offset whose cleaned segments a power
        loss could take back. The checkpoint's content is taken now, on the loop, which owns the logs."""
        directory, log_dir = opened.directory, opened.log_dir
        offsets = self._checkpoint_snapshot(log_dir)
        self._snapshots += 1
        snapshot = self._snapshots

        def run() -> None:
            try:
                fsync_directory(directory)
            except FileNotFoundError:  # the log was deleted meanwhile (its directory renamed): nothing to keep
                pass
            with self._write_lock:
                if self._written_snapshot.get(log_dir, 0) > snapshot:
                    return  # a later cleaning's checkpoint is written already, and holds this one's offset
                OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).write(offsets)
                self._written_snapshot[log_dir] = snapshot
        return run

    # --------------------------------------------------------------------------------------- choice

    def grab_filthiest(self) -> tuple[Log, LogToClean] | None:
        """The compacted log of the highest dirty ratio above its min.cleanable.dirty.ratio, marked in progress."""
        now = self._clock()
        self.time_of_last_run_ms = now
        candidates: list[tuple[LogToClean, float]] = []
        by_tp = {}
        high_watermarks = self._high_watermarks() if self._high_watermarks is not None else {}
        for tp, opened in self._logs().items():
            config = opened.config
            # the substring test first: it skips a delete-only log (most of them) without parsing its policy
            if "compact" not in config.cleanup_policy or not config.compact or tp in self.in_progress \
                    or tp in self.uncleanable:
                continue
            first_dirty = first_dirty_offset(self.checkpointed_offsets(opened.log_dir).get(tp),
                                             opened.log_start_offset, opened.log_end_offset)
            facts = segment_facts(opened, with_timestamps=config.min_compaction_lag_ms > 0
                                  or config.max_compaction_lag_ms < LONG_MAX)
            unstable = opened.first_unstable_offset(high_watermarks.get(tp, opened.log_end_offset))
            candidate = log_to_clean(tp[0], tp[1], facts, first_dirty,
                                     min_compaction_lag_ms=config.min_compaction_lag_ms,
                                     max_compaction_lag_ms=config.max_compaction_lag_ms, now_ms=now,
                                     first_unstable_offset=unstable)
            candidates.append((candidate, config.min_cleanable_dirty_ratio))
            by_tp[tp] = opened
        measured = [c for c, _ in candidates if c.total_bytes > 0]  # Kafka skips empty logs
        self.dirtiest_ratio = max((c.cleanable_ratio for c in measured), default=0.0)
        self.max_compaction_delay_ms = max((c.max_compaction_delay_ms for c in measured), default=0)
        chosen = filthiest(candidates)
        if chosen is None:
            return None
        tp = (chosen.topic, chosen.partition)
        self.in_progress.add(tp)
        return by_tp[tp], chosen

    def plan(self, opened: Log, candidate: LogToClean) -> CleaningPlan:
        """What the cleaning reads: every segment now, each through a file descriptor of the plan's own."""
        facts = segment_facts(opened, with_timestamps=False)
        sources = [SourceSegment(segment, fact, os.dup(segment.fd)) for segment, fact in zip(
            opened.segments, facts, strict=True)]
        horizon = delete_horizon_ms(facts, candidate.first_dirty_offset, opened.config.delete_retention_ms)
        # the aborted transactions the pass may meet, from the .txnindex files (the loop owns them)
        aborted = opened.collect_aborted_transactions(facts[0].base_offset, candidate.first_uncleanable_offset)
        return CleaningPlan(opened.directory, opened.config, candidate, horizon, sources, aborted, opened.truncations)

    def uncleanable_by_dir(self) -> dict[Path, tuple[int, int]]:
        """log dir → (partitions marked uncleanable, their cleanable bytes): Kafka's uncleanable-partitions-count and
        uncleanable-bytes gauges of LogCleanerManager."""
        result: dict[Path, tuple[int, int]] = {}
        now = self._clock()
        for tp, opened in self._logs().items():
            if tp not in self.uncleanable:
                continue
            config = opened.config
            first_dirty = first_dirty_offset(self.checkpointed_offsets(opened.log_dir).get(tp),
                                             opened.log_start_offset, opened.log_end_offset)
            lag = config.min_compaction_lag_ms
            candidate = log_to_clean(tp[0], tp[1], segment_facts(opened, with_timestamps=lag > 0), first_dirty,
                                     min_compaction_lag_ms=lag, max_compaction_lag_ms=LONG_MAX, now_ms=now)
            count, size = result.get(opened.log_dir, (0, 0))
            result[opened.log_dir] = (count + 1, size + candidate.cleanable_bytes)
        return result

    # ----------------------------------------------------------------------------------------- swap

    def done_cleaning(self, opened: Log, plan: CleaningPlan, result: CleaningResult | None, *,
                      sync: bool = True) -> CleaningReport | None:
        """Swap the cleaned groups in and checkpoint the new first dirty offset, if the log still holds every segment
        the cleaning read (a truncation, a retention or a delete meanwhile abandons it, as Kafka aborts it).

        ``sync=False`` (the broker's cleaner threads): the swap's renames and the offset in memory only, no fsync
        and no checkpoint file; the caller runs :meth:`make_durable` on a thread afterwards."""
        tp = opened.topic_partition
        try:
            if result is None:
                return None
            if self._logs().get(tp) is not opened or not self._unchanged(opened, plan, result.end_offset):
                log.info("%s-%d: the log changed during its cleaning; discarding the cleaned segments", *tp)
                result.discard()
                return None
            before = sum(s.facts.size for g in result.groups for s in g.sources)
            for group in result.groups:
                opened.replace_segments(group.cleaned, [s.segment for s in group.sources], sync_directory=sync)
            offsets = self.checkpointed_offsets(opened.log_dir)
            offsets[tp] = result.end_offset
            if sync:
                self._write_checkpoint(opened.log_dir)
            stats = result.stats
            return CleaningReport(
                tp[0], tp[1], plan.candidate.first_dirty_offset, result.end_offset,
                segments_before=sum(len(g.sources) for g in result.groups), segments_after=len(result.groups),
                bytes_before=before, bytes_after=sum(g.cleaned.size for g in result.groups),
                records_read=stats.records_read, records_kept=stats.records_kept, keys=stats.keys,
                duration_ms=stats.duration_s * 1000, dirty_bytes=stats.map_bytes_read, cleaner_pid=stats.pid)
        finally:
            plan.close()
            self.in_progress.discard(tp)

    def changed_under(self, opened: Log, plan: CleaningPlan) -> bool:
        """The log is gone, or no longer holds the segments the plan read, as they were."""
        return self._logs().get(opened.topic_partition) is not opened or \
            not self._unchanged(opened, plan, plan.sources[-1].base_offset)

    def failed(self, opened: Log, plan: CleaningPlan) -> None:
        plan.close()
        tp = opened.topic_partition
        self.in_progress.discard(tp)
        self.uncleanable.add(tp)

    def abandoned(self, opened: Log, plan: CleaningPlan) -> None:
        plan.close()
        self.in_progress.discard(opened.topic_partition)

    @staticmethod
    def _unchanged(opened: Log, plan: CleaningPlan, end_offset: int) -> bool:
        # a truncation (a follower's, after a leader change) may leave a read segment in place and let appends
        # bring it back to its old size with other records: a long cleaning would then swap the old ones back in
        if opened.truncations != plan.truncations:
            return False
        current = opened.segments
        active = current[-1]
        for source in plan.sources[:-1]:
            if source.base_offset >= end_offset:
                break
            segment = source.segment
            if segment is active or segment.size != source.facts.size or not any(s is segment for s in current):
                return False
        return True
