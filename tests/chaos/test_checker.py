"""The chaos checker on hand-made histories: a clean run is valid, and each anomaly is found, counted and
named with the operations that show it."""

from __future__ import annotations

import pytest

from cluster.chaos.checker import ANOMALY_NAMES, CheckResult, check
from cluster.chaos.history import (
    FinalReads,
    NemesisEvent,
    Operation,
    PolledRecord,
    Recorder,
    ReplicaRead,
    TopicPartition,
)

T = "ledger"


class History:
    """Builds a history through the Recorder, one millisecond per event unless told to wait."""

    def __init__(self) -> None:
        self.operations: list[Operation] = []
        self.nemesis: list[NemesisEvent] = []
        self.now_ns = 0
        self.recorder = Recorder(self.operations.append, self.nemesis.append, self._wall_ms, self._monotonic_ns)

    def _wall_ms(self) -> float:
        return 1_000_000 + self.now_ns / 1e6

    def _monotonic_ns(self) -> int:
        self.now_ns += 1_000_000
        return self.now_ns

    def wait(self, ms: int) -> None:
        self.now_ns += ms * 1_000_000

    def send(self, value: str, partition: int = 0, offset: int | None = None, outcome: str = "ok",
             process: str = "producer-0") -> int:
        invoke = self.recorder.invoke(process, "send", topic=T, value=value)
        if outcome == "ok":
            self.recorder.complete(invoke, "ok", partition=partition, offset=offset)
        elif outcome == "fail":
            self.recorder.complete(invoke, "fail", partition=partition, error="NOT_ENOUGH_REPLICAS")
        elif outcome == "info":
            self.recorder.complete(invoke, "info", partition=partition, error="_MSG_TIMED_OUT")
        return invoke.index   # outcome "none": the client died before the completion

    def assign(self, process: str = "consumer-0", partitions: tuple[int, ...] = (0, 1, 2)) -> int:
        invoke = self.recorder.invoke(process, "assign",
                                      partitions=tuple(TopicPartition(topic=T, partition=p) for p in partitions))
        self.recorder.complete(invoke, "ok")
        return invoke.index

    def poll(self, *records: tuple[int, int, str], process: str = "consumer-0") -> int:
        invoke = self.recorder.invoke(process, "poll")
        self.recorder.complete(invoke, "ok", records=tuple(
            PolledRecord(topic=T, partition=p, offset=o, value=v) for p, o, v in records))
        return invoke.index


def replicas(logs: dict[int, list[tuple[int, str]]], brokers=(1, 2, 3), divergent: dict | None = None) -> FinalReads:
    """Every broker holds ``logs[partition]``, unless ``divergent[(broker, partition)]`` says otherwise."""
    divergent = divergent or {}
    return FinalReads(replicas=tuple(
        ReplicaRead(broker=b, topic=T, partition=p, records=tuple(divergent.get((b, p), records)), leader=b == 1)
        for p, records in logs.items() for b in brokers))


def clean_run() -> tuple[History, FinalReads]:
    history = History()
    history.assign()
    for n in range(9):
        history.send(f"v{n}", partition=n % 3, offset=n // 3)
    history.poll(*((p, o, f"v{o * 3 + p}") for p in range(3) for o in range(2)))
    history.poll(*((p, 2, f"v{6 + p}") for p in range(3)))
    return history, replicas({p: [(o, f"v{o * 3 + p}") for o in range(3)] for p in range(3)})


def only(result: CheckResult, name: str, *also: str):
    """The report of this anomaly; the run shows no other anomaly than ``also``, so a history made for one
    anomaly does not pass by tripping another."""
    assert {r.name for r in result.anomalies} == {name, *also}
    [report] = [r for r in result.anomalies if r.name == name]
    return report


def test_a_clean_history_is_valid_with_every_count_zero():
    history, final = clean_run()
    result = check(history.operations, final)
    assert result.verdict == "valid" and result.valid
    assert result.counts == dict.fromkeys(ANOMALY_NAMES, 0)
    assert result.anomalies == ()
    assert (result.summary.sends, result.summary.acknowledged, result.summary.records_polled) == (9, 9, 9)
    assert result.summary.partitions_with_final_reads == 3


def test_the_same_history_gives_the_same_result():
    history, final = clean_run()
    history.send("lost", partition=1, offset=3)
    assert check(history.operations, final).model_dump_json() == check(history.operations, final).model_dump_json()


def test_an_acknowledged_value_missing_after_healing_is_a_lost_write():
    history, final = clean_run()
    lost = history.send("v9", partition=0, offset=3)
    result = check(history.operations, final)
    assert result.verdict == "invalid"
    assert result.counts["lost-write"] == 1
    [example] = only(result, "lost-write").examples
    assert (example.ops, example.values, example.partition, example.offsets) == ((lost,), ("v9",), 0, (3,))


def test_an_acknowledged_value_never_read_below_a_read_offset_is_a_lost_write_without_final_reads():
    history = History()
    history.assign()
    lost = history.send("a", offset=0)
    history.send("b", offset=1)
    seen_later = history.poll((0, 1, "b"))
    result = check(history.operations)
    assert result.counts["lost-write"] == 1
    [example] = only(result, "lost-write").examples
    assert (example.ops, example.values, example.offsets) == ((lost, seen_later), ("a",), (0,))


def test_an_acknowledged_value_nobody_read_without_final_reads_is_unseen_and_the_verdict_unknown():
    history = History()
    unseen = history.send("a", offset=0)
    result = check(history.operations)
    assert result.verdict == "unknown"
    assert result.counts["unseen"] == 1 and result.counts["lost-write"] == 0
    assert only(result, "unseen").examples[0].ops == (unseen,)


def test_one_value_at_two_offsets_is_a_duplicate():
    history, final = clean_run()
    sent = history.send("v9", partition=0, offset=3)
    poll = history.poll((0, 3, "v9"), (0, 4, "v9"))
    final = replicas({0: [(0, "v0"), (1, "v3"), (2, "v6"), (3, "v9"), (4, "v9")],
                      1: [(0, "v1"), (1, "v4"), (2, "v7")], 2: [(0, "v2"), (1, "v5"), (2, "v8")]})
    result = check(history.operations, final)
    assert result.counts["duplicate"] == 1
    [example] = only(result, "duplicate").examples
    assert (example.values, example.offsets, example.ops, example.brokers) == (("v9",), (3, 4), (sent, poll), (1, 2, 3))


def with_writers(final: FinalReads, writers: dict[tuple[int, int], tuple[int, int]]) -> FinalReads:
    """Each replica's read also names the producer id and epoch of the batch at (partition, offset)."""
    return FinalReads(replicas=tuple(
        read.model_copy(update={"writers": tuple((o, *writers[(read.partition, o)]) for o, _ in read.records
                                                 if (read.partition, o) in writers)})
        for read in final.replicas))


def duplicated_v9(writers: dict[tuple[int, int], tuple[int, int]]):
    history, _ = clean_run()
    history.send("v9", partition=0, offset=3)
    final = replicas({0: [(0, "v0"), (1, "v3"), (2, "v6"), (3, "v9"), (4, "v9")],
                      1: [(0, "v1"), (1, "v4"), (2, "v7")], 2: [(0, "v2"), (1, "v5"), (2, "v8")]})
    return check(history.operations, with_writers(final, writers))


def test_copies_under_two_producer_epochs_are_the_clients_resend_and_the_run_stays_valid():
    # librdkafka bumped its epoch and sent v9 again: no broker can tell that from a new value
    result = duplicated_v9({(0, 3): (7, 0), (0, 4): (7, 1)})
    assert result.counts["duplicate"] == 0 and result.counts["client-resend"] == 1
    assert result.verdict == "valid"
    [example] = only(result, "client-resend").examples
    assert example.offsets == (3, 4)
    assert "producer 7 epoch 0" in example.detail and "producer 7 epoch 1" in example.detail


def test_copies_under_one_producer_epoch_are_the_brokers_duplicate():
    result = duplicated_v9({(0, 3): (7, 1), (0, 4): (7, 1)})
    assert result.counts["duplicate"] == 1 and result.counts["client-resend"] == 0
    assert result.verdict == "invalid"


def test_a_copy_whose_writer_is_unknown_stays_a_duplicate():
    # a read without batch headers (a cluster read through a consumer) cannot clear the broker
    result = duplicated_v9({(0, 3): (7, 0)})
    assert result.counts["duplicate"] == 1 and result.verdict == "invalid"


def test_a_value_nobody_sent_is_unexpected():
    history, final = clean_run()
    poll = history.poll((2, 3, "ghost"))
    final = replicas({0: [(0, "v0"), (1, "v3"), (2, "v6")], 1: [(0, "v1"), (1, "v4"), (2, "v7")],
                      2: [(0, "v2"), (1, "v5"), (2, "v8"), (3, "ghost")]})
    result = check(history.operations, final)
    assert result.counts["unexpected-value"] == 1
    [example] = only(result, "unexpected-value").examples
    assert (example.values, example.partition, example.offsets, example.ops) == (("ghost",), 2, (3,), (poll,))


def test_two_values_at_one_offset_are_inconsistent_offsets():
    history = History()
    history.assign()
    acked = history.send("a", offset=0)
    history.send("b", outcome="info")
    poll = history.poll((0, 0, "b"))
    result = check(history.operations)
    assert result.counts["inconsistent-offsets"] == 1
    [example] = only(result, "inconsistent-offsets", "unseen").examples  # a: never read, no final reads
    assert (example.offsets, example.values, example.ops) == ((0,), ("a", "b"), (acked, poll))


def test_a_later_send_of_one_producer_at_a_lower_offset_is_a_nonmonotonic_send():
    history, final = clean_run()
    first = history.send("x", partition=1, offset=5, process="producer-1")
    history.send("other", partition=1, offset=4, process="producer-2")  # another producer's order is its own
    second = history.send("y", partition=1, offset=3, process="producer-1")
    final = replicas({0: [(0, "v0"), (1, "v3"), (2, "v6")], 2: [(0, "v2"), (1, "v5"), (2, "v8")],
                      1: [(0, "v1"), (1, "v4"), (2, "v7"), (3, "y"), (4, "other"), (5, "x")]})
    result = check(history.operations, final)
    assert result.counts["nonmonotonic-send"] == 1
    [example] = only(result, "nonmonotonic-send").examples
    assert (example.process, example.ops, example.offsets, example.values) == (
        "producer-1", (first, second), (5, 3), ("x", "y"))


def test_a_consumer_going_back_between_polls_is_a_nonmonotonic_poll():
    history, final = clean_run()
    last_clean_poll = history.operations[-1].index  # it read offset 2 of every partition
    back = history.poll((1, 1, "v4"))
    again = history.poll((1, 0, "v1"))
    result = check(history.operations, final)
    assert (result.counts["nonmonotonic-poll"], result.counts["int-nonmonotonic-poll"]) == (2, 0)
    examples = only(result, "nonmonotonic-poll").examples
    assert [(e.ops, e.offsets, e.partition) for e in examples] == [
        ((last_clean_poll, back), (2, 1), 1), ((back, again), (1, 0), 1)]


def test_a_reassigned_consumer_may_start_anywhere():
    history, final = clean_run()
    history.assign()
    history.poll((0, 0, "v0"))
    assert check(history.operations, final).valid


def test_offsets_going_back_within_one_poll_are_an_int_nonmonotonic_poll():
    history, final = clean_run()
    history.assign()
    poll = history.poll((0, 1, "v3"), (0, 0, "v0"))
    result = check(history.operations, final)
    assert result.counts["int-nonmonotonic-poll"] == 1
    [example] = only(result, "int-nonmonotonic-poll").examples
    assert (example.ops, example.offsets, example.partition) == ((poll,), (1, 0), 0)


def test_jumping_over_an_acknowledged_offset_between_polls_is_a_poll_skip():
    history, final = clean_run()
    history.assign("consumer-1")
    first = history.poll((0, 0, "v0"), process="consumer-1")
    jump = history.poll((0, 2, "v6"), process="consumer-1")
    result = check(history.operations, final)
    assert (result.counts["poll-skip"], result.counts["int-poll-skip"]) == (1, 0)
    [example] = only(result, "poll-skip").examples
    skipped_send = 4  # the assign is operation 0; v3 is the fourth send
    assert (example.process, example.ops, example.offsets, example.values) == (
        "consumer-1", (first, jump, skipped_send), (0, 2), ("v3",))


def test_jumping_over_an_acknowledged_offset_within_one_poll_is_an_int_poll_skip():
    history, final = clean_run()
    history.assign("consumer-1")
    poll = history.poll((2, 0, "v2"), (2, 2, "v8"), process="consumer-1")
    result = check(history.operations, final)
    assert (result.counts["int-poll-skip"], result.counts["poll-skip"]) == (1, 0)
    [example] = only(result, "int-poll-skip").examples
    assert (example.ops[0], example.offsets, example.values) == (poll, (0, 2), ("v5",))


def test_jumping_over_an_offset_without_an_acknowledged_value_is_no_skip():
    history = History()
    history.assign()
    history.send("a", offset=0)
    history.send("maybe", outcome="info")  # took offset 1, or not; either way nobody was promised it
    history.send("c", offset=2)
    history.poll((0, 0, "a"), (0, 2, "c"))
    assert check(history.operations, replicas({0: [(0, "a"), (2, "c")]})).valid


def test_reading_a_value_whose_send_failed_is_an_aborted_read():
    history, final = clean_run()
    failed = history.send("nope", partition=1, outcome="fail")
    poll = history.poll((1, 3, "nope"))
    final = replicas({0: [(0, "v0"), (1, "v3"), (2, "v6")], 1: [(0, "v1"), (1, "v4"), (2, "v7"), (3, "nope")],
                      2: [(0, "v2"), (1, "v5"), (2, "v8")]})
    result = check(history.operations, final)
    assert result.counts["aborted-read"] == 1
    [example] = only(result, "aborted-read").examples
    assert (example.ops, example.values, example.offsets) == ((failed, poll), ("nope",), (3,))
    assert example.brokers == (1, 2, 3)
    assert "NOT_ENOUGH_REPLICAS" in example.detail


def test_a_polled_value_that_is_gone_after_healing_is_a_dirty_read():
    history, final = clean_run()
    sent = history.send("truncated", partition=2, outcome="info")
    poll = history.poll((2, 3, "truncated"))
    result = check(history.operations, final)
    assert result.counts["dirty-read"] == 1 and result.counts["lost-write"] == 0
    [example] = only(result, "dirty-read").examples
    assert (example.ops, example.values, example.partition, example.offsets) == ((poll, sent), ("truncated",), 2, (3,))


def test_replicas_disagreeing_below_their_shortest_log_end_are_divergent():
    history, _ = clean_run()
    logs = {p: [(o, f"v{o * 3 + p}") for o in range(3)] for p in range(3)}
    final = replicas(logs, divergent={(3, 1): [(0, "v1"), (1, "v4")],           # only behind: fine
                                      (2, 2): [(0, "v2"), (1, "v5"), (2, "v8"), (3, "v10")],  # only ahead: fine
                                      (2, 0): [(0, "v0"), (1, "v9"), (2, "v6")]})
    history.send("v9", outcome="info")
    history.send("v10", outcome="info")
    result = check(history.operations, final)
    assert result.counts["divergent-replicas"] == 1
    # the acknowledged v3 and broker 2's v9 at one offset are inconsistent offsets too
    [example] = only(result, "divergent-replicas", "inconsistent-offsets").examples
    assert (example.partition, example.offsets, example.brokers, example.values) == (0, (1,), (1, 2, 3),
                                                                                     ("v3", "v9", "v3"))


@pytest.mark.parametrize("outcome", ["info", "none"])
def test_an_indeterminate_send_may_appear_or_not(outcome):
    history, final = clean_run()
    history.send("maybe-lost", partition=0, outcome=outcome)
    history.send("maybe-kept", partition=0, outcome=outcome)
    history.poll((0, 3, "maybe-kept"))
    final = replicas({0: [(0, "v0"), (1, "v3"), (2, "v6"), (3, "maybe-kept")],
                      1: [(0, "v1"), (1, "v4"), (2, "v7")], 2: [(0, "v2"), (1, "v5"), (2, "v8")]})
    result = check(history.operations, final)
    assert result.valid
    assert (result.summary.indeterminate, result.availability.info) == (2, 2)


def test_an_indeterminate_send_that_appears_twice_is_a_duplicate():
    history, final = clean_run()
    maybe = history.send("maybe", partition=0, outcome="info")
    history.poll((0, 3, "maybe"), (0, 4, "maybe"))
    final = replicas({0: [(0, "v0"), (1, "v3"), (2, "v6"), (3, "maybe"), (4, "maybe")],
                      1: [(0, "v1"), (1, "v4"), (2, "v7")], 2: [(0, "v2"), (1, "v5"), (2, "v8")]})
    result = check(history.operations, final)
    assert result.verdict == "invalid" and result.counts["duplicate"] == 1
    assert maybe in only(result, "duplicate").examples[0].ops


def test_examples_are_capped_but_the_count_is_not():
    history, final = clean_run()
    for n in range(25):
        history.send(f"lost{n:02}", partition=1, offset=3 + n)
    report = only(check(history.operations, final, max_examples=20), "lost-write")
    assert report.count == 25 and len(report.examples) == 20
    assert report.examples[0].values == ("lost00",)


def test_values_below_the_log_start_offset_were_deleted_not_lost():
    history = History()
    history.send("old", offset=0)
    final = FinalReads(replicas=(ReplicaRead(broker=1, topic=T, partition=0, records=((1, "new"),),
                                             log_start_offset=1),))
    history.send("new", offset=1)
    assert check(history.operations, final).valid


def test_availability_reports_failed_and_unknown_operations_and_the_longest_time_without_an_ok_send():
    history = History()
    history.send("a", offset=0)
    history.recorder.nemesis("start", "kill", targets=[2], step=0)
    history.send("b", outcome="fail")
    history.wait(5_000)
    history.send("c", outcome="info")
    history.recorder.nemesis("stop", "kill", targets=[2], step=0)
    history.wait(1_000)
    history.send("d", offset=1)
    history.recorder.nemesis("start", "pause", targets=[3], step=1)
    history.send("e", offset=2)
    result = check(history.operations, nemesis=history.nemesis)
    availability = result.availability
    assert (availability.operations, availability.ok, availability.fail, availability.info) == (5, 3, 1, 1)
    assert availability.unavailable_share == pytest.approx(0.4)
    assert availability.send_unavailable_share == pytest.approx(0.4)
    # from a's ack to d's ack: the two waits and eight clock readings of 1 ms (nemesis events included)
    assert availability.longest_without_ok_send_ms == pytest.approx(6_008)
    assert availability.gap_end_ts_ms - availability.gap_start_ts_ms == pytest.approx(6_008)
    assert availability.faults_during_gap == ("kill [2]",)


def test_a_completion_without_its_invoke_is_refused():
    stray = Operation(index=7, type="ok", process="c", f="poll", ts_ms=0, mono_ns=0)
    with pytest.raises(ValueError, match="operation 7 completes"):
        check([stray])


def test_a_value_sent_twice_is_refused_because_values_must_be_unique():
    history = History()
    history.send("a", offset=0)
    history.send("a", offset=1)
    with pytest.raises(ValueError, match="unique value per send"):
        check(history.operations)


def test_the_result_is_what_results_json_holds():
    history, final = clean_run()
    history.send("gone", partition=0, offset=3)
    result = check(history.operations, final)
    assert CheckResult.model_validate_json(result.model_dump_json()) == result


def test_an_acknowledged_value_read_and_then_truncated_away_is_lost_and_its_read_dirty():
    history, final = clean_run()
    sent = history.send("acked-then-gone", partition=2, offset=3)
    poll = history.poll((2, 3, "acked-then-gone"))
    result = check(history.operations, final)
    assert result.counts["lost-write"] == 1 and result.counts["dirty-read"] == 1
    [lost] = only(result, "lost-write", "dirty-read").examples
    assert (lost.ops, lost.values, lost.offsets) == ((sent,), ("acked-then-gone",), (3,))
    assert "read once, then truncated" in lost.detail
    [dirty] = only(result, "dirty-read", "lost-write").examples
    assert dirty.ops == (poll, sent)
