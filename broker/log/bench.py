"""Log benchmark: append throughput, random-offset lookups on many segments, recovery time per GiB.

Plain functions over a directory the caller owns; ``kafkasim bench log`` runs them in a temporary one and
reports the figures.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from pathlib import Path

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.records import Record, build_batch

MIB = 1 << 20


def _clock() -> int:
    return int(time.time() * 1000)


def _batch_of_size(size: int, value_size: int, rng: random.Random) -> bytes:
    """An uncompressed producer batch of exactly ``size`` bytes (the last record absorbs the rest)."""
    now = _clock()
    records: list[Record] = []
    while True:
        records.append(Record(None, rng.randbytes(value_size), now))
        if len(build_batch([*records, Record(None, b"", now)])) + value_size > size:
            break
    filler = size - len(build_batch([*records, Record(None, b"", now)]))
    for extra in range(filler, -1, -1):
        batch = build_batch([*records, Record(None, rng.randbytes(extra), now)])
        if len(batch) == size:
            return batch
    raise AssertionError(f"cannot build a batch of {size} bytes")


def bench_append(
    root: Path, batch_size: int, round_bytes: int, rounds: int, rng: random.Random
) -> tuple[float, float, float]:
    """(median, min, max) MB/s of append_as_leader — framing, CRC-32C check, offset assignment and
    write to the page cache, no fsync (Kafka's default) — over ``rounds`` fresh logs."""
    batch = _batch_of_size(batch_size, min(1024, batch_size // 4), rng)
    count = max(1, round_bytes // batch_size)
    results = []
    for round_number in range(rounds):
        directory = root / f"append{batch_size}-{round_number}"
        log = Log.open(directory, LogConfig(), clock=_clock)
        start = time.perf_counter()
        for _ in range(count):
            log.append_as_leader(batch, leader_epoch=0)
        elapsed = time.perf_counter() - start
        log.close()
        shutil.rmtree(directory)
        results.append(count * batch_size / elapsed / 1e6)
    return statistics.median(results), min(results), max(results)


def bench_lookup(root: Path, segments: int, lookups: int, rng: random.Random) -> tuple[float, float, float]:
    """(mean, p50, p99) µs of ``read(random offset, 1 byte)`` on a reopened log of ``segments`` segments."""
    batch = _batch_of_size(1024, 100, rng)
    per_segment = 64
    config = LogConfig.model_validate({"segment.bytes": per_segment * len(batch)})
    directory = root / "lookup-0"
    log = Log.open(directory, config, clock=_clock)
    while len(log.segments) < segments or log.active_segment.size < per_segment * len(batch):
        log.append_as_leader(batch, leader_epoch=0)
    log.flush()
    log.close()
    log = Log.open(directory, config, clock=_clock, recovery_point=0, had_clean_shutdown=True)
    end = log.log_end_offset
    times = []
    for _ in range(lookups):
        offset = rng.randrange(end)
        start = time.perf_counter()
        region = log.read(offset, 1)
        times.append((time.perf_counter() - start) * 1e6)
        assert region.size == len(batch)
    log.close()
    shutil.rmtree(directory)
    times.sort()
    return statistics.fmean(times), times[len(times) // 2], times[int(len(times) * 0.99)]


def bench_recovery(root: Path, total_bytes: int, rng: random.Random) -> tuple[float, float]:
    """(seconds per GiB, GiB recovered) for a full recovery of 16 KiB batches after an unclean stop."""
    batch = _batch_of_size(16 * 1024, 1024, rng)
    config = LogConfig.model_validate({"segment.bytes": 128 * MIB})
    directory = root / "recovery-0"
    log = Log.open(directory, config, clock=_clock)
    for _ in range(total_bytes // len(batch)):
        log.append_as_leader(batch, leader_epoch=0)
    size = log.size_in_bytes
    log.close()  # no flush, no checkpoint, no marker: as after kill -9
    start = time.perf_counter()
    log = Log.open(directory, config, clock=_clock, recovery_point=0, had_clean_shutdown=False)
    elapsed = time.perf_counter() - start
    assert log.size_in_bytes == size, "recovery lost data"
    log.close()
    shutil.rmtree(directory)
    gib = size / (1 << 30)
    return elapsed / gib, gib
