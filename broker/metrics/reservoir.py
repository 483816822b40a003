"""A request-time histogram as the pipeline can keep it on its hot path: a count and the latest samples.

Kafka's Yammer histograms keep an exponentially decaying sample of 1028 values (biased to the last five
minutes); kafkasim keeps the last 1028 values, which tells the same story for a classroom cluster and costs
one deque append per request. Quantiles are computed from a copy, off the event loop.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

SAMPLE_SIZE = 1028  # Yammer's ExponentiallyDecayingReservoir default


class SlidingReservoir:
    __slots__ = ("_values", "count")

    def __init__(self, size: int = SAMPLE_SIZE) -> None:
        self.count = 0
        self._values: deque[float] = deque(maxlen=size)

    def update(self, value: float) -> None:
        self.count += 1
        self._values.append(value)

    def values(self) -> list[float]:
        return list(self._values)


def quantiles(values: Iterable[float], qs: Sequence[float]) -> list[float]:
    """Yammer's Snapshot.getValue: the value at position q * (n + 1), interpolated between its neighbours;
    0.0 for every quantile of an empty sample."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return [0.0 for _ in qs]
    result = []
    for q in qs:
        pos = q * (n + 1)
        if pos < 1:
            result.append(ordered[0])
        elif pos >= n:
            result.append(ordered[-1])
        else:
            lower = ordered[int(pos) - 1]
            upper = ordered[int(pos)]
            result.append(lower + (pos - math.floor(pos)) * (upper - lower))
    return result
