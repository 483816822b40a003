"""The exactly-once checker of the txn workload on hand-made histories: a clean consume-transform-produce run is
valid, and each anomaly (lost, duplicate, aborted read, partial transaction, lost commit, reordering, unexpected
output, inconsistent reads, unprocessed) is found and named with the transactions that show it."""

from __future__ import annotations

from collections import defaultdict

import pytest

from cluster.chaos.checker import ANOMALY_NAMES, CheckResult, check
from cluster.chaos.history import (
    FinalReads,
    GroupOffset,
    IsolatedRead,
    NemesisEvent,
    Operation,
    PolledRecord,
    Recorder,
    ReplicaRead,
)
from cluster.chaos.txn_checker import TXN_ANOMALY_NAMES

IN, OUT, GROUP = "chaos-txn-input", "chaos-txn-output", "kafkasim-chaos-txn"


class Run:
    """A txn run built by hand: input sends, transactions, and the output log they leave. The output log is laid
    out as a broker would: each transaction's values in the order appended, then one marker offset per partition it
    touched at its end (commit or abort); read_committed shows committed and (when told) unknown transactions'
    values, read_uncommitted every value."""

    def __init__(self) -> None:
        self.operations: list[Operation] = []
        self.ns = 0
        self.recorder = Recorder(self.operations.append, lambda _: None, lambda: 1e12 + self.ns / 1e6, self._mono)
        self.input_end: dict[int, int] = defaultdict(int)
        self.input_log: dict[int, list[tuple[int, str]]] = defaultdict(list)
        self.log: dict[int, list[tuple[int, str, bool]]] = defaultdict(list)   # partition -> (offset, value, shown)
        self.output_end: dict[int, int] = defaultdict(int)
        self.transactions = 0
        self.group: dict[int, int] = {}
        self.nemesis: list[NemesisEvent] = []

    def _mono(self) -> int:
        self.ns += 1_000_000
        return self.ns

    def send(self, value: str, partition: int = 0, outcome: str = "ok") -> PolledRecord:
        invoke = self.recorder.invoke("producer-0", "send", topic=IN, partition=partition, value=value)
        offset = self.input_end[partition]
        if outcome == "ok":
            self.recorder.complete(invoke, "ok", partition=partition, offset=offset)
        else:
            self.recorder.complete(invoke, outcome, error="NOT_ENOUGH_REPLICAS" if outcome == "fail" else "_TIMED_OUT")
        if outcome != "fail":
            self.input_log[partition].append((offset, value))
            self.input_end[partition] += 1
        return PolledRecord(topic=IN, partition=partition, offset=offset, value=value)

    def txn(self, inputs: list[PolledRecord], outcome: str = "ok", process: str = "transformer-0",
            visible: bool | None = None, appended: list[int] | None = None) -> tuple[int, tuple[str, ...]]:
        """One transaction over ``inputs``; ``visible`` (default: committed) whether read_committed shows it,
        ``appended`` which of its values reached the log (default all), to make broken logs."""
        self.transactions += 1
        values = tuple(f"t:{r.value}@{process}.{self.transactions}" for r in inputs)
        invoke = self.recorder.invoke(process, "txn", topic=OUT, records=tuple(inputs), values=values)
        if outcome == "ok":
            self.recorder.complete(invoke, "ok")
        elif outcome in ("fail", "info"):
            self.recorder.complete(invoke, outcome, error="RANDOM_ABORT" if outcome == "fail" else "_TIMED_OUT")
        shown = outcome == "ok" if visible is None else visible
        touched = set()
        for i, (record, value) in enumerate(zip(inputs, values, strict=True)):
            if appended is None or i in appended:
                self.log[record.partition].append((self.output_end[record.partition], value, shown))
                self.output_end[record.partition] += 1
                touched.add(record.partition)
        for partition in touched:
            self.output_end[partition] += 1   # the marker
        if outcome == "ok":
            for record in inputs:
                self.group[record.partition] = max(self.group.get(record.partition, 0), record.offset + 1)
        return invoke.index, values

    def final(self, committed: dict[int, list[tuple[int, str]]] | None = None,
              uncommitted: dict[int, list[tuple[int, str]]] | None = None) -> FinalReads:
        partitions = range(2)
        committed = committed if committed is not None else {
            p: [(o, v) for o, v, shown in self.log[p] if shown] for p in partitions}
        uncommitted = uncommitted if uncommitted is not None else {
            p: [(o, v) for o, v, _ in self.log[p]] for p in partitions}
        return FinalReads(
            # the input topic's log, as the runner reads every replica: the input sends are checked as any sends
            replicas=tuple(ReplicaRead(broker=1, topic=IN, partition=p, records=tuple(self.input_log[p]), leader=True)
                           for p in partitions),
            isolated=tuple(IsolatedRead(isolation_level=level, topic=OUT, partition=p, records=tuple(reads.get(p, ())))
                           for level, reads in (("read_committed", committed), ("read_uncommitted", uncommitted))
                           for p in partitions),
            group_offsets=tuple(GroupOffset(group=GROUP, topic=IN, partition=p, offset=self.group.get(p, -1))
                                for p in partitions))

    def rewind(self, offsets: dict[int, int], process: str = "transformer-0") -> int:
        """A transformer's return to the committed offsets its coordinator answered (partition -> offset)."""
        invoke = self.recorder.invoke(process, "rewind")
        self.recorder.complete(invoke, "ok", offsets=tuple(
            GroupOffset(group=GROUP, topic=IN, partition=p, offset=o) for p, o in offsets.items()))
        return invoke.index

    def fault(self, type: str, kind: str, targets: tuple[int, ...] = ()) -> None:
        self.nemesis.append(NemesisEvent(type=type, kind=kind, ts_ms=1e12 + self.ns / 1e6, mono_ns=self._mono(),
                                         targets=targets))

    def check(self, final: FinalReads | None = None) -> CheckResult:
        return check(self.operations, final if final is not None else self.final(), self.nemesis)


def clean_run() -> tuple[Run, list[PolledRecord], int]:
    """Six inputs on two partitions; an aborted transaction (a random abort) whose inputs are processed again by
    the next, committed one, and an unknown one that did commit. Also returns the first transaction's index."""
    run = Run()
    inputs = [run.send(f"v{n}", partition=n % 2) for n in range(6)]
    first, _ = run.txn([inputs[0], inputs[1]])
    run.txn([inputs[2], inputs[3]], outcome="fail")
    run.txn([inputs[2], inputs[3]], process="transformer-1")
    run.txn([inputs[4], inputs[5]], outcome="info", visible=True)
    return run, inputs, first


def only(result: CheckResult, name: str, *also: str):
    assert {r.name for r in result.anomalies} == {name, *also}, result.anomalies
    [report] = [r for r in result.anomalies if r.name == name]
    return report


def test_a_clean_transactional_run_is_valid_with_every_count_zero_and_its_figures():
    run, _, _ = clean_run()
    result = run.check()
    assert result.verdict == "valid", result.anomalies
    assert result.counts == dict.fromkeys(ANOMALY_NAMES + TXN_ANOMALY_NAMES, 0)
    summary = result.transactions
    assert summary is not None
    assert (summary.transactions, summary.committed, summary.aborted, summary.unknown) == (4, 2, 1, 1)
    assert summary.unknown_visible == 1
    assert (summary.inputs_acknowledged, summary.inputs_exactly_once) == (6, 6)
    # the aborted transaction's two values are in the log, hidden from read_committed
    assert (summary.outputs_committed, summary.outputs_in_log, summary.aborted_values_in_log) == (6, 8, 2)
    # the transactions are not the availability figures' operations: an aborted one is no outage
    assert (result.availability.operations, result.availability.fail, result.availability.info) == (6, 0, 0)


def test_a_run_without_transactions_has_no_transaction_counts():
    run = Run()
    run.send("v0")
    result = check(run.operations)
    assert set(result.counts) == set(ANOMALY_NAMES) and result.transactions is None


def test_an_input_value_past_the_groups_committed_offset_with_no_output_is_lost():
    run, _, _ = clean_run()
    skipped = run.send("v6", partition=0)
    after = run.send("v8", partition=0)
    run.txn([after])
    run.group[0] = after.offset + 1   # the group's offset moved over v6 without any transaction writing it
    result = run.check()
    assert result.verdict == "invalid"
    [example] = only(result, "txn-lost").examples
    assert (example.values, example.partition, example.offsets) == (("v6",), 0, (skipped.offset,))
    assert "committed offset" in example.detail


def test_an_input_value_a_committed_transaction_consumed_but_whose_output_is_gone_is_lost():
    run, _, _ = clean_run()
    record = run.send("v6", partition=1)
    other = run.send("v7", partition=0)
    txn, _ = run.txn([record, other], appended=[1])   # v6's output never reached the log
    result = run.check()
    lost = only(result, "txn-lost", "txn-partial")
    [example] = lost.examples
    assert example.values == ("v6",) and txn in example.ops
    [partial] = only(result, "txn-partial", "txn-lost").examples
    assert partial.ops == (txn,) and partial.values == (f"t:v6@transformer-0.{run.transactions}",)


def test_an_input_value_the_transformers_did_not_reach_is_unprocessed_and_the_verdict_unknown():
    run, _, _ = clean_run()
    record = run.send("v6", partition=0)
    result = run.check()
    assert result.verdict == "unknown"
    [example] = only(result, "txn-unprocessed").examples
    assert example.values == ("v6",) and example.offsets == (record.offset,)


def test_an_input_value_in_the_committed_output_twice_is_a_duplicate():
    run, inputs, first = clean_run()
    # a second transformer processed v0 again and committed: the group's offsets did not fence the first
    again, _ = run.txn([inputs[0]], process="transformer-1")
    result = run.check()
    assert result.verdict == "invalid"
    [example] = only(result, "txn-duplicate").examples
    assert example.values == ("v0",) and again in example.ops and first in example.ops
    assert len(example.offsets) == 2 and "transformer-0" in example.detail and "transformer-1" in example.detail


def zombie_run(isolated: bool = True) -> tuple[Run, list[PolledRecord], int]:
    """The schedule of tests/transaction/test_zombie_coordinator.py: v0 v1 committed; (a zk-isolate of the group
    coordinator;) v2 v3 committed at the new coordinator; an abort, and a rewind answered by the zombie with the old
    offset 2; v2 v3 copied again and committed. Returns the rewind's index."""
    run = Run()
    inputs = [run.send(f"v{n}") for n in range(4)]
    run.txn(inputs[:2])
    if isolated:
        run.fault("start", "zk-isolate", (1,))
    run.txn(inputs[2:])
    run.txn(inputs[2:], outcome="fail")
    rewind = run.rewind({0: 2})
    run.txn(inputs[2:])
    run.fault("stop", "heal")
    return run, inputs, rewind


def test_a_copy_made_after_a_rewind_to_stale_offsets_in_a_zk_isolate_is_kafkas_zombie_coordinator():
    run, _, rewind = zombie_run()
    result = run.check()
    assert result.verdict == "kafka-known"
    report = only(result, "txn-zombie-coordinator")
    assert [e.values for e in report.examples] == [("v2",), ("v3",)]
    assert f"operation {rewind}" in report.examples[0].detail and "zk-isolate" in report.examples[0].detail
    assert result.counts["txn-duplicate"] == 0
    # the rewinds are not the availability figures' operations either
    assert result.availability.operations == 4


def test_the_same_copies_without_a_zk_isolate_are_duplicates():
    run, _, _ = zombie_run(isolated=False)
    result = run.check()
    assert result.verdict == "invalid"
    assert [e.values for e in only(result, "txn-duplicate").examples] == [("v2",), ("v3",)]


def test_a_zombie_duplicate_beside_any_other_definite_anomaly_leaves_the_run_invalid():
    run, inputs, _ = zombie_run()
    run.txn([inputs[0]], process="transformer-1")   # v0 again, with no rewind to explain it
    result = run.check()
    assert result.verdict == "invalid"
    assert only(result, "txn-duplicate", "txn-zombie-coordinator").examples[0].values == ("v0",)


def test_a_rewind_to_offsets_past_the_input_explains_no_copy():
    run = Run()
    inputs = [run.send(f"v{n}") for n in range(4)]
    run.fault("start", "zk-isolate", (1,))
    run.txn(inputs[:2])
    run.txn(inputs[2:])
    run.rewind({0: 4})   # up to date: the copy below has another cause
    run.txn(inputs[2:])
    assert run.check().verdict == "invalid"


def test_a_value_of_an_aborted_transaction_visible_to_read_committed_is_an_aborted_read():
    run = Run()
    inputs = [run.send(f"v{n}", partition=n % 2) for n in range(2)]
    aborted, values = run.txn(inputs, outcome="fail", visible=True)
    result = run.check()
    assert result.verdict == "invalid"
    [example] = only(result, "txn-aborted-read").examples
    assert example.ops == (aborted,) and set(example.values) == set(values)
    assert "RANDOM_ABORT" in example.detail


def test_an_unknown_transaction_partly_visible_breaks_atomicity():
    run = Run()
    inputs = [run.send(f"v{n}", partition=0) for n in range(2)]
    unknown, values = run.txn(inputs, outcome="info", visible=True)
    committed = {0: [(0, values[0])], 1: []}     # read_committed shows the first value only
    result = run.check(run.final(committed=committed))
    report = only(result, "txn-partial", "txn-unprocessed")
    assert report.examples[0].ops == (unknown,) and report.examples[0].values == (values[1],)
    assert "unknown transaction" in report.examples[0].detail
    assert result.verdict == "invalid"


def test_an_unknown_transaction_entirely_invisible_is_fine_once_its_inputs_are_processed_again():
    run = Run()
    inputs = [run.send(f"v{n}", partition=0) for n in range(2)]
    run.txn(inputs, outcome="info", visible=False)
    run.txn(inputs, process="transformer-1")
    result = run.check()
    assert result.verdict == "valid", result.anomalies
    assert result.transactions.unknown == 1 and result.transactions.unknown_visible == 0


def test_a_committed_transaction_none_of_whose_values_is_visible_is_a_lost_commit():
    run = Run()
    inputs = [run.send(f"v{n}", partition=0) for n in range(2)]
    committed, _ = run.txn(inputs, visible=False)
    run.txn(inputs, process="transformer-1")   # processed again, so no input is lost
    result = run.check()
    [example] = only(result, "txn-lost-commit").examples
    assert example.ops == (committed,)


def test_committed_output_out_of_input_order_is_reported():
    run = Run()
    first, second = run.send("v0", partition=0), run.send("v1", partition=0)
    late, _ = run.txn([second])
    early, _ = run.txn([first], process="transformer-1")
    result = run.check()
    [example] = only(result, "txn-out-of-order").examples
    assert example.ops == (late, early) and example.partition == 0
    assert "chaos-txn-input-0@0" in example.detail


def test_a_value_no_transaction_wrote_is_unexpected_output():
    run, _, _ = clean_run()
    final = run.final()
    ghost = IsolatedRead(isolation_level="read_uncommitted", topic=OUT, partition=1,
                         records=(*final.isolated[3].records, (99, "ghost")))
    result = run.check(final.model_copy(update={"isolated": (*final.isolated[:3], ghost)}))
    [example] = only(result, "txn-unexpected-output").examples
    assert example.values == ("ghost",) and example.offsets == (99,) and "read_uncommitted" in example.detail


def test_read_committed_showing_what_the_log_does_not_hold_is_inconsistent():
    run, _, _ = clean_run()
    final = run.final()
    rc0 = final.isolated[0]
    [(offset, value), *rest] = rc0.records
    moved = rc0.model_copy(update={"records": ((offset + 50, value), *rest)})
    result = run.check(final.model_copy(update={"isolated": (moved, *final.isolated[1:])}))
    [example] = only(result, "txn-inconsistent-reads").examples
    assert example.offsets == (offset + 50,) and example.values == (value, None)


def test_no_transaction_at_all_with_the_output_read_back_leaves_every_input_unprocessed():
    # the coordinator never answered: nothing committed, the group never committed an offset
    run = Run()
    run.send("v0")
    result = run.check()
    assert result.verdict == "unknown" and result.counts["txn-unprocessed"] == 1
    assert result.transactions.transactions == 0


def test_two_transactions_writing_one_output_value_are_refused():
    run = Run()
    record = run.send("v0")
    run.txn([record])
    invoke = run.recorder.invoke("transformer-9", "txn", topic=OUT, records=(record,),
                                 values=(run.operations[-2].values[0],))
    run.recorder.complete(invoke, "ok")
    with pytest.raises(ValueError, match="written by transactions"):
        run.check()
