"""Which leading segments retention may delete — Kafka's rules, as a pure function."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class SegmentView(Protocol):
    base_offset: int
    size: int

    @property
    def largest_timestamp(self) -> int: ...


def deletable_segments(
    segments: Sequence[SegmentView],
    *,
    log_end_offset: int,
    high_watermark: int,
    log_start_offset: int,
    retention_ms: int,
    retention_bytes: int,
    now_ms: int,
) -> tuple[int, list[str]]:
    """How many leading segments to delete, and why.

    Three passes in Kafka's order — age (``retention.ms``), total size (``retention.bytes``), and
    segments wholly below the log start offset — each continuing from where the previous one stopped.
    A segment is never deletable while any of its offsets is at or above the high watermark (its upper
    bound is the next segment's base offset, or the LEO for the last), nor if it is the empty last one.
    """
    count, reasons = 0, []

    def upper_bound(i: int) -> int:
        return segments[i + 1].base_offset if i + 1 < len(segments) else log_end_offset

    def deletable(i: int) -> bool:
        last_and_empty = i == len(segments) - 1 and segments[i].size == 0
        return high_watermark >= upper_bound(i) and not last_and_empty

    if retention_ms >= 0:
        start = count
        while count < len(segments) and deletable(count) and now_ms - segments[count].largest_timestamp > retention_ms:
            count += 1
        if count > start:
            reasons.append(f"{count - start} segment(s) older than retention.ms={retention_ms}")

    total = sum(s.size for s in segments[count:])
    if retention_bytes >= 0 and total >= retention_bytes:
        start, excess = count, total - retention_bytes
        while count < len(segments) and deletable(count) and excess - segments[count].size >= 0:
            excess -= segments[count].size
            count += 1
        if count > start:
            reasons.append(f"{count - start} segment(s) beyond retention.bytes={retention_bytes}")

    start = count
    while count + 1 < len(segments) and deletable(count) and segments[count + 1].base_offset <= log_start_offset:
        count += 1
    if count > start:
        reasons.append(f"{count - start} segment(s) below the log start offset {log_start_offset}")
    return count, reasons
