"""Helpers shared by the Partition and ReplicaIO tests: real logs in a tmp dir, batches, leadership."""

from __future__ import annotations

from pathlib import Path

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.record_batch import parse_header
from broker.log.records import Record, build_batch
from broker.replication.partition import LeadershipState, Partition
from tests.log.support import ManualClock

TOPIC, PARTITION = "orders", 0
TP = (TOPIC, PARTITION)
LEADER, FOLLOWER, OTHER = 1, 2, 3
LAG_MS = 10_000  # replica.lag.time.max.ms
# A "now" far from zero: a follower never caught up has last_caught_up_time_ms 0, i.e. "long ago".
T0 = 1_000_000
RECORD_TIME = 1_700_000_000_000


def batch(count: int = 1, *, value_size: int = 50, producer_id: int = -1, producer_epoch: int = -1,
          base_sequence: int = -1, base_offset: int = 0, leader_epoch: int = -1) -> bytes:
    """A v2 batch as a producer sends it (base offset 0), or as a leader stored it (``base_offset``)."""
    records = [Record(b"k%d" % i, bytes([65 + i % 26]) * value_size, RECORD_TIME + i) for i in range(count)]
    return build_batch(records, base_offset=base_offset, partition_leader_epoch=leader_epoch,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)


def open_log(tmp_path: Path, topic: str = TOPIC, partition: int = PARTITION, **config: object) -> Log:
    return Log.open(tmp_path / f"{topic}-{partition}", LogConfig(**config), clock=ManualClock())


def leadership(*, leader: int = LEADER, leader_epoch: int = 1, isr: tuple[int, ...] = (LEADER, FOLLOWER),
               replicas: tuple[int, ...] | None = None, zk_version: int = 0) -> LeadershipState:
    return LeadershipState(leader=leader, leader_epoch=leader_epoch, isr=isr, zk_version=zk_version,
                           replicas=replicas if replicas is not None else tuple(sorted({leader, *isr})),
                           controller_epoch=1)


def new_partition(log: Log, *, broker_id: int = LEADER, high_watermark: int = 0) -> Partition:
    return Partition(log.topic, log.partition, broker_id, log, LAG_MS, high_watermark=high_watermark)


def fill(log: Log, count: int, *, leader_epoch: int = 0) -> None:
    """``count`` single-record batches written as an earlier leader would have (a log's history)."""
    for _ in range(count):
        log.append_as_leader(batch(), leader_epoch)


def offsets_of(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of every batch in ``data``."""
    position, found = 0, []
    while position < len(data):
        header = parse_header(data, position)
        found.append((header.base_offset, header.last_offset))
        position += header.size
    return found
