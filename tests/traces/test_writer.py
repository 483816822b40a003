"""The trace writer on real files: size rotation keeps whole lines in order, a full buffer drops and says
so, a switched-off writer writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import wait_until
from traces import events as te
from traces.events import parse_line
from traces.writer import TraceWriter, rotated_files


def lines(paths: list[Path]) -> list[str]:
    return [line for path in paths for line in path.read_text().splitlines()]


def test_files_rotate_by_size_keep_the_newest_backups_and_every_line_whole(tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path, broker_id=1, max_file_bytes=2000, backups=2)
    for n in range(100):
        writer.emit(te.FaultInjected, action="kill", target=f"broker {n}")
    writer.close()
    files = rotated_files(path)
    assert [p.name for p in files] == ["trace.jsonl.2", "trace.jsonl.1", "trace.jsonl"]
    assert all(p.stat().st_size <= 2000 for p in files)
    kept = [parse_line(line) for line in lines(files)]
    targets = [int(e.target.split()[1]) for e in kept]
    # the oldest events went with the deleted files; what is left is the newest, in order, none torn
    assert targets == list(range(100 - len(targets), 100)) and 0 < len(targets) < 100


def test_a_full_buffer_drops_events_and_writes_how_many(tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path, broker_id=3, capacity=10, linger_s=0.5)
    emitted = [writer.emit(te.BrokerStopped, clean=True) for _ in range(50)]
    assert emitted.count(None) == writer.dropped >= 40   # the writer thread lingers: the buffer fills
    writer.close()
    events = [parse_line(line) for line in lines([path])]
    dropped = [e for e in events if isinstance(e, te.TraceEventsDropped)]
    assert dropped and dropped[-1].dropped_total == writer.dropped
    assert len(events) - len(dropped) == 50 - writer.dropped


def test_emit_returns_at_once_and_the_event_is_on_disk_soon_after(tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path, broker_id=2)
    writer.controller_epoch = 7
    event = writer.emit(te.ControllerResigned, reason="test")
    try:
        assert event is not None and event.broker_id == 2 and event.controller_epoch == 7
        written = wait_until(lambda: path.read_text(), 5, "the event on disk")
        assert json.loads(written) == json.loads(event.model_dump_json())
    finally:
        writer.close()


def test_a_switched_off_writer_creates_no_file(tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path, broker_id=1, enabled=False)
    assert writer.emit(te.BrokerStopped, clean=True) is None
    writer.close()
    assert not path.exists() and writer.dropped == 0
