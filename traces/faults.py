"""Faults injected by kafkasim's own tools (the CLI, chaos scripts, tests) go into their own trace file,
written synchronously: a tool injects a handful of faults, and each must be on disk before the effect
it causes shows up in a broker's trace."""

from __future__ import annotations

import time
from pathlib import Path

from traces.events import FaultInjected

TOOLS_TRACE_FILE = "tools-trace.jsonl"


def record_fault(trace_path: Path, action: str, target: str, broker_id: int = -1, detail: str = "") -> FaultInjected:
    event = FaultInjected(ts_ms=time.time() * 1000, mono_ns=time.monotonic_ns(), broker_id=broker_id,
                          action=action, target=target, detail=detail)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    with open(trace_path, "a", encoding="utf-8") as out:
        out.write(event.model_dump_json() + "\n")
    return event
