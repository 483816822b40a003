"""Compaction's promise: the chaos checker's part for compacted topics (the queue workload's keyed sends over a
small key space, with tombstones), on every replica's log after healing. Pure, as the rest.

What Kafka 2.8's cleaner promises (docs/compaction.md, from LogCleaner and Cleaner.cleanSegments): of every key at
least the last record stays; no offset ever changes (a compacted log has gaps); the active segment is never cleaned;
a tombstone goes only from a segment last modified before the delete horizon (the last clean segment's mtime −
delete.retention.ms), so it stays at least delete.retention.ms after it was written. Hence, for each replica and key,
with the key's latest acknowledged write ordered by offset, as the partition acknowledged it:

- the replica's last record of the key is that write, or a later write of the key (acknowledged or not: an
  indeterminate one may have landed); an older record in its place is ``compacted-lost-latest``, an older value where
  the latest acknowledged write is a tombstone ``compacted-resurrected`` (the delete undone);
- the key may be absent only if a tombstone of it that may be its last write (the latest acknowledged one, or one
  of unknown offset) was sent at least delete.retention.ms before the logs were read; absent earlier, it is
  ``compacted-tombstone-early`` when the latest acknowledged write is a tombstone, else ``compacted-lost-latest``;
- offsets strictly increase in each replica's log, and a tombstone sits where one of its key was acknowledged, or
  could have landed (otherwise ``compacted-offset-changed``, ``aborted-read`` or ``unexpected-value``).

A follower is held to the writes below its own log end (it may not have fetched the rest), the leader to all.
Values are checked where all values are (checker.py): one never sent is ``unexpected-value``, one found at another
offset than its acknowledgement's ``compacted-offset-changed``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Protocol

from cluster.chaos.history import ReplicaRead

COMPACTION_ANOMALY_NAMES: tuple[str, ...] = (
    "compacted-lost-latest", "compacted-resurrected", "compacted-tombstone-early", "compacted-offset-changed",
)
# The logs are read after the brokers stopped, the sends' invoke times are taken before the record exists, and a file's
# mtime may lag the clock by a tick: a tombstone is "too young to be gone" only by more than this
CLOCK_SLACK_MS = 100.0

COMPACTION_DESCRIPTIONS: dict[str, str] = {
    "compacted-lost-latest": "a compacted topic's replica whose last record of a key is older than the key's latest "
                             "acknowledged write (or that lost the key altogether): compaction keeps at least the "
                             "last record of every key",
    "compacted-resurrected": "a compacted topic's replica shows a value of a key older than the tombstone that was "
                             "the key's latest acknowledged write, with the tombstone gone: the delete undone",
    "compacted-tombstone-early": "a compacted topic's key deleted by a tombstone is gone from a replica less than "
                                 "delete.retention.ms after the tombstone was sent: a reader slower than that no "
                                 "longer sees the delete",
    "compacted-offset-changed": "a compacted topic's record not at its original offset: a value read at another "
                                "offset than its send was acknowledged at, a tombstone where none of its key was "
                                "acknowledged, or a replica holding an offset twice (the cleaner never moves one)",
}


class KeyedSend(Protocol):
    index: int
    process: str
    topic: str
    partition: int | None
    offset: int | None
    value: str | None
    key: str | None
    outcome: str
    invoked_ms: float


Add = Callable[..., None]


def check_compaction(sends: Iterable[KeyedSend], replicas: Mapping[tuple[str, int], Sequence[ReplicaRead]],
                     compacted: Mapping[str, int], read_ts_ms: float | None, add: Add) -> None:
    """``sends``: every send, valued and tombstone; ``replicas``: the final reads by partition; ``compacted``: the
    compacted topics and their delete.retention.ms; ``read_ts_ms``: when the logs were read (None: the tombstones'
    age is not checked). Anomalies go to ``add(name, **AnomalyExample fields)``, one per partition and key (or
    offset) with the brokers that show it."""
    by_partition: dict[tuple[str, int], list[KeyedSend]] = defaultdict(list)
    for send in sends:
        if send.topic in compacted and send.partition is not None and send.key is not None:
            by_partition[(send.topic, send.partition)].append(send)
    found: dict[tuple, tuple[dict, set[int]]] = {}

    def report(name: str, where: tuple, broker: int, **fields: object) -> None:
        found.setdefault((name, *where), (fields, set()))[1].add(broker)

    for (topic, partition), reads in sorted(replicas.items()):
        if topic not in compacted:
            continue
        writes = by_partition.get((topic, partition), [])
        value_key = {s.value: s.key for s in writes if s.value is not None}
        placed = _placed_offsets(writes, reads)
        for read in reads:
            last = _last_records(read, value_key, report, writes)
            bound = float("inf") if read.leader else read.log_end_offset
            for key, key_writes in sorted(_by_key(writes).items()):
                _check_key(key, key_writes, placed, last.get(key), bound, compacted[topic], read_ts_ms, read, report)

    # (name, topic, partition, then a key or an offset: one kind per name)
    for (name, *_), (fields, brokers) in sorted(found.items(), key=lambda item: item[0]):
        add(name, brokers=tuple(sorted(brokers)), **fields)


def last_offsets_by_key(records: Iterable[tuple[int, str | None]], keys: Mapping[int, str],
                        value_key: Mapping[str, str | None]) -> dict[str, int]:
    """Each key's last offset in a log: its record key, or for a value record without one, its send's key."""
    last: dict[str, int] = {}
    for offset, value in records:
        key = keys.get(offset) or (value_key.get(value) if value is not None else None)
        if key is not None:
            last[key] = max(offset, last.get(key, -1))
    return last


def _by_key(writes: Iterable[KeyedSend]) -> dict[str, list[KeyedSend]]:
    grouped: dict[str, list[KeyedSend]] = defaultdict(list)
    for send in writes:
        grouped[send.key].append(send)  # type: ignore[index]  # keyed sends only
    return grouped


def _placed_offsets(writes: Iterable[KeyedSend], reads: Sequence[ReplicaRead]) -> dict[int, int]:
    """The offset of each acknowledged write: its acknowledgement's, or for a value acknowledged without one (an
    idempotent producer may), where a replica holds it. A tombstone acknowledged without an offset stays unplaced."""
    found = {value: offset for read in reads for offset, value in read.records if value is not None}
    placed = {}
    for send in writes:
        if send.outcome != "ok":
            continue
        if send.offset is not None:
            placed[send.index] = send.offset
        elif send.value is not None and send.value in found:
            placed[send.index] = found[send.value]
    return placed


def _last_records(read: ReplicaRead, value_key: Mapping[str, str | None], report: Callable[..., None],
                  writes: Sequence[KeyedSend]) -> dict[str, tuple[int, str | None]]:
    """Each key's last record in ``read``, checking on the way that offsets increase and that every tombstone is
    one that was sent there."""
    keys = dict(read.keys)
    where = (read.topic, read.partition)
    for (earlier, _), (later, _) in pairwise(read.records):
        if later <= earlier:
            report("compacted-offset-changed", (*where, later), read.broker, topic=read.topic,
                   partition=read.partition, offsets=(earlier, later),
                   detail=f"offset {later} follows offset {earlier} in the log")
    last: dict[str, tuple[int, str | None]] = {}
    for offset, value in read.records:
        key = keys.get(offset)
        if value is not None:
            sent_key = value_key.get(value)
            if key is not None and sent_key is not None and key != sent_key:
                report("unexpected-value", (*where, offset), read.broker, topic=read.topic, partition=read.partition,
                       offsets=(offset,), values=(value,), detail=f"stored under key {key!r}, sent with {sent_key!r}")
            key = key or sent_key
        else:
            _check_tombstone(read, offset, key, writes, report)
        if key is not None:
            last[key] = (offset, value)
    return last


def _check_tombstone(read: ReplicaRead, offset: int, key: str | None, writes: Sequence[KeyedSend],
                     report: Callable[..., None]) -> None:
    tombstones = [s for s in writes if s.value is None and (key is None or s.key == key)]
    if any(s.outcome == "ok" and s.offset == offset for s in tombstones):
        return
    # one whose outcome or offset is unknown may be this one
    if key is not None and any(s.outcome == "info" or (s.outcome == "ok" and s.offset is None) for s in tombstones):
        return
    where = (read.topic, read.partition, offset)
    fields = {"topic": read.topic, "partition": read.partition, "offsets": (offset,), "values": (None,)}
    failed = [s for s in tombstones if s.outcome == "fail"]
    acknowledged = [s for s in tombstones if s.outcome == "ok"]
    # an earlier copy of an acknowledged tombstone, under another producer epoch: the client sent it again after an
    # epoch bump (checker.py's client-resend; tombstones have no value to tell copies by, so key and writer do)
    writers = {at: (producer_id, epoch) for at, producer_id, epoch in read.writers}
    resent = [s for s in acknowledged if s.offset is not None and s.offset > offset and writers.get(offset)
              and writers.get(s.offset) and writers[offset] != writers[s.offset]]
    if key is not None and resent:
        report("client-resend", where, read.broker, ops=tuple(s.index for s in resent[:5]), **fields,
               detail=f"a tombstone of {key!r} at {offset} (producer {writers[offset][0]} epoch "
                      f"{writers[offset][1]}), acknowledged at {resent[0].offset} (producer "
                      f"{writers[resent[0].offset][0]} epoch {writers[resent[0].offset][1]})")
    elif key is not None and failed:
        report("aborted-read", where, read.broker, ops=tuple(s.index for s in failed[:5]), **fields,
               detail=f"a tombstone of {key!r}, whose every send failed")
    elif key is not None and acknowledged:
        report("compacted-offset-changed", where, read.broker, ops=tuple(s.index for s in acknowledged[:5]), **fields,
               detail=f"a tombstone of {key!r} at {offset}, acknowledged at "
                      + ", ".join(str(s.offset) for s in acknowledged[:5]))
    else:
        report("unexpected-value", where, read.broker, **fields,
               detail=f"a tombstone of {key!r}, never sent" if key is not None else
               "a tombstone without a key, where no tombstone was acknowledged")


def _check_key(key: str, writes: Sequence[KeyedSend], placed: Mapping[int, int],
               last: tuple[int, str | None] | None, bound: float, delete_retention_ms: int,
               read_ts_ms: float | None, read: ReplicaRead, report: Callable[..., None]) -> None:
    acknowledged = [(placed[s.index], s) for s in writes if s.index in placed and placed[s.index] < bound]
    if not acknowledged:
        return
    latest_offset, latest = max(acknowledged, key=lambda pair: (pair[0], pair[1].index))
    if last is not None and last[0] >= latest_offset:
        return   # the latest acknowledged write, or a later one
    what = "a tombstone" if latest.value is None else repr(latest.value)
    fields: dict[str, object] = {"topic": read.topic, "partition": read.partition, "process": latest.process}
    if last is not None:
        name = ("compacted-resurrected" if latest.value is None and last[1] is not None
                else "compacted-lost-latest")
        report(name, (read.topic, read.partition, key), read.broker, ops=(latest.index,),
               offsets=(latest_offset, last[0]), values=(latest.value, last[1]), **fields,
               detail=f"key {key!r}: latest acknowledged write {what} at {latest_offset}, but the log's last record "
                      f"of the key is {last[1]!r} at {last[0]}")
        return
    # the key is gone: only a tombstone that may be its last write removes it, delete.retention.ms after it was
    # written; one that landed after the latest acknowledged write was written after that write's invoke
    removers = [s for s in writes if s.value is None and s.outcome != "fail"
                and (s is latest or placed.get(s.index) is None or placed[s.index] > latest_offset)]
    written_ms = [max(s.invoked_ms, latest.invoked_ms) for s in removers]
    if any(read_ts_ms is None or at + delete_retention_ms <= read_ts_ms + CLOCK_SLACK_MS for at in written_ms):
        return
    name = "compacted-tombstone-early" if latest.value is None else "compacted-lost-latest"
    young = ("" if not removers or read_ts_ms is None else
             f"; its tombstones were written {(read_ts_ms - min(written_ms)) / 1000:.1f} s or less before the logs "
             f"were read, delete.retention.ms is {delete_retention_ms / 1000:.1f} s")
    ops = tuple(dict.fromkeys(s.index for s in [latest, *removers]))[:5]
    report(name, (read.topic, read.partition, key), read.broker, ops=ops,
           offsets=(latest_offset,), values=(latest.value,), **fields,
           detail=f"key {key!r}: latest acknowledged write {what} at {latest_offset}, and no record of the key "
                  f"is left{young}")
