"""Helpers for the cleaner tests: a compacted log on real files, one cleaning run synchronously, and an independent
reader of the segment files (kafka-python's record batch parser, not kafkasim's)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker.log.cleaner.cleaner import clean
from broker.log.cleaner.manager import CleanerManager, CleaningReport
from broker.log.cleaner.offset_map import OffsetMap
from broker.log.cleaner.throttler import Throttler
from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.records import Record, build_batch

COMPACT = {"cleanup.policy": "compact", "segment.bytes": 4096, "index.interval.bytes": 256}


def open_log(directory: Path, clock, **overrides) -> Log:
    return Log.open(directory / "compacted-0", LogConfig.model_validate({**COMPACT, **overrides}), clock=clock)


def produce(log_: Log, clock, pairs: list[tuple[bytes | None, bytes | None]], *, compression: int = 0,
            codec_builder: int | None = None, producer_id: int = -1, base_sequence: int = -1) -> None:
    """One batch holding ``pairs`` (key, value); ``codec_builder`` builds it with kafka-python (snappy, lz4, zstd)."""
    if codec_builder is not None:
        builder = DefaultRecordBatchBuilder(2, codec_builder, False, producer_id, 0 if producer_id >= 0 else -1,
                                            base_sequence, 1 << 20)
        for i, (key, value) in enumerate(pairs):
            builder.append(i, clock(), key, value, [])
        data = bytes(builder.build())
    else:
        data = build_batch([Record(k, v, clock()) for k, v in pairs], compression=compression,
                           producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                           base_sequence=base_sequence)
    log_.append_as_leader(data, leader_epoch=0)


def clean_once(log_: Log, clock, *, map_bytes: int = 1 << 20) -> CleaningReport | None:
    """What a cleaner worker does, without the thread: choose, plan, clean, swap, checkpoint."""
    manager = CleanerManager(lambda: {log_.topic_partition: log_}, clock)
    grabbed = manager.grab_filthiest()
    if grabbed is None:
        return None
    opened, candidate = grabbed
    plan = manager.plan(opened, candidate)
    result = clean(plan, OffsetMap(map_bytes), Throttler(math.inf), now_ms=clock())
    return manager.done_cleaning(opened, plan, result)


@dataclass(frozen=True)
class StoredRecord:
    segment_base: int
    offset: int
    key: bytes | None
    value: bytes | None


def read_segments(directory: Path) -> list[StoredRecord]:
    """Every record of every ``.log`` file in offset order, each batch's CRC checked by kafka-python."""
    found = []
    for path in sorted(directory.glob("*.log")):
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc(), f"bad CRC in {path} at offset {batch.base_offset}"
            for record in batch:
                found.append(StoredRecord(int(path.name[:20]), record.offset, record.key, record.value))
    return found


@dataclass(frozen=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    producer_id: int
    control: bool
    transactional: bool
    keys: tuple[bytes | None, ...]


def read_batches(directory: Path) -> list[StoredBatch]:
    """Every batch of every ``.log`` file in offset order, as kafka-python reads it (CRCs checked)."""
    found = []
    for path in sorted(directory.glob("*.log")):
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc(), f"bad CRC in {path} at offset {batch.base_offset}"
            found.append(StoredBatch(batch.base_offset, batch.base_offset + batch.last_offset_delta,
                                     batch.producer_id, batch.is_control_batch, batch.is_transactional,
                                     tuple(record.key for record in batch)))
    return found
