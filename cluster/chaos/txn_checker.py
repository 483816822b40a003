"""The exactly-once part of the chaos checker, for the txn workload (consume-transform-produce): pure, as the rest.

In: the history's ``txn`` operations (each names the input records it consumed and the output value it made of
each), the input sends, and what fresh consumers read from the output topic after healing, read_committed and
read_uncommitted, with the transformers' group's committed offsets. Out: anomalies added through ``add`` and a
``TxnSummary``.

Exactly-once, as Kafka's own transactions system test (transactions_test.py) checks it with its message copier:
every acknowledged input value appears in the committed output exactly once. Each output value names the
transaction that wrote it (``t:<input>@<transaction>``), so a copy written by an aborted attempt and one written by
the retry that committed are two values, and the checker can tell which transaction a visible value came from.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from cluster.chaos.history import HEAL, FinalReads, NemesisEvent, Operation, PolledRecord

TXN_ANOMALY_NAMES: tuple[str, ...] = (
    "txn-lost", "txn-duplicate", "txn-zombie-coordinator", "txn-aborted-read", "txn-partial", "txn-lost-commit",
    "txn-out-of-order", "txn-unexpected-output", "txn-inconsistent-reads", "txn-unprocessed",
)
# not read into the output yet: the transformers did not get that far (a fault to the end of the drain), which
# cannot tell lost from late, as "unseen"
TXN_UNCERTAIN = frozenset({"txn-unprocessed"})
# Kafka 2.8's own behaviour, not kafkasim's doing: a group coordinator cut off from ZooKeeper still answers OffsetFetch
# from memory after its __consumer_offsets partition has a new leader (docs/zombie-coordinator.md). A run whose only
# definite anomalies are these is reported as such, neither valid nor invalid.
TXN_KAFKA_KNOWN = frozenset({"txn-zombie-coordinator"})
# How long after a zk-isolate ends its broker may still answer as a zombie: it must reconnect, re-register and be
# sent the LeaderAndIsr that makes it a follower (a few seconds; the margin is wide on purpose)
ZOMBIE_GRACE_NS = 30 * 1_000_000_000

TXN_DESCRIPTIONS: dict[str, str] = {
    "txn-lost": "an acknowledged input value with no copy in the committed output, though a committed transaction "
                "consumed it or the group's committed offset is past it",
    "txn-duplicate": "an input value with more than one copy in the committed output (exactly-once broken)",
    "txn-zombie-coordinator": "an input value with more than one copy in the committed output, the later copy made "
                              "after its transformer rewound, during a zk-isolate, to committed offsets older than "
                              "those an earlier committed copy had committed: a group coordinator cut off from "
                              "ZooKeeper answered OffsetFetch from memory after its __consumer_offsets partition had "
                              "a new leader. Kafka 2.8 does the same (docs/zombie-coordinator.md): not a kafkasim bug",
    "txn-aborted-read": "G1a for transactions: a read_committed reader was shown a value of an aborted transaction",
    "txn-partial": "atomicity: some of one transaction's output values are visible to read_committed, others not",
    "txn-lost-commit": "a transaction whose commit was acknowledged, with none of its values visible to "
                       "read_committed",
    "txn-out-of-order": "the committed output of a partition is not in the input order of the partition it was "
                        "made from",
    "txn-unexpected-output": "a value in the output topic that no transaction wrote",
    "txn-inconsistent-reads": "read_committed showed a value at an offset where read_uncommitted, reading the same "
                              "log, has another value or none",
    "txn-unprocessed": "an acknowledged input value the transformers never consumed in a committed transaction and "
                       "the group's committed offset has not passed: not processed yet, so neither lost nor kept",
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TxnSummary(_Frozen):
    """The txn workload's figures, beside the anomalies: what was committed, aborted and left unknown."""

    transactions: int
    committed: int
    aborted: int
    unknown: int
    unknown_visible: int            # unknown transactions whose values read_committed shows (they committed)
    inputs_acknowledged: int
    inputs_exactly_once: int        # acknowledged inputs with exactly one copy in the committed output
    outputs_committed: int          # records read_committed showed
    outputs_in_log: int             # records read_uncommitted showed: committed, aborted and unknown alike
    aborted_values_in_log: int      # values of aborted transactions in the log, hidden from read_committed


class InputSend(Protocol):
    """What the checker knows of a send to the input topic (checker.Send)."""

    index: int
    process: str
    topic: str
    partition: int | None
    offset: int | None
    value: str
    outcome: Literal["ok", "fail", "info"]


@dataclass(frozen=True)
class Transaction:
    index: int
    process: str
    outcome: Literal["ok", "fail", "info"]
    error: str | None
    output_topic: str
    inputs: tuple[PolledRecord, ...]
    outputs: tuple[str, ...]
    completed_ns: int | None = None   # the completion's monotonic time (None: no completion)


@dataclass(frozen=True)
class Rewind:
    """A transformer's return to the committed offsets its group coordinator answered (history ``rewind``)."""

    index: int
    process: str
    invoked_ns: int
    offsets: dict[tuple[str, int], int]   # (topic, partition) -> committed offset answered, -1: none


Add = Callable[..., None]   # _Anomalies.add: (name, **AnomalyExample fields)
Position = tuple[str, int, int]   # topic, partition, offset


def transactions(pairs: dict[int, tuple[Operation, Operation | None]]) -> list[Transaction]:
    """The txn operations in invoke order; no completion (the transformer died) is an unknown outcome."""
    found = []
    for index, (invoke, completion) in sorted(pairs.items()):
        if invoke.f != "txn":
            continue
        assert invoke.topic is not None  # Operation's validator
        found.append(Transaction(
            index=index, process=invoke.process,
            outcome="info" if completion is None else completion.type,  # type: ignore[arg-type]  # never "invoke"
            error=completion.error if completion else "no completion", output_topic=invoke.topic,
            inputs=invoke.records, outputs=invoke.values, completed_ns=completion.mono_ns if completion else None))
    return found


def rewinds(pairs: dict[int, tuple[Operation, Operation | None]]) -> list[Rewind]:
    """The rewinds answered, in invoke order."""
    return [Rewind(index=index, process=invoke.process, invoked_ns=invoke.mono_ns,
                   offsets={(o.topic, o.partition): o.offset for o in completion.offsets})
            for index, (invoke, completion) in sorted(pairs.items())
            if invoke.f == "rewind" and completion is not None and completion.type == "ok"]


def zk_isolations(nemesis: Iterable[NemesisEvent]) -> list[tuple[int, int | None]]:
    """(start, end) of every zk-isolate, monotonic ns; end None: never healed. A heal ends every fault."""
    windows: list[tuple[int, int | None]] = []
    for event in sorted(nemesis, key=lambda e: e.mono_ns):
        if event.type == "start" and event.kind == "zk-isolate":
            windows.append((event.mono_ns, None))
        elif event.type == "stop" and event.kind in ("zk-isolate", HEAL):
            windows = [(start, event.mono_ns if end is None else end) for start, end in windows]
    return windows


def check_transactions(txns: Sequence[Transaction], sends: Iterable[InputSend], final_reads: FinalReads | None,
                       add: Add, *, rewinds: Sequence[Rewind] = (),
                       isolations: Sequence[tuple[int, int | None]] = ()) -> TxnSummary:
    """``rewinds`` and ``isolations`` (zk-isolate windows) name the duplicates a zombie group coordinator made."""
    writer: dict[str, tuple[Transaction, int]] = {}
    for txn in txns:
        for i, value in enumerate(txn.outputs):
            if value in writer:
                raise ValueError(f"output value {value!r} is written by transactions {writer[value][0].index} and "
                                 f"{txn.index}: the checker needs a value per transaction to tell them apart")
            writer[value] = (txn, i)
    output_topics = {txn.output_topic for txn in txns}
    isolated = final_reads.isolated if final_reads else ()
    output_topics |= {read.topic for read in isolated}
    committed = {(r.topic, r.partition): r.records for r in isolated if r.isolation_level == "read_committed"}
    uncommitted = {(r.topic, r.partition): r.records for r in isolated if r.isolation_level == "read_uncommitted"}
    group_offsets: dict[tuple[str, int], int] = {}
    for g in final_reads.group_offsets if final_reads else ():
        group_offsets[(g.topic, g.partition)] = max(g.offset, group_offsets.get((g.topic, g.partition), -1))

    visible: dict[str, list[Position]] = defaultdict(list)
    for (topic, partition), records in sorted(committed.items()):
        for offset, value in records:
            visible[value].append((topic, partition, offset))   # type: ignore[index]  # None is unexpected below
    _unexpected(committed, uncommitted, writer, add)
    _inconsistent_reads(committed, uncommitted, add)
    unknown_visible = _atomicity(txns, visible, add)
    inputs = [s for s in sends if s.topic not in output_topics]
    zombie = _ZombieRewinds(rewinds, isolations)
    exactly_once = _exactly_once(txns, inputs, visible, writer, group_offsets, add, zombie)
    _order(committed, writer, add)

    aborted_values = {value for txn in txns if txn.outcome == "fail" for value in txn.outputs}
    return TxnSummary(
        transactions=len(txns), committed=sum(t.outcome == "ok" for t in txns),
        aborted=sum(t.outcome == "fail" for t in txns), unknown=sum(t.outcome == "info" for t in txns),
        unknown_visible=unknown_visible, inputs_acknowledged=sum(s.outcome == "ok" for s in inputs),
        inputs_exactly_once=exactly_once, outputs_committed=sum(len(r) for r in committed.values()),
        outputs_in_log=sum(len(r) for r in uncommitted.values()),
        aborted_values_in_log=sum(value in aborted_values for r in uncommitted.values() for _, value in r))


def _unexpected(committed: dict[tuple[str, int], tuple[tuple[int, str | None], ...]],
                uncommitted: dict[tuple[str, int], tuple[tuple[int, str | None], ...]],
                writer: dict[str, tuple[Transaction, int]], add: Add) -> None:
    seen: dict[str | None, list[tuple[str, Position]]] = defaultdict(list)
    for level, reads in (("read_committed", committed), ("read_uncommitted", uncommitted)):
        for (topic, partition), records in sorted(reads.items()):
            for offset, value in records:
                if value is None or value not in writer:
                    seen[value].append((level, (topic, partition, offset)))
    for value, where in seen.items():
        topic, partition, _ = where[0][1]
        add("txn-unexpected-output", topic=topic, partition=partition, values=(value,),
            offsets=tuple(sorted({p[2] for _, p in where})),
            detail="read by " + ", ".join(sorted({f"{level} at {t}-{p}@{o}" for level, (t, p, o) in where})))


def _inconsistent_reads(committed: dict[tuple[str, int], tuple[tuple[int, str | None], ...]],
                        uncommitted: dict[tuple[str, int], tuple[tuple[int, str | None], ...]], add: Add) -> None:
    """read_committed filters the log read_uncommitted sees; it never shows anything the log does not hold."""
    for (topic, partition), records in sorted(committed.items()):
        if (topic, partition) not in uncommitted:
            continue
        log = dict(uncommitted[(topic, partition)])
        differing = [(offset, value) for offset, value in records if log.get(offset, "<none>") != value]
        if differing:
            offset, value = differing[0]
            add("txn-inconsistent-reads", topic=topic, partition=partition, offsets=(offset,),
                values=(value, log.get(offset)),
                detail=f"{len(differing)} offset(s); at {offset} read_committed {value!r}, read_uncommitted "
                       f"{log.get(offset, '<nothing>')!r}")


def _atomicity(txns: Sequence[Transaction], visible: dict[str, list[Position]], add: Add) -> int:
    """A transaction's values are all visible to read_committed or none: all for a commit, none for an abort, either
    for an unknown outcome. Returns how many unknown ones were visible."""
    unknown_visible = 0
    for txn in txns:
        shown = [v for v in txn.outputs if v in visible]
        hidden = [v for v in txn.outputs if v not in visible]
        where = sorted({p for v in shown for p in visible[v]})
        fields = {"ops": (txn.index,), "process": txn.process, "topic": txn.output_topic}
        if txn.outcome == "fail" and shown:
            add("txn-aborted-read", **fields, values=tuple(shown[:5]), partition=where[0][1],
                offsets=tuple(p[2] for p in where[:5]),
                detail=f"aborted ({txn.error}); {len(shown)} of its {len(txn.outputs)} value(s) visible to "
                       "read_committed")
        if shown and hidden:
            add("txn-partial", **fields, values=tuple(hidden[:5]), partition=where[0][1],
                offsets=tuple(p[2] for p in where[:5]),
                detail=f"{'committed' if txn.outcome == 'ok' else 'aborted' if txn.outcome == 'fail' else 'unknown'}"
                       f" transaction: {len(shown)} of {len(txn.outputs)} value(s) visible to read_committed; "
                       f"the values shown are those missing")
        if txn.outcome == "ok" and not shown:
            add("txn-lost-commit", **fields, values=tuple(txn.outputs[:5]),
                detail=f"commit acknowledged; none of its {len(txn.outputs)} value(s) visible to read_committed")
        if txn.outcome == "info" and shown and not hidden:
            unknown_visible += 1
    return unknown_visible


def _exactly_once(txns: Sequence[Transaction], inputs: Sequence[InputSend], visible: dict[str, list[Position]],
                  writer: dict[str, tuple[Transaction, int]], group_offsets: dict[tuple[str, int], int],
                  add: Add, zombie: _ZombieRewinds) -> int:
    copies: dict[str, list[tuple[Position, Transaction]]] = defaultdict(list)
    for value, positions in visible.items():
        if value in writer:
            txn, i = writer[value]
            copies[txn.inputs[i].value or ""] += [(position, txn) for position in positions]
    consumed: dict[str, PolledRecord] = {}           # input value -> where a transformer read it
    committed_by: dict[str, Transaction] = {}        # input value -> a committed transaction that consumed it
    for txn in txns:
        for record in txn.inputs:
            if record.value is not None:
                consumed.setdefault(record.value, record)
                if txn.outcome == "ok":
                    committed_by.setdefault(record.value, txn)
    exactly_once = 0
    for send in sorted(inputs, key=lambda s: (s.topic, -1 if s.partition is None else s.partition,
                                              -1 if s.offset is None else s.offset, s.index)):
        found = sorted(copies.get(send.value, ()), key=lambda c: c[0])
        if len(found) == 1 and send.outcome == "ok":
            exactly_once += 1
        if len(found) > 1:
            topic, partition, _ = found[0][0]
            explained = zombie.explain(send.value, [t for _, t in found])
            add("txn-zombie-coordinator" if explained else "txn-duplicate", topic=topic, partition=partition,
                values=(send.value,),
                offsets=tuple(p[2] for p, _ in found), ops=tuple(sorted({send.index, *(t.index for _, t in found)})),
                detail="copies by " + ", ".join(f"transaction {t.index} ({t.process}, {_OUTCOME[t.outcome]}) at "
                                                f"{p[0]}-{p[1]}@{p[2]}" for p, t in found)
                       + (f"; {explained}" if explained else ""))
        if found or send.outcome != "ok":
            continue
        read = consumed.get(send.value)
        partition = read.partition if read else send.partition
        offset = read.offset if read else send.offset
        committed_offset = group_offsets.get((send.topic, partition), -1) if partition is not None else -1
        fields = {"topic": send.topic, "partition": partition, "values": (send.value,), "process": send.process,
                  "offsets": () if offset is None else (offset,)}
        if (txn := committed_by.get(send.value)) is not None:
            add("txn-lost", **fields, ops=(send.index, txn.index),
                detail=f"consumed by committed transaction {txn.index} ({txn.process}), no copy in the committed "
                       "output")
        elif offset is not None and committed_offset > offset:
            add("txn-lost", **fields, ops=(send.index,),
                detail=f"the group's committed offset {committed_offset} is past it, no copy in the committed output")
        else:
            add("txn-unprocessed", **fields, ops=(send.index,),
                detail=f"the group's committed offset is {committed_offset}"
                       + ("; read by a transformer, only in transactions that did not commit" if read else
                          "; no transformer read it"))
    return exactly_once


class _ZombieRewinds:
    """Which duplicates a zombie group coordinator explains. A later copy of an input is explained when its
    transformer, before consuming it again, rewound during a zk-isolate (or within ZOMBIE_GRACE_NS of its end) to a
    committed offset at or below the input's, after an earlier copy's transaction had completed: that transaction's
    offsets were past the input, so the coordinator that answered had not seen them — one cut off from ZooKeeper,
    answering from memory for a partition that had a new leader (Kafka 2.8's GroupCoordinator.handleFetchOffsets)."""

    def __init__(self, rewinds: Sequence[Rewind], isolations: Sequence[tuple[int, int | None]]) -> None:
        self.isolations = isolations
        self.by_process: dict[str, list[Rewind]] = defaultdict(list)
        for rewind in rewinds:
            self.by_process[rewind.process].append(rewind)

    def _isolated(self, mono_ns: int) -> bool:
        return any(start <= mono_ns and (end is None or mono_ns <= end + ZOMBIE_GRACE_NS)
                   for start, end in self.isolations)

    def explain(self, value: str, copies: Sequence[Transaction]) -> str:
        """Why each copy after the first is there, or "" when one of them is not explained."""
        ordered = sorted({t.index: t for t in copies}.values(), key=lambda t: t.index)
        if len(ordered) < 2 or not self.isolations:
            return ""
        reasons = []
        for k, later in enumerate(ordered[1:], start=1):
            record = next(r for r in later.inputs if r.value == value)
            key = (record.topic, record.partition)
            # the answer was at or before the input (-1: none committed), though a copy's commit had gone past it
            stale = [rewind for rewind in self.by_process.get(later.process, ())
                     if rewind.index < later.index and self._isolated(rewind.invoked_ns)
                     and key in rewind.offsets and rewind.offsets[key] <= record.offset
                     and any(t.completed_ns is not None and t.completed_ns < rewind.invoked_ns for t in ordered[:k])]
            if not stale:
                return ""
            rewind = stale[-1]
            reasons.append(f"{later.process} rewound (operation {rewind.index}) to "
                           f"{record.topic}-{record.partition}@{rewind.offsets[key]} "
                           f"during a zk-isolate, after a copy had committed past @{record.offset}")
        return "; ".join(reasons)


def _order(committed: dict[tuple[str, int], tuple[tuple[int, str | None], ...]],
           writer: dict[str, tuple[Transaction, int]], add: Add) -> None:
    """The transform keeps partitioning (input partition p goes to output partition p) and one transformer owns an
    input partition at a time, so the committed output of p is in p's input order. A later copy of an input value
    already seen is a duplicate, reported as one, not a reordering."""
    for (topic, partition), records in sorted(committed.items()):
        last: dict[tuple[str, int], tuple[int, int, str]] = {}   # input partition -> (input offset, output offset)
        seen: set[str | None] = set()
        for offset, value in records:
            if value not in writer:
                continue
            txn, i = writer[value]
            source = txn.inputs[i]
            if source.value in seen:
                continue
            seen.add(source.value)
            key = (source.topic, source.partition)
            if key in last and source.offset <= last[key][0]:
                before_offset, before_output, before_value = last[key]
                add("txn-out-of-order", topic=topic, partition=partition, offsets=(before_output, offset),
                    values=(before_value, value), ops=(writer[before_value][0].index, txn.index),
                    detail=f"{source.topic}-{source.partition}@{source.offset} is committed at {topic}-{partition}"
                           f"@{offset}, after @{before_offset} at @{before_output}")
            last[key] = (source.offset, offset, value)


_OUTCOME = {"ok": "committed", "fail": "aborted", "info": "unknown"}
