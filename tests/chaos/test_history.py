"""The chaos history format: operations and nemesis events round-trip through JSON lines, a bad line is named
by file and line, and operations refuse fields that do not fit them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cluster.chaos.history import (
    FinalReads,
    HistoryFormatError,
    JsonLinesWriter,
    NemesisEvent,
    Operation,
    PolledRecord,
    Recorder,
    ReplicaRead,
    TopicPartition,
    read_final_reads,
    read_nemesis,
    read_operations,
    send_completion,
)
from traces.history import StoredRecord


class Clocks:
    def __init__(self) -> None:
        self.ns = 0

    def wall_ms(self) -> float:
        return 1_700_000_000_000 + self.ns / 1e6

    def monotonic_ns(self) -> int:
        self.ns += 1_000_000
        return self.ns


def test_operations_and_nemesis_events_round_trip_through_their_files(tmp_path):
    clocks = Clocks()
    with JsonLinesWriter(tmp_path / "operations.jsonl") as ops, JsonLinesWriter(tmp_path / "nemesis.jsonl") as nem:
        recorder = Recorder(ops.append, nem.append, clocks.wall_ms, clocks.monotonic_ns)
        send = recorder.invoke("producer-0", "send", topic="t", value="v0")
        assign = recorder.invoke("consumer-0", "assign", partitions=(TopicPartition(topic="t", partition=0),))
        recorder.complete(assign, "ok")
        recorder.nemesis("start", "kill", targets=[2], detail="SIGKILL", step=0)
        acked = recorder.complete(send, "ok", partition=0, offset=0)
        poll = recorder.invoke("consumer-0", "poll")
        recorder.complete(poll, "ok", records=(PolledRecord(topic="t", partition=0, offset=0, value="v0"),))
        failed = recorder.complete(recorder.invoke("producer-0", "send", topic="t", value="v1"), "fail",
                                   error="NOT_ENOUGH_REPLICAS")
        recorder.nemesis("stop", "kill", targets=[2], step=0)

    operations = read_operations(tmp_path / "operations.jsonl")
    assert [(op.index, op.type, op.f) for op in operations] == [
        (0, "invoke", "send"), (1, "invoke", "assign"), (1, "ok", "assign"), (0, "ok", "send"),
        (2, "invoke", "poll"), (2, "ok", "poll"), (3, "invoke", "send"), (3, "fail", "send")]
    assert operations[3] == acked and acked.value == "v0" and acked.topic == "t"
    assert operations[-1] == failed
    assert operations[5].records[0].value == "v0"
    assert [op.mono_ns for op in operations] == sorted(op.mono_ns for op in operations)
    nemesis = read_nemesis(tmp_path / "nemesis.jsonl")
    assert [(e.type, e.kind, e.targets) for e in nemesis] == [("start", "kill", (2,)), ("stop", "kill", (2,))]


def test_every_line_is_on_disk_as_soon_as_it_is_appended(tmp_path):
    writer = JsonLinesWriter(tmp_path / "operations.jsonl")
    writer.append(Operation(index=0, type="invoke", process="p", f="send", topic="t", value="v", ts_ms=1, mono_ns=1))
    # not closed, as when the runner is killed: the line is there anyway
    assert len(read_operations(tmp_path / "operations.jsonl")) == 1
    writer.close()


def test_a_corrupt_line_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "operations.jsonl"
    good = Operation(index=0, type="invoke", process="p", f="poll", ts_ms=1, mono_ns=1).model_dump_json()
    path.write_text(good + "\n\n" + good + "\n" + '{"index": 1, "type": "ok", "proc')
    with pytest.raises(HistoryFormatError, match=r"operations\.jsonl:4: not a valid Operation"):
        read_operations(path)


def test_an_unknown_field_is_named_with_its_line(tmp_path):
    path = tmp_path / "nemesis.jsonl"
    path.write_text('{"type": "start", "kind": "kill", "ts_ms": 1, "mono_ns": 1, "victim": 3}\n')
    with pytest.raises(HistoryFormatError, match=r"nemesis\.jsonl:1: .*victim: Extra inputs are not permitted"):
        read_nemesis(path)


@pytest.mark.parametrize(("fields", "message"), [
    ({"type": "fail", "f": "send"}, "a fail completion needs the error"),
    ({"type": "invoke", "f": "send", "topic": "t"}, "a send invoke needs its topic and its unique value"),
    ({"type": "ok", "f": "send", "topic": "t"}, "a send ok needs the partition"),
    ({"type": "ok", "f": "poll", "key": "k"}, "only a send carries a key"),
    ({"type": "ok", "f": "poll", "offset": 3}, "only a send ok carries an offset"),
    ({"type": "ok", "f": "send", "partition": 0, "error": "X"}, "an ok has no error"),
    ({"type": "invoke", "f": "txn", "topic": "out", "records": ({"topic": "in", "partition": 0, "offset": 0,
                                                                 "value": "a"},)},
     "one output value per record"),
    ({"type": "invoke", "f": "txn", "records": ({"topic": "in", "partition": 0, "offset": 0, "value": "a"},),
      "values": ("t:a",)}, "a txn invoke needs its output topic"),
    ({"type": "ok", "f": "txn", "values": ("t:a",)}, "only a txn invoke carries output values"),
    ({"type": "ok", "f": "txn", "records": ({"topic": "in", "partition": 0, "offset": 0, "value": "a"},)},
     "only a poll ok and a txn invoke carry records"),
])
def test_an_operation_refuses_fields_that_do_not_fit_it(fields, message):
    with pytest.raises(ValidationError, match=message):
        Operation(index=0, process="p", ts_ms=1, mono_ns=1, **fields)


def test_a_completion_must_complete_an_invoke():
    recorder = Recorder([].append, [].append, lambda: 0.0, lambda: 0)
    done = recorder.complete(recorder.invoke("c", "poll"), "info", error="_TRANSPORT")
    with pytest.raises(ValueError, match="operation 0 is a info, not an invoke"):
        recorder.complete(done, "ok")


def test_final_reads_round_trip_and_are_built_from_the_dumped_replica_logs(tmp_path):
    stored = [StoredRecord(broker=b, topic="t", partition=0, offset=o, leader_epoch=0, value=f"v{o}")
              for b in (2, 1) for o in (1, 0)]
    reads = FinalReads.from_stored_records(stored, leaders={("t", 0): 1})
    assert [(r.broker, r.leader, r.records) for r in reads.replicas] == [
        (1, True, ((0, "v0"), (1, "v1"))), (2, False, ((0, "v0"), (1, "v1")))]
    assert reads.of("t", 0)[0].log_end_offset == 2
    (tmp_path / "final-reads.json").write_text(reads.model_dump_json())
    assert read_final_reads(tmp_path / "final-reads.json") == reads
    assert ReplicaRead(broker=1, topic="t", partition=0, log_start_offset=7).log_end_offset == 7


def test_a_tombstone_is_a_send_of_a_key_without_a_value_and_its_completion_carries_the_key():
    operations: list[Operation] = []
    recorder = Recorder(operations.append, [].append, lambda: 0.0, lambda: 0)
    invoke = recorder.invoke("producer-0", "send", topic="t", partition=0, value=None, key="key-07")
    done = recorder.complete(invoke, "ok", partition=0, offset=3)
    assert (done.value, done.key, done.offset) == (None, "key-07", 3)


def test_final_reads_keep_each_records_key_and_when_the_logs_were_read():
    stored = [StoredRecord(broker=1, topic="t", partition=0, offset=o, leader_epoch=0, value=v, key=k)
              for o, k, v in ((2, "b", None), (0, "a", "a1"), (1, None, "x"))]
    [read] = FinalReads.from_stored_records(stored, read_ts_ms=5.0).replicas
    assert read.records == ((0, "a1"), (1, "x"), (2, None)) and read.keys == ((0, "a"), (2, "b"))
    assert FinalReads.from_stored_records(stored, read_ts_ms=5.0).read_ts_ms == 5.0


@pytest.mark.parametrize(("error", "retries", "outcome"), [
    ("NOT_ENOUGH_REPLICAS", False, "fail"),
    ("NOT_ENOUGH_REPLICAS", True, "info"),           # an earlier attempt may have been appended
    ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", False, "info"),
    ("_MSG_TIMED_OUT", False, "info"),
    ("_MSG_SIZE_TOO_LARGE", True, "fail"),
])
def test_only_a_send_that_surely_did_not_happen_is_a_fail(error, retries, outcome):
    assert send_completion(error, retries) == outcome


def test_nemesis_kinds_are_checked():
    with pytest.raises(ValidationError):
        NemesisEvent(type="start", kind="meteor", ts_ms=0, mono_ns=0)
