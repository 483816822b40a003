"""`kafkasim traces collect` on a data dir laid out as a cluster leaves it: traces (rotated ones too),
the tools' fault trace, workload histories and every replica's records; bad input changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from broker.log.records import Record, build_batch
from broker.log.record_batch import assign_offset_and_epoch
from cluster.cli import main
from traces import events as te
from traces.faults import TOOLS_TRACE_FILE, record_fault
from traces.history import HistoryWriter, StoredRecord


def fake_run(data_dir: Path) -> None:
    """What a stopped cluster leaves on disk: written with the same writers and log format the brokers use."""
    for broker in (1, 2):
        directory = data_dir / f"broker-{broker}"
        directory.mkdir(parents=True)
        (directory / "trace.jsonl").write_text(te.BrokerStopped(broker_id=broker, clean=True).model_dump_json() + "\n")
        segment = directory / "logs" / "orders-0" / "00000000000000000000.log"
        segment.parent.mkdir(parents=True)
        batch = bytearray(build_batch([Record(None, b"v%d" % i, 0) for i in range(3)], producer_id=broker * 10,
                                      producer_epoch=2, base_sequence=0))
        assign_offset_and_epoch(batch, 0, 0, 4)
        segment.write_bytes(bytes(batch))
    (data_dir / "broker-1" / "trace.jsonl.1").write_text("")
    record_fault(data_dir / TOOLS_TRACE_FILE, "sigkill", "broker 2", broker_id=2)
    with HistoryWriter(data_dir / "workload-history.jsonl") as history:
        history.acknowledged("orders", 0, 0, b"v0")


def test_collect_gathers_traces_histories_and_final_logs(tmp_path: Path, capsys):
    fake_run(tmp_path / "data")
    out = tmp_path / "run"
    assert main(["--data-dir", str(tmp_path / "data"), "traces", "collect", "--out", str(out)]) == 0
    assert "collected 4 trace files, 1 histories and 6 records from 2 brokers' logs" in capsys.readouterr().out
    manifest = json.loads((out / "collected.json").read_text())
    assert sorted(manifest["trace_files"]) == ["traces/data/broker-1/trace.jsonl", "traces/data/broker-1/trace.jsonl.1",
                                               "traces/data/broker-2/trace.jsonl", "traces/data/tools-trace.jsonl"]
    records = [StoredRecord.model_validate_json(line)
               for line in (out / "final-logs" / "data" / "broker-2.jsonl").read_text().splitlines()]
    assert [(r.broker, r.topic, r.partition, r.offset, r.leader_epoch, r.value) for r in records] == [
        (2, "orders", 0, i, 4, f"v{i}") for i in range(3)]
    # the batch's idempotent producer, which tells the chaos checker a client's re-send from a broker's duplicate
    assert {(r.producer_id, r.producer_epoch) for r in records} == {(20, 2)}
    assert (out / "history" / "data" / "workload-history.jsonl").exists()


def test_collect_into_a_folder_that_is_not_empty_fails_and_writes_nothing(tmp_path: Path, capsys):
    fake_run(tmp_path / "data")
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["--data-dir", str(tmp_path / "data"), "traces", "collect", "--out", str(out)]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_collect_of_a_folder_without_traces_says_what_it_expected(tmp_path: Path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["--data-dir", str(tmp_path / "empty"), "traces", "collect", "--out", str(tmp_path / "o")]) == 2
    assert "no trace files" in capsys.readouterr().err


def test_a_replicas_log_end_offset_is_read_from_its_last_whole_batch(tmp_path: Path):
    from cluster.final_logs import log_end_offset

    directory = tmp_path / "table-0"
    directory.mkdir()
    assert log_end_offset(directory) == -1
    for base, count in ((0, 3), (7, 2)):   # a gap at 3..6, as a compacted log has
        batch = bytearray(build_batch([Record(b"k", b"v%d" % i, 0) for i in range(count)]))
        assign_offset_and_epoch(batch, 0, base, 1)
        (directory / f"{base:020d}.log").write_bytes(bytes(batch) + (bytes(batch[:20]) if base == 7 else b""))
    (directory / f"{20:020d}.log").write_bytes(b"")   # a new, empty active segment
    assert log_end_offset(directory) == 9
