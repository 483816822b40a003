"""Issue 21's compaction test at its own size, on a real 3-broker cluster: 100,000 values over 1,000 keys, the last
record of 100 of those keys a tombstone, into a compacted topic with small segments and a one-second
delete.retention.ms. Once every replica has cleaned up to its active segment and the tombstones' segments are older
than the delete horizon, an independent reader of each replica's segment files (kafka-python's record batches, CRC
checked) finds exactly the last value of each live key below the active segment, no tombstoned key, offsets
increasing; a consumer from offset 0 reads the same records as the leader's files hold."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer

from tests.client.support import bootstrap, leader_of
from tests.client.test_compaction import all_cleaned, create, read_to_end
from tests.harness import RunningCluster, module_cluster, wait_until
from tests.log.cleaner_support import read_segments

pytestmark = [pytest.mark.processes, pytest.mark.slow]

VALUES = 100_000
KEYS = 1_000
TOMBSTONED = 100        # key-0 .. key-99 end with a tombstone
TOPIC = "compacted-at-scale"

cluster = module_cluster("compaction-scale")


class Written:
    """Every record the producer was told is stored: (offset, key, value) by offset."""

    def __init__(self) -> None:
        self.by_offset: dict[int, tuple[bytes, bytes | None]] = {}
        self.errors: list = []

    def delivered(self, error, message) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.by_offset[message.offset()] = (message.key(), message.value())

    def last_below(self, end: int) -> dict[bytes, bytes | None]:
        """Each key's last value at an offset below ``end`` (None: a tombstone)."""
        last: dict[bytes, bytes | None] = {}
        for offset in sorted(self.by_offset):
            if offset < end:
                key, value = self.by_offset[offset]
                last[key] = value
        return last


def replica_dirs(cluster: RunningCluster):
    for broker in cluster.spec.brokers:
        yield broker.broker_id, cluster.layout.broker_dir(broker.broker_id) / "logs" / f"{TOPIC}-0"


def active_base(directory) -> int:
    return max(int(p.name[:20]) for p in directory.glob("*.log"))


def test_a_hundred_thousand_values_over_a_thousand_keys_compact_to_the_live_keys_latest_values(cluster):
    create(cluster, TOPIC, 1, 3, {"cleanup.policy": "compact", "segment.bytes": "65536",
                                  "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01",
                                  "delete.retention.ms": "1000"})
    written = Written()
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "linger.ms": 20,
                         "enable.idempotence": True, "compression.type": "lz4", "batch.size": 16384,
                         # every value queued at once, whatever the brokers' pace (librdkafka's default is 100,000)
                         "queue.buffering.max.messages": 1_000_000})
    for i in range(VALUES):
        key = i % KEYS
        producer.produce(TOPIC, f"value-{key}-{i}".encode(), f"key-{key}".encode(), partition=0,
                         on_delivery=written.delivered)
        if i % 10_000 == 0:
            producer.poll(0)
    for key in range(TOMBSTONED):
        producer.produce(TOPIC, None, f"key-{key}".encode(), partition=0, on_delivery=written.delivered)
    assert producer.flush(60) == 0 and not written.errors, written.errors[:3]
    tombstoned = {f"key-{k}".encode() for k in range(TOMBSTONED)}

    filler = 0

    def tombstones_gone() -> bool:
        """A tombstone goes in a pass that finds its segment older than the delete horizon: the newest clean
        segment's time less delete.retention.ms (Kafka 2.8's rule). So the clean section must come to hold a segment
        newer than the tombstones' by a second: more than segment.bytes of live values (incompressible, rolled by
        segment.ms) are written until every replica is clean and holds no tombstone."""
        nonlocal filler
        if not all_cleaned(cluster, TOPIC, 0):
            return False
        for _, directory in replica_dirs(cluster):
            active = active_base(directory)
            if any(r.key in tombstoned for r in read_segments(directory) if r.offset < active):
                for _ in range(1_000):
                    key = TOMBSTONED + filler % (KEYS - TOMBSTONED)
                    producer.produce(TOPIC, f"filler-{key}-{filler}-".encode() + os.urandom(48).hex().encode(),
                                     f"key-{key}".encode(), partition=0, on_delivery=written.delivered)
                    filler += 1
                producer.flush(30)
                return False
        return True

    wait_until(tombstones_gone, 240, "every replica cleaned, its tombstones past the delete horizon", interval_s=1)
    assert not written.errors, written.errors[:3]

    leader = leader_of(cluster, TOPIC, 0)
    leader_records = None
    for broker_id, directory in replica_dirs(cluster):
        active = active_base(directory)
        records = read_segments(directory)  # every batch's CRC checked
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)), f"broker {broker_id}: offsets not increasing"
        assert offsets[-1] == max(written.by_offset), f"broker {broker_id}: the last record is missing"
        below = {(r.key, r.value) for r in records if r.offset < active}
        expected = {(k, v) for k, v in written.last_below(active).items() if v is not None}
        assert len(below) == len([r for r in records if r.offset < active]), "one record per key below the active"
        assert below == expected, (f"broker {broker_id}: {len(below - expected)} records too many, "
                                   f"{len(expected - below)} missing below offset {active}")
        assert active > 0 and len(records) < len(written.by_offset) // 10, "the log was compacted"
        if broker_id == leader:
            leader_records = [(r.offset, r.key, r.value) for r in records]

    assert read_to_end(cluster, TOPIC, "read_uncommitted") == leader_records
