"""The chaos checker on hand-made histories of a compacted topic: a log the cleaner compacted by Kafka 2.8's rules is
valid, though most acknowledged values are gone, and each way of breaking compaction's promise is found and named."""

from __future__ import annotations

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

T = "table"
Q = "queue"
RETENTION_MS = 5000
COMPACTED = {T: RETENTION_MS}


class History:
    """A compacted topic's keyed sends and polls through the Recorder, one millisecond per event unless told to
    wait; the logs are read ``read_after_ms`` after the last event."""

    def __init__(self) -> None:
        self.operations: list[Operation] = []
        self.nemesis: list[NemesisEvent] = []
        self.now_ns = 0
        self.recorder = Recorder(self.operations.append, self.nemesis.append, self.wall_ms, self._monotonic_ns)

    def wall_ms(self) -> float:
        return 1_000_000 + self.now_ns / 1e6

    def _monotonic_ns(self) -> int:
        self.now_ns += 1_000_000
        return self.now_ns

    def wait(self, ms: int) -> None:
        self.now_ns += ms * 1_000_000

    def write(self, key: str, value: str | None, offset: int | None = None, outcome: str = "ok", partition: int = 0,
              topic: str = T, process: str = "producer-0") -> int:
        """``value`` None: a tombstone of ``key``."""
        invoke = self.recorder.invoke(process, "send", topic=topic, partition=partition, value=value, key=key)
        if outcome == "ok":
            self.recorder.complete(invoke, "ok", partition=partition, offset=offset)
        elif outcome == "fail":
            self.recorder.complete(invoke, "fail", partition=partition, error="NOT_ENOUGH_REPLICAS")
        elif outcome == "info":
            self.recorder.complete(invoke, "info", partition=partition, error="_MSG_TIMED_OUT")
        return invoke.index

    def poll(self, *records: tuple[int, str | None], topic: str = T, process: str = "reader-0") -> int:
        invoke = self.recorder.invoke(process, "poll")
        self.recorder.complete(invoke, "ok", records=tuple(
            PolledRecord(topic=topic, partition=0, offset=o, value=v) for o, v in records))
        return invoke.index

    def assign(self, topic: str = T, process: str = "reader-0") -> None:
        invoke = self.recorder.invoke(process, "assign", partitions=(TopicPartition(topic=topic, partition=0),))
        self.recorder.complete(invoke, "ok")

    def logs(self, records: list[tuple[int, str, str | None]], divergent: dict | None = None, read_after_ms: int = 10,
             leader: int = 1) -> FinalReads:
        """Every broker's log of partition 0 holds ``records`` (offset, key, value), unless ``divergent[broker]``
        says otherwise."""
        divergent = divergent or {}
        return FinalReads(replicas=tuple(
            ReplicaRead(broker=b, topic=T, partition=0, leader=b == leader,
                        records=tuple((o, v) for o, _, v in divergent.get(b, records)),
                        keys=tuple((o, k) for o, k, _ in divergent.get(b, records)))
            for b in (1, 2, 3)), read_ts_ms=self.wall_ms() + read_after_ms)


def only(result: CheckResult, name: str):
    """The report of this anomaly; the run shows no other."""
    assert {r.name for r in result.anomalies} == {name}, result.anomalies
    [report] = [r for r in result.anomalies if r.name == name]
    return report


def compacted_run() -> tuple[History, FinalReads]:
    """Three keys written twice each, read by a poll before the cleaner ran; the cleaner then kept each key's last
    write, at its own offset, on every replica."""
    history = History()
    history.assign()
    for offset, (key, value) in enumerate([("a", "a1"), ("b", "b1"), ("c", "c1"), ("a", "a2"), ("b", "b2"),
                                           ("c", "c2")]):
        history.write(key, value, offset)
    history.poll(*((o, v) for o, v in enumerate(["a1", "b1", "c1", "a2", "b2", "c2"])))
    return history, history.logs([(3, "a", "a2"), (4, "b", "b2"), (5, "c", "c2")])


def test_a_log_keeping_each_keys_latest_acknowledged_write_at_its_offset_is_valid():
    history, final = compacted_run()
    result = check(history.operations, final, compacted=COMPACTED)
    assert result.verdict == "valid", result.anomalies
    assert result.counts == dict.fromkeys(ANOMALY_NAMES, 0)


def test_values_the_cleaner_removed_are_neither_lost_writes_nor_dirty_reads_without_compaction_they_would_be():
    history, final = compacted_run()
    names = {r.name for r in check(history.operations, final).anomalies}
    assert names == {"lost-write", "dirty-read"}
    assert check(history.operations, final, compacted=COMPACTED).valid


def test_a_poll_may_skip_offsets_the_cleaner_had_removed():
    history = History()
    history.assign()
    for offset, (key, value) in enumerate([("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2")]):
        history.write(key, value, offset)
    history.poll((2, "a2"), (3, "b2"))   # a reader that came by after the cleaning
    final = history.logs([(2, "a", "a2"), (3, "b", "b2")])
    assert check(history.operations, final, compacted=COMPACTED).valid


def test_a_poll_that_skips_an_acknowledged_record_still_in_the_log_is_a_poll_skip():
    history = History()
    history.assign()
    for offset, (key, value) in enumerate([("a", "a1"), ("b", "b1"), ("c", "c1")]):
        history.write(key, value, offset)
    history.poll((0, "a1"), (2, "c1"))
    final = history.logs([(0, "a", "a1"), (1, "b", "b1"), (2, "c", "c1")])
    report = only(check(history.operations, final, compacted=COMPACTED), "int-poll-skip")
    assert report.examples[0].values == ("b1",)


def test_replicas_that_cleaned_different_segments_do_not_diverge():
    history, final = compacted_run()
    uncleaned = [(o, k, v) for o, (k, v) in enumerate([("a", "a1"), ("b", "b1"), ("c", "c1"), ("a", "a2"),
                                                       ("b", "b2"), ("c", "c2")])]
    final = history.logs([(3, "a", "a2"), (4, "b", "b2"), (5, "c", "c2")], divergent={2: uncleaned})
    assert check(history.operations, final, compacted=COMPACTED).valid


def test_replicas_holding_different_values_at_one_offset_diverge():
    history = History()
    history.write("a", "a1", 0)
    history.write("a", "a2", 1, outcome="info")
    history.write("a", "a3", outcome="info")
    final = history.logs([(0, "a", "a1"), (1, "a", "a2")], divergent={3: [(0, "a", "a1"), (1, "a", "a3")]})
    result = check(history.operations, final, compacted=COMPACTED)
    assert {r.name for r in result.anomalies} == {"divergent-replicas", "inconsistent-offsets"}
    [report] = [r for r in result.anomalies if r.name == "divergent-replicas"]
    assert report.examples[0].offsets == (1,)


def test_an_older_value_in_place_of_the_latest_acknowledged_write_is_compacted_lost_latest():
    history = History()
    older = history.write("a", "a1", 0)
    latest = history.write("a", "a2", 1)
    history.write("b", "b1", 2)
    final = history.logs([(0, "a", "a1"), (2, "b", "b1")])
    report = only(check(history.operations, final, compacted=COMPACTED), "compacted-lost-latest")
    [example] = report.examples
    assert (example.ops, example.offsets, example.values, example.brokers) == ((latest,), (1, 0), ("a2", "a1"),
                                                                               (1, 2, 3))
    assert older not in example.ops


def test_a_follower_that_lost_the_latest_write_of_a_key_is_named_alone():
    history = History()
    history.write("a", "a1", 0)
    history.write("a", "a2", 1)
    history.write("b", "b1", 2)
    final = history.logs([(1, "a", "a2"), (2, "b", "b1")], divergent={3: [(0, "a", "a1"), (2, "b", "b1")]})
    report = only(check(history.operations, final, compacted=COMPACTED), "compacted-lost-latest")
    assert report.examples[0].brokers == (3,)


def test_a_follower_is_held_only_to_the_writes_below_its_log_end():
    history = History()
    history.write("a", "a1", 0)
    history.write("b", "b1", 1)
    history.write("a", "a2", 2)
    final = history.logs([(1, "b", "b1"), (2, "a", "a2")], divergent={3: [(0, "a", "a1"), (1, "b", "b1")]})
    assert check(history.operations, final, compacted=COMPACTED).valid


def test_a_key_gone_from_the_log_without_a_tombstone_is_compacted_lost_latest():
    history = History()
    history.write("a", "a1", 0)
    history.write("b", "b1", 1)
    history.wait(60_000)
    final = history.logs([(1, "b", "b1")])
    report = only(check(history.operations, final, compacted=COMPACTED), "compacted-lost-latest")
    assert "no record of the key is left" in report.examples[0].detail


def test_a_later_write_of_unknown_outcome_may_take_the_latest_acknowledged_writes_place():
    history = History()
    history.write("a", "a1", 0)
    history.write("a", "a2", 1)
    history.write("a", "a3", outcome="info")   # it timed out on the client, and landed
    final = history.logs([(2, "a", "a3")])
    assert check(history.operations, final, compacted=COMPACTED).valid


def test_a_tombstoned_key_may_be_gone_once_the_tombstone_is_older_than_delete_retention_ms():
    history = History()
    history.write("a", "a1", 0)
    history.write("a", None, 1)
    history.write("b", "b1", 2)
    history.wait(RETENTION_MS + 1000)
    final = history.logs([(2, "b", "b1")])
    assert check(history.operations, final, compacted=COMPACTED).valid


def test_a_tombstone_still_in_the_log_keeps_its_key_deleted():
    history = History()
    history.write("a", "a1", 0)
    history.write("a", None, 1)
    final = history.logs([(1, "a", None)])
    assert check(history.operations, final, compacted=COMPACTED).valid


def test_a_tombstoned_key_gone_before_delete_retention_ms_passed_is_compacted_tombstone_early():
    history = History()
    history.write("a", "a1", 0)
    tombstone = history.write("a", None, 1)
    history.write("b", "b1", 2)
    history.wait(RETENTION_MS // 2)
    final = history.logs([(2, "b", "b1")])
    report = only(check(history.operations, final, compacted=COMPACTED), "compacted-tombstone-early")
    assert report.examples[0].ops == (tombstone,) and report.examples[0].values == (None,)


def test_a_key_gone_after_a_tombstone_of_unknown_outcome_is_valid_once_it_is_old_enough():
    history = History()
    history.write("a", "a1", 0)
    history.write("a", None, outcome="info")
    history.write("b", "b1", 2)
    history.wait(RETENTION_MS + 1000)
    assert check(history.operations, history.logs([(2, "b", "b1")]), compacted=COMPACTED).valid


def test_without_the_read_time_a_tombstones_age_is_not_checked():
    history = History()
    history.write("a", None, 0)
    history.write("b", "b1", 1)
    final = history.logs([(1, "b", "b1")]).model_copy(update={"read_ts_ms": None})
    assert check(history.operations, final, compacted=COMPACTED).valid


def test_an_older_value_shown_after_its_tombstone_was_removed_is_compacted_resurrected():
    history = History()
    history.write("a", "a1", 0)
    tombstone = history.write("a", None, 1)
    history.write("b", "b1", 2)
    history.wait(RETENTION_MS + 1000)
    final = history.logs([(0, "a", "a1"), (2, "b", "b1")])
    report = only(check(history.operations, final, compacted=COMPACTED), "compacted-resurrected")
    assert report.examples[0].ops == (tombstone,) and report.examples[0].values == (None, "a1")


def test_an_older_value_before_its_tombstone_in_the_log_is_no_resurrection():
    history = History()
    history.write("a", "a1", 0)
    history.write("a", None, 1)
    final = history.logs([(0, "a", "a1"), (1, "a", None)])   # not cleaned yet
    assert check(history.operations, final, compacted=COMPACTED).valid


def test_a_value_read_at_another_offset_than_its_acknowledgement_is_compacted_offset_changed():
    history = History()
    history.write("a", "a1", 0)
    history.write("b", "b1", 1)
    history.write("b", "b2", 2)
    final = history.logs([(0, "a", "a1"), (3, "b", "b2")])
    report = only(check(history.operations, final, compacted=COMPACTED), "compacted-offset-changed")
    assert report.examples[0].offsets == (2, 3) and report.examples[0].values == ("b2",)


def test_a_tombstone_at_another_offset_than_its_acknowledgement_is_compacted_offset_changed():
    history = History()
    history.write("a", "a1", 0)
    history.write("b", "b1", 1)
    history.write("a", None, 2)
    final = history.logs([(1, "b", "b1"), (3, "a", None)])
    report = only(check(history.operations, final, compacted=COMPACTED), "compacted-offset-changed")
    assert report.examples[0].offsets == (3,)


def test_a_replica_holding_one_offset_twice_is_compacted_offset_changed():
    history = History()
    history.write("a", "a1", 0)
    history.write("a", "a2", 1)
    final = history.logs([(0, "a", "a1"), (1, "a", "a2")], divergent={2: [(1, "a", "a2"), (1, "a", "a2")]})
    report = only(check(history.operations, final, compacted=COMPACTED), "compacted-offset-changed")
    assert report.examples[0].brokers == (2,)


def test_a_tombstone_of_a_key_never_deleted_is_an_unexpected_value():
    history = History()
    history.write("a", "a1", 0)
    history.write("b", "b1", 1)
    final = history.logs([(0, "a", "a1"), (1, "b", "b1"), (2, "c", None)])
    report = only(check(history.operations, final, compacted=COMPACTED), "unexpected-value")
    assert report.examples[0].offsets == (2,) and "never sent" in report.examples[0].detail


def test_a_value_never_sent_in_a_compacted_topic_is_an_unexpected_value():
    history = History()
    history.write("a", "a1", 0)
    final = history.logs([(0, "a", "a1"), (1, "a", "a9")])
    report = only(check(history.operations, final, compacted=COMPACTED), "unexpected-value")
    assert report.examples[0].values == ("a9",)


def test_a_tombstone_whose_send_failed_is_an_aborted_read():
    history = History()
    history.write("a", "a1", 0)
    failed = history.write("a", None, outcome="fail")
    final = history.logs([(0, "a", "a1"), (1, "a", None)])
    report = only(check(history.operations, final, compacted=COMPACTED), "aborted-read")
    assert report.examples[0].ops == (failed,)


def test_a_queue_topic_beside_a_compacted_one_is_still_held_to_every_acknowledged_value():
    history = History()
    history.write("a", "a1", 0)
    history.write("a", "a2", 1)
    lost = history.write("x", "q1", 0, topic=Q)
    final = history.logs([(1, "a", "a2")])
    final = final.model_copy(update={"replicas": (*final.replicas, *(
        ReplicaRead(broker=b, topic=Q, partition=0, leader=b == 1, records=()) for b in (1, 2, 3)))})
    report = only(check(history.operations, final, compacted=COMPACTED), "lost-write")
    assert report.examples[0].ops == (lost,)


def with_writers(final: FinalReads, writers: dict[int, tuple[int, int]]) -> FinalReads:
    """Every replica's batches at these offsets written by (producer id, epoch)."""
    return final.model_copy(update={"replicas": tuple(
        read.model_copy(update={"writers": tuple((o, *w) for o, w in sorted(writers.items()))})
        for read in final.replicas)})


def test_a_value_the_client_sent_again_under_a_new_epoch_is_a_client_resend_not_a_moved_record():
    history = History()
    history.write("a", "a1", 1)   # its first copy (at 0) timed out in flight; the copy sent again was acknowledged
    final = with_writers(history.logs([(0, "a", "a1"), (1, "a", "a1")]), {0: (7, 0), 1: (7, 1)})
    result = check(history.operations, final, compacted=COMPACTED)
    assert {r.name for r in result.anomalies} == {"client-resend"} and result.valid


def test_a_tombstone_the_client_sent_again_under_a_new_epoch_is_a_client_resend():
    history = History()
    history.write("a", "a1", 0)
    history.write("a", None, 2)
    final = with_writers(history.logs([(0, "a", "a1"), (1, "a", None), (2, "a", None)]),
                         {0: (7, 0), 1: (7, 0), 2: (7, 1)})
    result = check(history.operations, final, compacted=COMPACTED)
    report = only(result, "client-resend")
    assert report.examples[0].offsets == (1,) and result.valid
