"""Every replica's log as it is on disk, record by record, for the missing-writes analysis.

Reads the ``.log`` segment files directly (whole batches only: a batch being written right now is left
out) and decodes records with kafka-python's batch reader, which knows every codec Kafka uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch

from broker.log.record_batch import HEADER_SIZE, parse_header
from traces.history import StoredRecord, value_text

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def partition_records(broker: int, topic: str, partition: int, directory: Path) -> Iterator[StoredRecord]:
    data = b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))
    position = 0
    while position + HEADER_SIZE <= len(data):
        header = parse_header(data, position)
        if header.size < HEADER_SIZE or position + header.size > len(data):
            break  # a torn tail
        batch = DefaultRecordBatch(data[position:position + header.size])
        if not batch.is_control_batch:
            for record in batch:
                yield StoredRecord(broker=broker, topic=topic, partition=partition, offset=record.offset,
                                   leader_epoch=header.partition_leader_epoch, value=value_text(record.value),
                                   key=value_text(record.key),
                                   producer_id=header.producer_id, producer_epoch=header.producer_epoch)
        position += header.size


def log_end_offset(directory: Path) -> int:
    """The offset after the last whole batch of a replica's log on disk (-1: no batch, or no such log). Unlike its
    size, this is the same on every replica of a compacted partition once they caught up: each replica's cleaner
    rewrites its own segments, at its own times, and never moves an offset."""
    for path in sorted(directory.glob("*.log"), reverse=True):
        data = path.read_bytes()
        position, end = 0, -1
        while position + HEADER_SIZE <= len(data):
            header = parse_header(data, position)
            if header.size < HEADER_SIZE or position + header.size > len(data):
                break  # a torn tail
            end = header.next_offset
            position += header.size
        if end >= 0:
            return end
    return -1


def broker_records(broker: int, log_dirs: list[Path]) -> Iterator[StoredRecord]:
    """Every partition this broker holds in ``log_dirs`` (topics in deletion, ``*-delete``, are skipped)."""
    for log_dir in log_dirs:
        for directory in sorted(p for p in log_dir.iterdir() if p.is_dir()):
            match = _PARTITION_DIR.match(directory.name)
            if match is None or "." in directory.name.rsplit("-", 1)[-1]:
                continue
            yield from partition_records(broker, match["topic"], int(match["partition"]), directory)
