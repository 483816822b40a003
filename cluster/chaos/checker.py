"""The chaos checker: a history of sends and polls, plus every replica's log read after healing, in; a verdict
with each anomaly and the operations that show it, out. Pure and deterministic: same input, same result.

Anomaly names are Jepsen's (jepsen.tests.kafka) where Jepsen has one. What may be claimed follows Jepsen's
rules: only an ``ok`` send can be lost; an ``info`` send may or may not appear (but not twice); a ``fail`` send
that appears is an aborted read. Without the final reads a missing value is only ``unseen`` — Jepsen's word for
"not read yet", which cannot tell lost from late — unless a later offset of its partition was read.

A compacted topic's values are not expected to survive: the cleaner removes every record a later one of its key
replaced, and deletes. Its values are left out of lost-write and unseen, a poll may skip what the cleaner removed,
its replicas may differ in what each has cleaned, and what compaction promises instead is checked by
``compaction_checker``.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from cluster.chaos.compaction_checker import (
    COMPACTION_ANOMALY_NAMES,
    COMPACTION_DESCRIPTIONS,
    check_compaction,
    last_offsets_by_key,
)
from cluster.chaos.history import FinalReads, NemesisEvent, Operation, ReplicaRead
from cluster.chaos.txn_checker import (
    TXN_ANOMALY_NAMES,
    TXN_DESCRIPTIONS,
    TXN_KAFKA_KNOWN,
    TXN_UNCERTAIN,
    TxnSummary,
    check_transactions,
    rewinds,
    transactions,
    zk_isolations,
)

AnomalyName = Literal[
    "lost-write", "duplicate", "client-resend", "unexpected-value", "inconsistent-offsets", "nonmonotonic-send",
    "nonmonotonic-poll", "int-nonmonotonic-poll", "poll-skip", "int-poll-skip", "aborted-read", "dirty-read",
    "divergent-replicas", "unseen", "compacted-lost-latest", "compacted-resurrected", "compacted-tombstone-early",
    "compacted-offset-changed",
]
ANOMALY_NAMES: tuple[str, ...] = get_args(AnomalyName)
assert set(COMPACTION_ANOMALY_NAMES) <= set(ANOMALY_NAMES)
# Reported, but they do not make a run invalid: "unseen" may just be late (Jepsen's :error-types, not :bad-)
UNCERTAIN = frozenset({"unseen"}) | TXN_UNCERTAIN
# Reported, but not the brokers' doing, so the run stays valid: the client wrote one value twice under two
# producer epochs of its own, which no broker can recognise as a retry (see DESCRIPTIONS)
CLIENT_SIDE = frozenset({"client-resend"})
# Reported, and what Apache Kafka 2.8 itself does under the same faults: a run whose only definite anomalies are these
# is "kafka-known", neither valid nor a kafkasim bug (docs/zombie-coordinator.md)
KAFKA_KNOWN = TXN_KAFKA_KNOWN
JEPSEN_NAMES = {"aborted-read": "G1a"}

DESCRIPTIONS: dict[str, str] = {
    "lost-write": "an acknowledged send whose value is gone after healing, or never read though a later offset was",
    "duplicate": "one value at more than one offset",
    "client-resend": "one value at more than one offset, each copy written under a different producer epoch: the "
                     "client bumped its epoch and sent again a value whose first send it did not know had been "
                     "written (librdkafka does so for every partition when one gets OUT_OF_ORDER_SEQUENCE_NUMBER "
                     "or a message times out, confluentinc/librdkafka#4953); idempotence only holds within an epoch",
    "unexpected-value": "a value read that no client ever sent",
    "inconsistent-offsets": "one offset of a partition held different values (acks, polls and replicas together)",
    "nonmonotonic-send": "a producer's later send to a partition got a lower or equal offset",
    "nonmonotonic-poll": "a consumer went back to a lower or equal offset between polls without a re-assign",
    "int-nonmonotonic-poll": "offsets went backwards within one poll",
    "poll-skip": "a consumer jumped over an acknowledged offset between polls",
    "int-poll-skip": "one poll jumped over an acknowledged offset",
    "aborted-read": "G1a: a value whose send definitely failed was read",
    "dirty-read": "a poll returned a value that is not in the partition's log after healing",
    "divergent-replicas": "replicas of a partition hold different records below their shortest log end",
    "unseen": "an acknowledged value nobody read, with no final reads to tell lost from late",
} | COMPACTION_DESCRIPTIONS | TXN_DESCRIPTIONS


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AnomalyExample(_Frozen):
    """One occurrence; fields that do not apply stay empty."""

    ops: tuple[int, ...] = ()          # operation indexes (invoke and completion share one)
    values: tuple[str | None, ...] = ()
    topic: str | None = None
    partition: int | None = None
    offsets: tuple[int, ...] = ()
    process: str | None = None
    brokers: tuple[int, ...] = ()
    detail: str = ""


class AnomalyReport(_Frozen):
    name: str
    count: int
    examples: tuple[AnomalyExample, ...]   # the first ``max_examples`` in (topic, partition, offset) order


class Availability(_Frozen):
    """Not anomalies: how much of the run the cluster was usable. Shares are of completed-or-abandoned
    operations; an invoke with no completion counts as info."""

    operations: int
    ok: int
    fail: int
    info: int
    unavailable_share: float            # (fail + info) / operations
    sends: int
    send_unavailable_share: float
    longest_without_ok_send_ms: float   # from the first event, between ok sends, and to the last event
    gap_start_ts_ms: float | None
    gap_end_ts_ms: float | None
    faults_during_gap: tuple[str, ...]  # "kill [2]": faults active in that window


class Summary(_Frozen):
    sends: int
    acknowledged: int
    failed: int
    indeterminate: int
    polls: int
    records_polled: int
    partitions: int
    partitions_with_final_reads: int


class CheckResult(_Frozen):
    """What results.json holds."""

    # kafka-known: the only definite anomalies are Kafka 2.8's own behaviour (KAFKA_KNOWN)
    verdict: Literal["valid", "invalid", "unknown", "kafka-known"]
    # every anomaly name of the workload, zero included, so tables have stable columns (the txn workload's
    # names only when the run had transactions)
    counts: dict[str, int]
    anomalies: tuple[AnomalyReport, ...]
    availability: Availability
    summary: Summary
    transactions: TxnSummary | None = None   # the txn workload's figures

    @property
    def valid(self) -> bool:
        return self.verdict == "valid"


@dataclass(frozen=True)
class Send:
    index: int
    process: str
    topic: str
    partition: int | None
    offset: int | None
    value: str | None             # None: a tombstone (its key says of what)
    outcome: Literal["ok", "fail", "info"]
    error: str | None = None
    key: str | None = None
    invoked_ms: float = 0.0       # wall clock of the invoke: the record cannot be older


@dataclass(frozen=True)
class Observation:
    """A value seen at an offset: acknowledged to a producer, returned by a poll, or in a replica's log."""

    topic: str
    partition: int
    offset: int
    value: str | None
    source: Literal["ack", "poll", "replica"]
    op: int | None = None
    broker: int | None = None


Partition = tuple[str, int]


class _Anomalies:
    def __init__(self) -> None:
        self.found: dict[str, list[AnomalyExample]] = defaultdict(list)

    def add(self, name: str, **fields: object) -> None:
        self.found[name].append(AnomalyExample(**fields))


def check(operations: Sequence[Operation], final_reads: FinalReads | None = None,
          nemesis: Sequence[NemesisEvent] = (), *, compacted: Mapping[str, int] | None = None,
          max_examples: int = 20) -> CheckResult:
    """``operations`` in history order (as written); ``final_reads`` every replica's log after healing (only
    the workload's topics are looked at); ``nemesis`` to name the faults around the longest outage; ``compacted``
    the compacted topics among the workload's, each with its delete.retention.ms."""
    compacted = dict(compacted or {})
    pairs = pair_operations(operations)
    sends = _sends(pairs)
    tombstones = _tombstones(pairs)
    polls = [(op.process, op) for op in operations if op.f == "poll" and op.type == "ok"]
    topics = ({s.topic for s in sends.values()} | {s.topic for s in tombstones}
              | {r.topic for _, p in polls for r in p.records})
    replicas: dict[Partition, list[ReplicaRead]] = defaultdict(list)
    for replica in (final_reads.replicas if final_reads else ()):
        if replica.topic in topics:
            replicas[(replica.topic, replica.partition)].append(replica)

    observations = _observations(sends, polls, replicas, tombstones)
    final_logs = {tp: _final_log(reads) for tp, reads in replicas.items()}
    anomalies = _Anomalies()
    writers = {(read.topic, read.partition, offset): (producer_id, epoch)
               for reads in replicas.values() for read in reads for offset, producer_id, epoch in read.writers}
    _offsets_and_values(observations, sends, writers, anomalies, compacted)
    _lost_and_unseen({v: s for v, s in sends.items() if s.topic not in compacted}, observations, final_logs, anomalies)
    _nonmonotonic_sends(sends, anomalies)
    _consumer_order(operations, sends, anomalies, {tp: log for tp, log in final_logs.items() if tp[0] in compacted},
                    compacted)
    _aborted_reads(sends, observations, anomalies)
    _dirty_reads(observations, final_logs, sends, anomalies, _final_keys(replicas, sends, compacted))
    _divergent_replicas(replicas, anomalies, compacted)
    if compacted:
        check_compaction([*sends.values(), *tombstones], replicas, compacted,
                         final_reads.read_ts_ms if final_reads else None, anomalies.add)
    # the txn workload: its transactions, or the output read back after healing, even if no transaction ran
    txns = transactions(pairs)
    txn_summary = None
    names = ANOMALY_NAMES
    if txns or (final_reads is not None and (final_reads.isolated or final_reads.group_offsets)):
        txn_summary = check_transactions(txns, sends.values(), final_reads, anomalies.add, rewinds=rewinds(pairs),
                                         isolations=zk_isolations(nemesis))
        names += TXN_ANOMALY_NAMES

    reports = tuple(
        AnomalyReport(name=name, count=len(found), examples=tuple(found[:max_examples]))
        for name in names if (found := anomalies.found.get(name)))
    bad = any(r.name not in UNCERTAIN | CLIENT_SIDE | KAFKA_KNOWN for r in reports)
    known = any(r.name in KAFKA_KNOWN for r in reports)
    uncertain = any(r.name in UNCERTAIN for r in reports)
    return CheckResult(
        verdict="invalid" if bad else "kafka-known" if known else "unknown" if uncertain else "valid",
        counts={name: len(anomalies.found.get(name, ())) for name in names},
        anomalies=reports,
        # the txn workload's transactions have their own figures (``transactions``); its random aborts are no outage
        # and its drain, after the input stopped, no time without acknowledgements
        availability=availability({i: pair for i, pair in pairs.items() if pair[0].f not in ("txn", "rewind")},
                                  [op for op in operations if op.f not in ("txn", "rewind")], nemesis),
        summary=Summary(
            sends=len(sends) + len(tombstones),
            acknowledged=sum(s.outcome == "ok" for s in (*sends.values(), *tombstones)),
            failed=sum(s.outcome == "fail" for s in (*sends.values(), *tombstones)),
            indeterminate=sum(s.outcome == "info" for s in (*sends.values(), *tombstones)),
            polls=len(polls), records_polled=sum(len(p.records) for _, p in polls),
            partitions=len({(o.topic, o.partition) for o in observations}),
            partitions_with_final_reads=len(replicas)),
        transactions=txn_summary,
    )


def pair_operations(operations: Iterable[Operation]) -> dict[int, tuple[Operation, Operation | None]]:
    """Invoke and completion by index; a missing completion (the client died) stays None and counts as info."""
    pairs: dict[int, tuple[Operation, Operation | None]] = {}
    for op in operations:
        if op.type == "invoke":
            if op.index in pairs:
                raise ValueError(f"operation {op.index} is invoked twice: every invoke needs a fresh index")
            pairs[op.index] = (op, None)
            continue
        invoke, completion = pairs.get(op.index, (None, None))
        if invoke is None:
            raise ValueError(f"operation {op.index} completes ({op.type}) without an invoke before it")
        if completion is not None:
            raise ValueError(f"operation {op.index} completes twice ({completion.type}, then {op.type})")
        if (op.process, op.f) != (invoke.process, invoke.f):
            raise ValueError(f"operation {op.index}'s completion is {op.process}/{op.f}, its invoke "
                             f"{invoke.process}/{invoke.f}")
        pairs[op.index] = (invoke, op)
    return pairs


def _sends(pairs: dict[int, tuple[Operation, Operation | None]]) -> dict[str, Send]:
    """The sends of a value, by value (tombstones are ``_tombstones``')."""
    sends: dict[str, Send] = {}
    for index, (invoke, completion) in sorted(pairs.items()):
        if invoke.f != "send" or invoke.value is None:
            continue
        if invoke.value in sends:
            raise ValueError(f"value {invoke.value!r} is sent by operations {sends[invoke.value].index} and {index}: "
                             "the checker needs a unique value per send to tell duplicates and losses apart")
        sends[invoke.value] = _send(invoke, completion)
    return sends


def _tombstones(pairs: dict[int, tuple[Operation, Operation | None]]) -> list[Send]:
    """The sends of a null value to a key (deletes of a compacted topic), in invoke order: known by key and offset."""
    return [_send(invoke, completion) for _, (invoke, completion) in sorted(pairs.items())
            if invoke.f == "send" and invoke.value is None]


def _send(invoke: Operation, completion: Operation | None) -> Send:
    assert invoke.topic is not None  # Operation's validator
    done = completion or invoke
    return Send(
        index=invoke.index, process=invoke.process, topic=invoke.topic,
        partition=done.partition if done.partition is not None else invoke.partition,
        offset=completion.offset if completion else None, value=invoke.value,
        outcome="info" if completion is None else completion.type,  # type: ignore[arg-type]  # never "invoke"
        error=completion.error if completion else "no completion", key=invoke.key, invoked_ms=invoke.ts_ms)


def _observations(sends: dict[str, Send], polls: list[tuple[str, Operation]],
                  replicas: dict[Partition, list[ReplicaRead]], tombstones: Iterable[Send] = ()) -> list[Observation]:
    seen = [Observation(s.topic, s.partition, s.offset, s.value, "ack", op=s.index)
            for s in (*sends.values(), *tombstones)
            if s.outcome == "ok" and s.offset is not None and s.partition is not None]
    seen += [Observation(r.topic, r.partition, r.offset, r.value, "poll", op=poll.index)
             for _, poll in polls for r in poll.records]
    seen += [Observation(read.topic, read.partition, offset, value, "replica", broker=read.broker)
             for reads in replicas.values() for read in reads for offset, value in read.records]
    return seen


def _final_log(reads: list[ReplicaRead]) -> tuple[int, dict[int, str | None]]:
    """What consumers can read after healing: the leader's log if the runner marked it, else every replica's
    records together (divergence between them is its own anomaly). Returns (log start offset, records)."""
    leaders = [r for r in reads if r.leader]
    chosen = leaders or reads
    records: dict[int, str | None] = {}
    for read in chosen:
        records.update(dict(read.records))
    return max(r.log_start_offset for r in chosen), records


def _by_op(observations: Iterable[Observation]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return (tuple(sorted({o.op for o in observations if o.op is not None})),
            tuple(sorted({o.broker for o in observations if o.broker is not None})))


def _offsets_and_values(observations: list[Observation], sends: dict[str, Send],
                        writers: dict[tuple[str, int, int], tuple[int, int]], anomalies: _Anomalies,
                        compacted: Mapping[str, int]) -> None:
    """``writers``: the (producer id, producer epoch) of the batch that holds each replica-read offset. A compacted
    topic's tombstones are checked by key (compaction_checker), and its values where they were read against where
    they were acknowledged: found elsewhere is ``compacted-offset-changed``, as the cleaner never moves a record."""
    at_offset: dict[tuple[str, int, int], list[Observation]] = defaultdict(list)
    positions: dict[str | None, dict[tuple[str, int, int], list[Observation]]] = defaultdict(lambda: defaultdict(list))
    for o in observations:
        at_offset[(o.topic, o.partition, o.offset)].append(o)
        if o.topic in compacted and (o.value is None or o.source == "ack"):
            continue
        positions[o.value][(o.topic, o.partition, o.offset)].append(o)

    for (topic, partition, offset), seen in sorted(at_offset.items()):
        values = sorted({o.value for o in seen}, key=_value_order)
        if len(values) > 1:
            ops, brokers = _by_op(seen)
            anomalies.add("inconsistent-offsets", topic=topic, partition=partition, offsets=(offset,),
                          values=tuple(values), ops=ops, brokers=brokers,
                          detail="; ".join(f"{v!r} by {_sources([o for o in seen if o.value == v])}" for v in values))

    for value, where in sorted(positions.items(), key=lambda item: _value_order(item[0])):
        every = [o for seen in where.values() for o in seen]
        ops, brokers = _by_op(every)
        send = sends.get(value) if value is not None else None
        if len(where) > 1:
            first = min(where)
            copies = [writers.get(position) for position in sorted(where)]
            # each copy under its own producer epoch: a re-send by the client; two copies under one epoch (or a
            # copy whose writer is unknown) is the broker's: it must have recognised the retry
            resent = None not in copies and len(set(copies)) == len(copies)
            anomalies.add("client-resend" if resent else "duplicate", topic=first[0], partition=first[1],
                          offsets=tuple(sorted(k[2] for k in where)),
                          values=(value,), ops=tuple(sorted({*ops, *([send.index] if send else [])})),
                          brokers=brokers, detail=", ".join(
                              f"{t}-{p}@{o}" + (f" (producer {w[0]} epoch {w[1]})" if (w := writers.get((t, p, o)))
                                                else "") for t, p, o in sorted(where)))
        if send is None:
            first = min(where)
            anomalies.add("unexpected-value", topic=first[0], partition=first[1],
                          offsets=tuple(sorted(k[2] for k in where)), values=(value,), ops=ops, brokers=brokers,
                          detail=_sources(every))
        elif send.topic in compacted and send.offset is not None and (
                send.topic, send.partition, send.offset) not in where:
            # found only elsewhere (copies at its own offset and elsewhere are duplicates or a client's re-send)
            moved = sorted(where)
            anomalies.add("compacted-offset-changed", topic=send.topic, partition=send.partition,
                          offsets=(send.offset, *(k[2] for k in moved)), values=(value,),
                          ops=tuple(sorted({send.index, *ops})), brokers=brokers,
                          detail=f"acknowledged at {send.offset}, read at "
                                 + ", ".join(f"{t}-{p}@{o}" for t, p, o in moved) + f" by {_sources(every)}")


def _lost_and_unseen(sends: dict[str, Send], observations: list[Observation],
                     final_logs: dict[Partition, tuple[int, dict[int, str | None]]], anomalies: _Anomalies) -> None:
    polled: set[str | None] = set()
    highest_polled: dict[Partition, Observation] = {}
    for o in observations:
        if o.source == "poll":
            polled.add(o.value)
            best = highest_polled.get((o.topic, o.partition))
            if best is None or o.offset > best.offset:
                highest_polled[(o.topic, o.partition)] = o
    final_values = {tp: set(records.values()) for tp, (_, records) in final_logs.items()}
    for send in sorted(sends.values(), key=_send_order):
        if send.outcome != "ok" or send.partition is None:
            continue
        tp = (send.topic, send.partition)
        fields = {"topic": send.topic, "partition": send.partition, "values": (send.value,),
                  "offsets": () if send.offset is None else (send.offset,), "process": send.process}
        if tp in final_logs:
            # The log after healing is what every later reader gets: an acknowledged value missing there is lost,
            # even if a consumer read it before it was truncated away (that read is also a dirty read).
            if send.offset is not None and send.offset < final_logs[tp][0]:
                continue  # deleted by retention, which is no loss
            if send.value not in final_values[tp]:
                how = "read once, then truncated: " if send.value in polled else "never polled, and "
                anomalies.add("lost-write", ops=(send.index,), **fields,
                              detail=f"acknowledged, {how}in no replica's log after healing")
            continue
        if send.value in polled:
            continue
        later = highest_polled.get(tp)
        if send.offset is not None and later is not None and later.offset > send.offset:
            anomalies.add("lost-write", ops=(send.index, later.op), **fields,
                          detail=f"never read, though offset {later.offset} of {send.topic}-{send.partition} was")
        else:
            anomalies.add("unseen", ops=(send.index,), **fields, detail="acknowledged, never read, no final reads")


def _nonmonotonic_sends(sends: dict[str, Send], anomalies: _Anomalies) -> None:
    """Per producer and partition, in invoke order: the idempotent producer keeps a partition's sends in order."""
    streams: dict[tuple[str, str, int], list[Send]] = defaultdict(list)
    for send in sorted(sends.values(), key=lambda s: s.index):
        if send.outcome == "ok" and send.offset is not None and send.partition is not None:
            streams[(send.process, send.topic, send.partition)].append(send)
    for (process, topic, partition), stream in sorted(streams.items()):
        for earlier, later in pairwise(stream):
            if later.offset <= earlier.offset:  # type: ignore[operator]
                anomalies.add("nonmonotonic-send", process=process, topic=topic, partition=partition,
                              ops=(earlier.index, later.index), offsets=(earlier.offset, later.offset),
                              values=(earlier.value, later.value),
                              detail=f"send {later.index} got offset {later.offset} after send {earlier.index} "
                                     f"got {earlier.offset}")


def _consumer_order(operations: Sequence[Operation], sends: dict[str, Send], anomalies: _Anomalies,
                    compacted_logs: Mapping[Partition, tuple[int, dict[int, str | None]]],
                    compacted: Mapping[str, int]) -> None:
    """Each consumer's positions per partition, reset by assign and subscribe (a new assignment may start
    anywhere). Going back is nonmonotonic; jumping over an offset some producer was acknowledged at is a skip —
    offsets without an acknowledged value (failed or unknown sends, markers) may be skipped freely. On a compacted
    topic the cleaner may have removed an acknowledged record before the poll came by: only one still in the final
    log (``compacted_logs``) was there to be read (consumers read below the high watermark, which is never truncated;
    cleaning only removes)."""
    acknowledged: dict[Partition, list[Send]] = defaultdict(list)
    for s in sends.values():
        if s.outcome == "ok" and s.offset is not None and s.partition is not None:
            tp = (s.topic, s.partition)
            if s.topic in compacted and (tp not in compacted_logs or compacted_logs[tp][1].get(s.offset) != s.value):
                continue
            acknowledged[tp].append(s)
    acked_offsets: dict[Partition, list[int]] = {}
    for tp, acked in acknowledged.items():
        acked.sort(key=lambda s: s.offset)  # type: ignore[arg-type,return-value]
        acked_offsets[tp] = [s.offset for s in acked]  # type: ignore[misc]

    position: dict[str, dict[Partition, tuple[int, int]]] = defaultdict(dict)   # process -> tp -> (offset, op)
    for op in operations:
        if op.f in ("assign", "subscribe") and op.type == "invoke":
            position.pop(op.process, None)
        if op.f != "poll" or op.type != "ok":
            continue
        seen = position[op.process]
        for record in op.records:
            tp = (record.topic, record.partition)
            if tp in seen:
                previous, previous_op = seen[tp]
                within = previous_op == op.index
                prefix = "int-" if within else ""
                ops = (op.index,) if within else (previous_op, op.index)
                if record.offset <= previous:
                    anomalies.add(f"{prefix}nonmonotonic-poll", process=op.process, topic=tp[0], partition=tp[1],
                                  ops=ops, offsets=(previous, record.offset),
                                  detail=f"offset {record.offset} read after {previous}")
                else:
                    offsets = acked_offsets.get(tp, [])
                    skipped = acknowledged[tp][bisect.bisect_right(offsets, previous):
                                               bisect.bisect_left(offsets, record.offset)] if offsets else []
                    if skipped:
                        anomalies.add(f"{prefix}poll-skip", process=op.process, topic=tp[0], partition=tp[1],
                                      ops=ops + tuple(s.index for s in skipped[:5]),
                                      offsets=(previous, record.offset), values=tuple(s.value for s in skipped[:5]),
                                      detail=f"jumped from {previous} to {record.offset} over {len(skipped)} "
                                             f"acknowledged offset(s), first {skipped[0].offset}")
            seen[tp] = (record.offset, op.index)


def _aborted_reads(sends: dict[str, Send], observations: list[Observation], anomalies: _Anomalies) -> None:
    """G1a. A replica's log counts as a read too: a consumer of that log would return it."""
    by_value: dict[str | None, list[Observation]] = defaultdict(list)
    for o in observations:
        if o.source != "ack":
            by_value[o.value].append(o)
    for send in sorted(sends.values(), key=_send_order):
        if send.outcome == "fail" and (seen := by_value.get(send.value)):
            ops, brokers = _by_op(seen)
            anomalies.add("aborted-read", process=send.process, topic=send.topic, partition=send.partition,
                          ops=(send.index, *ops), brokers=brokers, values=(send.value,),
                          offsets=tuple(sorted({o.offset for o in seen})),
                          detail=f"send failed ({send.error}), read by {_sources(seen)}")


def _dirty_reads(observations: list[Observation], final_logs: dict[Partition, tuple[int, dict[int, str | None]]],
                 sends: dict[str, Send], anomalies: _Anomalies, final_keys: Mapping[Partition, dict[str, int]]) -> None:
    """A poll can only return what a later log no longer has if it read above the high watermark of a leader
    that was then truncated — or if the write was lost after being read. On a compacted topic (``final_keys``: each
    key's last offset in its final log) the cleaner removes what a later record of the key replaced, and deletes:
    a value whose key has a later record, or none left (compaction_checker judges that), is not missed; a polled
    tombstone is checked by key there too."""
    final_values = {tp: set(records.values()) for tp, (_, records) in final_logs.items()}
    for o in sorted((o for o in observations if o.source == "poll"), key=lambda o: (o.topic, o.partition, o.offset)):
        tp = (o.topic, o.partition)
        if tp not in final_logs or o.offset < final_logs[tp][0] or o.value in final_values[tp]:
            continue
        send = sends.get(o.value) if o.value is not None else None
        if tp in final_keys:
            if send is None:
                continue  # a tombstone (judged by its key), or a value never sent: an unexpected value
            last = final_keys[tp].get(send.key) if send.key is not None else o.offset
            if last is None or last > o.offset:
                continue  # compacted away: replaced by a later record of its key, or deleted
        anomalies.add("dirty-read", topic=o.topic, partition=o.partition, offsets=(o.offset,), values=(o.value,),
                      ops=(o.op,) if send is None else (o.op, send.index),  # type: ignore[arg-type]
                      detail="absent from the log after healing"
                             + (f"; its send {send.index} was {send.outcome}" if send else ""))


def _divergent_replicas(replicas: dict[Partition, list[ReplicaRead]], anomalies: _Anomalies,
                        compacted: Mapping[str, int]) -> None:
    """Below the shortest log end every replica must hold the same records (leader epochs' truncation makes
    followers agree with the leader); above it a follower may simply not have fetched yet. A compacted topic's
    replicas clean their own segments at their own times: they must agree where they all still hold an offset (the
    cleaner never moves one), and what each may have removed is compaction_checker's to judge."""
    for (topic, partition), reads in sorted(replicas.items()):
        if len(reads) < 2:
            continue
        reads = sorted(reads, key=lambda r: r.broker)
        start = max(r.log_start_offset for r in reads)
        end = min(r.log_end_offset for r in reads)
        logs = [dict(r.records) for r in reads]
        if topic in compacted:
            differing = [o for o in sorted(set().union(*logs)) if start <= o < end
                         and len({log[o] for log in logs if o in log}) > 1]
        else:
            differing = [o for o in range(start, end) if len({(o in log, log.get(o)) for log in logs}) > 1]
        if differing:
            first = differing[0]
            anomalies.add("divergent-replicas", topic=topic, partition=partition, offsets=(first,),
                          brokers=tuple(r.broker for r in reads), values=tuple(log.get(first) for log in logs),
                          detail=f"{len(differing)} offset(s) differ in [{start}, {end}); at {first}: "
                                 + ", ".join(f"broker {r.broker} {log.get(first, '<missing>')!r}"
                                             for r, log in zip(reads, logs, strict=True)))


def _final_keys(replicas: dict[Partition, list[ReplicaRead]], sends: dict[str, Send],
                compacted: Mapping[str, int]) -> dict[Partition, dict[str, int]]:
    """Each compacted partition's keys and their last offset in the log consumers read after healing."""
    value_key = {value: s.key for value, s in sends.items() if s.topic in compacted}
    final: dict[Partition, dict[str, int]] = {}
    for tp, reads in replicas.items():
        if tp[0] in compacted:
            chosen = [r for r in reads if r.leader] or reads
            final[tp] = {}
            for read in chosen:
                for key, offset in last_offsets_by_key(read.records, dict(read.keys), value_key).items():
                    final[tp][key] = max(offset, final[tp].get(key, -1))
    return final


def availability(pairs: dict[int, tuple[Operation, Operation | None]], operations: Sequence[Operation],
                 nemesis: Sequence[NemesisEvent] = ()) -> Availability:
    """Durations from the monotonic clock (the wall clock may be stepped during a run); times shown as wall time."""
    outcomes = [(invoke.f, completion.type if completion else "info") for invoke, completion in pairs.values()]
    total = len(outcomes)
    counts = {t: sum(o == t for _, o in outcomes) for t in ("ok", "fail", "info")}
    send_outcomes = [o for f, o in outcomes if f == "send"]

    gap, gap_start, gap_end = 0.0, None, None
    if operations:
        first = min(operations, key=lambda op: op.mono_ns)
        last = max(operations, key=lambda op: op.mono_ns)
        oks = sorted((op for op in operations if op.f == "send" and op.type == "ok"), key=lambda op: op.mono_ns)
        marks = [first, *oks, last]
        for a, b in pairwise(marks):
            if (b.mono_ns - a.mono_ns) / 1e6 > gap:
                gap, gap_start, gap_end = (b.mono_ns - a.mono_ns) / 1e6, a.ts_ms, b.ts_ms
    return Availability(
        operations=total, ok=counts["ok"], fail=counts["fail"], info=counts["info"],
        unavailable_share=(counts["fail"] + counts["info"]) / total if total else 0.0,
        sends=len(send_outcomes),
        send_unavailable_share=sum(o != "ok" for o in send_outcomes) / len(send_outcomes) if send_outcomes else 0.0,
        longest_without_ok_send_ms=gap, gap_start_ts_ms=gap_start, gap_end_ts_ms=gap_end,
        faults_during_gap=_faults_between(nemesis, gap_start, gap_end) if gap_start is not None else (),
    )


def _faults_between(nemesis: Sequence[NemesisEvent], start_ms: float, end_ms: float | None) -> tuple[str, ...]:
    """Faults whose [start, stop] overlaps the window; a fault never stopped lasts to the end of the run."""
    open_faults: dict[tuple[str, tuple[int, ...], int | None], float] = {}
    intervals: list[tuple[float, float, str]] = []
    for event in sorted(nemesis, key=lambda e: e.mono_ns):
        key = (event.kind, event.targets, event.step)
        label = f"{event.kind} {list(event.targets)}" if event.targets else event.kind
        if event.type == "start":
            open_faults[key] = event.ts_ms
        elif key in open_faults:
            intervals.append((open_faults.pop(key), event.ts_ms, label))
    intervals += [(started, float("inf"), f"{k[0]} {list(k[1])}" if k[1] else k[0])
                  for k, started in open_faults.items()]
    end = end_ms if end_ms is not None else float("inf")
    return tuple(dict.fromkeys(label for s, e, label in sorted(intervals) if s <= end and e >= start_ms))


def _value_order(value: str | None) -> tuple[int, str]:
    return (0, "") if value is None else (1, value)


def _send_order(send: Send) -> tuple[str, int, int, int]:
    return (send.topic, send.partition if send.partition is not None else -1,
            send.offset if send.offset is not None else -1, send.index)


def _sources(observations: Iterable[Observation]) -> str:
    parts = []
    for o in observations:
        parts.append(f"replica {o.broker}" if o.source == "replica" else f"{o.source} {o.op}")
    return ", ".join(sorted(set(parts)))
