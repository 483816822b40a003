"""Arithmetic the benches share: throughput the way Kafka's perf tools count it, nearest-rank percentiles."""

from __future__ import annotations

import math

MIB = 1 << 20


def throughput_mib_s(byte_count: int, seconds: float) -> float:
    """MiB of message values per second: Kafka's perf tools count "MB" the same way (2^20 bytes)."""
    return byte_count / MIB / seconds if seconds > 0 else math.inf


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q% of the values at or below it."""
    if not values:
        raise ValueError("no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is outside (0, 100]")
    ordered = sorted(values)
    return ordered[math.ceil(q / 100 * len(ordered)) - 1]
