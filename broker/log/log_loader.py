"""Opening a partition directory: tidy stray files, trust or re-validate segments, cut damage."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from broker.log.config import LogConfig
from broker.log.errors import CorruptIndexError
from broker.log.record_batch import MalformedBatch
from broker.log.transactions import TXN_INDEX_SUFFIX
from broker.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    EpochAssigner,
    LogSegment,
    segment_file_name,
)

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")
_STRAY_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")


def load_segments(
    directory: Path,
    config: LogConfig,
    now_ms: int,
    *,
    recovery_point: int,
    had_clean_shutdown: bool,
    assign_epoch: EpochAssigner,
) -> list[LogSegment]:
    """The directory's segments, every byte of them validated or trusted, ready for appends.

    After a clean shutdown every segment is trusted after cheap checks (index sanity, intact tail).
    Otherwise every segment from the one holding the recovery point on is re-validated batch by batch
    and its indexes rebuilt (Kafka's recovery). Whenever a segment has to be cut, the segments after it
    are deleted: a log never has a hole followed by more data.
    """
    _remove_stray_files(directory)
    _complete_swaps(directory, config, now_ms)
    bases = sorted(
        int(p.name[:20]) for p in directory.iterdir() if _SEGMENT_FILE.match(p.name) and p.suffix == LOG_SUFFIX
    )
    segments = [LogSegment.open(directory, base, config, now_ms) for base in bases]
    if not segments:
        return []
    first_to_recover = len(segments)
    if not had_clean_shutdown:
        first_to_recover = max(0, sum(1 for s in segments if s.base_offset <= recovery_point) - 1)
    for i, segment in enumerate(segments):
        if i >= first_to_recover:
            recovered, cut = True, segment.recover(assign_epoch)
        else:
            recovered, cut = _trust_or_recover(segment, assign_epoch)
        if cut:
            _delete_after(segments, i, reason=f"{segment.log_path} had to be cut")
            break
        if recovered and i < len(segments) - 1:
            # Rebuilt indexes of a rolled segment end like those written at the roll.
            segment.on_become_inactive()
    _drop_trailing_empty_segments(segments)
    segments[-1].reopen_as_active()
    return segments


def _trust_or_recover(segment: LogSegment, assign_epoch: EpochAssigner) -> tuple[bool, int]:
    try:
        segment.sanity_check()
        return False, 0
    except (CorruptIndexError, MalformedBatch) as e:
        log.warning(
            "%s failed its start-up check (%s); re-validating it and rebuilding its indexes",
            segment.log_path,
            e,
        )
    cut = segment.recover(assign_epoch)
    segment.flush()  # it sits below the recovery point, so no later flush would cover it
    if cut:
        log.error(
            "%s: %d bytes of data that needed no recovery were invalid and have been removed; "
            "this replica must re-fetch them from the leader",
            segment.log_path,
            cut,
        )
    return True, cut


def _delete_after(segments: list[LogSegment], i: int, *, reason: str) -> None:
    for later in segments[i + 1 :]:
        log.warning(
            "deleting %s (%d bytes): %s and data after a cut cannot be kept",
            later.log_path,
            later.size,
            reason,
        )
        later.delete()
    del segments[i + 1 :]


def _drop_trailing_empty_segments(segments: list[LogSegment]) -> None:
    # Segment files created after the last flush can survive a crash empty; an empty last segment
    # whose base is beyond the previous segment's data would claim offsets that were never stored.
    while len(segments) > 1 and segments[-1].size == 0 and segments[-1].base_offset > segments[-2].next_offset:
        log.warning("deleting empty %s: its offsets were lost before they were flushed", segments[-1].log_path)
        segments.pop().delete()


def _remove_stray_files(directory: Path) -> None:
    """Kafka's start-up tidy: unfinished deletes and temp files go; index files without a log go."""
    names = {p.name for p in directory.iterdir()}
    for name in names:
        path = directory / name
        if name.endswith(_STRAY_SUFFIXES):
            log.info("removing leftover %s", path)
            path.unlink(missing_ok=True)
        elif name.endswith(SWAP_SUFFIX):
            match = _SEGMENT_FILE.match(name.removesuffix(SWAP_SUFFIX))
            if match is None or match.group(2) != LOG_SUFFIX:
                # Kafka deletes swapped indexes: the swapped log's are rebuilt (_complete_swaps)
                log.info("removing %s: an index of an unfinished swap is rebuilt", path)
                path.unlink(missing_ok=True)
        else:
            match = _SEGMENT_FILE.match(name)
            if (
                match
                and match.group(2) in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
                and f"{match.group(1)}{LOG_SUFFIX}" not in names
            ):
                log.info("removing %s: its log file is missing", path)
                path.unlink(missing_ok=True)


def _complete_swaps(directory: Path, config: LogConfig, now_ms: int) -> None:
    """A ``<base>.log.swap`` is a cleaned segment whose swap a crash interrupted (Kafka's Log.completeSwapOperations):
    it is re-validated with fresh indexes, the segments holding the offsets it covers go, and it takes their place.
    Its ``.cleaned`` siblings were removed with the stray files: their swap had not begun, their sources are intact."""
    swaps = sorted(p for p in directory.iterdir() if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX))
    for path in swaps:
        base = int(path.name[:20])
        swapped = LogSegment(directory, base, config, now_ms, new=False, file_suffix=SWAP_SUFFIX)
        swapped.recover()
        swapped.on_become_inactive()
        swapped.flush()
        end = max(swapped.next_offset, base + 1)
        for old in directory.iterdir():
            match = _SEGMENT_FILE.match(old.name)
            if match and match.group(2) == LOG_SUFFIX and base <= int(match.group(1)) < end:
                log.info("completing the swap of %s: removing %s, which it replaces", path, old)
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    (directory / segment_file_name(int(match.group(1)), suffix)).unlink(missing_ok=True)
        swapped.change_file_suffixes(SWAP_SUFFIX, "")
        swapped.close()
        log.warning("completed the interrupted swap of the cleaned segment %s", swapped.log_path)
