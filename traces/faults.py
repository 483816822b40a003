"""Faults injected by kafkasim's own tools (the CLI, chaos scripts, tests) go into their own trace file,
written synchronously: a tool injects a handful of faults, and each must be on disk before the effect
it causes shows up in a broker's trace."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TypeVar

from traces.events import FaultInjected, TraceEvent

TOOLS_TRACE_FILE = "tools-trace.jsonl"
E = TypeVar("E", bound=TraceEvent)


def record_fault(trace_path: Path, action: str, target: str, broker_id: int = -1, detail: str = "") -> FaultInjected:
    event = FaultInjected(ts_ms=time.time() * 1000, mono_ns=time.monotonic_ns(), broker_id=broker_id,
                          action=action, target=target, detail=detail)
    return record(trace_path, event)


def record(trace_path: Path, event: E) -> E:
    """Appends one event of a tool (a fault, a scenario's step) to the tools' trace, on disk when it returns."""
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    with open(trace_path, "a", encoding="utf-8") as out:
        out.write(event.model_dump_json() + "\n")
    return event
