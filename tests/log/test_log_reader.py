"""read_batches: a log's whole batches from one offset to another, a read at a time, as the coordinators replay
``__consumer_offsets`` and ``__transaction_state``."""

from __future__ import annotations

from pathlib import Path

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.log_reader import read_batches
from broker.log.record_batch import HEADER_SIZE, parse_header
from broker.log.records import Record, build_batch
from tests.log.support import ManualClock


def log_of_batches(tmp_path: Path, clock: ManualClock, batches: int, per_batch: int = 3) -> Log:
    log = Log.open(tmp_path / "__consumer_offsets-7", LogConfig(**{"segment.bytes": 600}), clock=clock)
    for b in range(batches):
        log.append_as_leader(build_batch([Record(b"k%d-%d" % (b, i), b"v" * 40, clock()) for i in range(per_batch)]),
                             leader_epoch=0)
    return log


def base_offsets(chunk: bytes) -> list[int]:
    found, at = [], 0
    while at + HEADER_SIZE <= len(chunk):
        header = parse_header(chunk, at)
        found.append(header.base_offset)
        at += header.size
    return found


def test_small_reads_give_every_batch_once_across_segments(tmp_path, clock):
    log = log_of_batches(tmp_path, clock, batches=12)
    assert len(log.segments) > 2
    chunks = list(read_batches(log, log.log_start_offset, log.log_end_offset, max_bytes=1))
    assert [b for chunk, _ in chunks for b in base_offsets(chunk)] == list(range(0, 36, 3))
    assert [from_offset for _, from_offset in chunks] == list(range(0, 36, 3))


def test_a_start_inside_a_batch_gives_that_whole_batch_from_the_start_offset(tmp_path, clock):
    log = log_of_batches(tmp_path, clock, batches=4)
    chunks = list(read_batches(log, 4, log.log_end_offset, max_bytes=1 << 20))
    assert chunks[0][1] == 4 and base_offsets(chunks[0][0])[0] == 3
    assert [b for chunk, _ in chunks for b in base_offsets(chunk)] == [3, 6, 9]


def test_nothing_at_or_after_the_end_offset_is_read(tmp_path, clock):
    log = log_of_batches(tmp_path, clock, batches=5)
    chunks = list(read_batches(log, 0, 9, max_bytes=1 << 20))
    assert [b for chunk, _ in chunks for b in base_offsets(chunk)] == [0, 3, 6]
    assert list(read_batches(log, 9, 9, max_bytes=1 << 20)) == []
