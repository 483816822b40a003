"""``kafkasim bench scale``'s rules without a cluster: which sizes carry issue 18's targets, what a run that
stopped early reports, and how the controller_loaded event is found in a trace being written."""

from __future__ import annotations

import json

from cluster.bench.scale import figures_of
from cluster.bench.scale_run import SizeResult, _events_since


def _full(n: int) -> SizeResult:
    return SizeResult(n, create_s=1.0, create_answered_s=1.2, idle_cpu_pct={1: 1.0, 2: 3.0}, rss_mib={1: 90.0},
                      kill={"broker": 2, "led": n // 3, "moved_s": 2.3, "seen_s": 2.4}, restart_isr_full_s=4.0,
                      shutdown={"broker": 3, "led": n // 3, "exit_s": 0.8, "metadata_disagreeing": {1: 0, 2: 2}},
                      controller={"loaded_s": 3.0, "load_ms": 900.0, "partitions_loaded": n})


def test_targets_hold_up_to_1000_partitions_and_larger_sizes_are_shown_without_them():
    small = {f.name: f for f in figures_of(_full(1000))}
    assert small["create_s_1000"].met is True
    assert small["idle_cpu_pct_1000"].value == 3.0 and small["idle_cpu_pct_1000"].met is False
    assert small["kill9_over_session_s_1000"].value == 2.3 - 2.0 and small["kill9_over_session_s_1000"].met
    assert small["shutdown_metadata_wrong_1000"].value == 2 and small["shutdown_metadata_wrong_1000"].met is False
    assert small["controller_over_session_s_1000"].value == 1.0 and small["controller_load_s_1000"].value == 0.9
    assert all(f.target is None for f in figures_of(_full(3000)))


def test_a_size_that_stopped_after_creating_reports_only_what_it_measured():
    names = [f.name for f in figures_of(SizeResult(50, create_s=0.5, create_answered_s=0.6))]
    assert names == ["create_s_50", "create_answered_s_50", "idle_cpu_pct_50", "rss_mib_50"]


def test_controller_loaded_events_are_read_after_an_offset_and_a_half_written_line_waits(tmp_path):
    trace = tmp_path / "trace.jsonl"
    old = json.dumps({"event": "controller_loaded", "controller_epoch": 1}, separators=(",", ":"))
    new = json.dumps({"event": "controller_loaded", "controller_epoch": 2}, separators=(",", ":"))
    trace.write_text(old + "\n")
    offset = trace.stat().st_size
    with trace.open("a") as f:
        f.write('{"event":"leader_elected"}\n' + new[:10])
    assert _events_since(trace, offset, "controller_loaded") == []
    with trace.open("a") as f:
        f.write(new[10:] + "\n")
    assert [e["controller_epoch"] for e in _events_since(trace, offset, "controller_loaded")] == [2]
    assert len(_events_since(trace, 10 * offset, "controller_loaded")) == 2  # rotated: read from the start
