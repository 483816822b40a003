"""What a benchmark run reports: figures with their targets and verdicts, per-phase summaries and CPU
use, as a table or as JSON. Pure: no clients, clocks or processes, so the rules are tested directly."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MIB = 1 << 20


def throughput_mib_s(byte_count: int, seconds: float) -> float:
    """MiB of message values per second: Kafka's perf tools count "MB" the same way (2^20 bytes)."""
    return byte_count / MIB / seconds if seconds > 0 else math.inf


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q% of the values at or below it."""
    if not values:
        raise ValueError("no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is outside (0, 100]")
    ordered = sorted(values)
    return ordered[math.ceil(q / 100 * len(ordered)) - 1]


@dataclass(frozen=True)
class Figure:
    key: str                       # stable name for JSON consumers
    label: str                     # what the table says
    value: float
    unit: str
    target: float | None = None    # None: measured and shown, nothing to pass
    at_least: bool = True          # the target is a floor (throughput), else a ceiling (latency)

    @property
    def passed(self) -> bool | None:
        if self.target is None:
            return None
        return self.value >= self.target if self.at_least else self.value <= self.target

    def as_dict(self) -> dict:
        return {"key": self.key, "label": self.label, "value": round(self.value, 3), "unit": self.unit,
                "target": self.target, "target_is": "floor" if self.at_least else "ceiling", "passed": self.passed}


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds used so far: per broker process, by ZooKeeper, by this process (the clients and their
    librdkafka threads), and by the whole machine."""

    brokers: dict[int, float]
    zookeeper: float
    client: float
    machine: float

    def since(self, earlier: CpuSample) -> dict:
        brokers = {b: round(s - earlier.brokers.get(b, 0.0), 2) for b, s in self.brokers.items()}
        zookeeper = self.zookeeper - earlier.zookeeper
        client = self.client - earlier.client
        ours = sum(brokers.values()) + zookeeper + client
        # Anything else running on the machine competes for the same cores: reported, not subtracted.
        return {"brokers": brokers, "zookeeper": round(zookeeper, 2), "client": round(client, 2),
                "other_processes": round(max(0.0, self.machine - earlier.machine - ours), 2)}


@dataclass
class PhaseReport:
    name: str
    summary: str
    elapsed_s: float
    figures: list[Figure] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    cpu_s: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"name": self.name, "summary": self.summary, "elapsed_s": round(self.elapsed_s, 3),
                "figures": [f.key for f in self.figures], "details": self.details, "cpu_s": self.cpu_s}


def _number(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def _target(figure: Figure) -> str:
    if figure.target is None:
        return "-"
    return f"{'>=' if figure.at_least else '<='} {figure.target:g} {figure.unit}"


def _verdict(figure: Figure) -> str:
    return {None: "-", True: "pass", False: "FAIL"}[figure.passed]


def _cpu_text(cpu_s: dict) -> str:
    brokers = "/".join(f"{s:.1f}" for _, s in sorted(cpu_s.get("brokers", {}).items()))
    return (f"CPU s: brokers {brokers}, client {cpu_s.get('client', 0):.1f}, "
            f"other processes {cpu_s.get('other_processes', 0):.1f}")


def render_table(title: str, phases: list[PhaseReport], error: str | None = None) -> str:
    figures = [f for phase in phases for f in phase.figures]
    rows = [("figure", "measured", "target", "result")]
    rows += [(f.label, f"{_number(f.value)} {f.unit}", _target(f), _verdict(f)) for f in figures]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [title, ""]
    if not figures:
        rows = []
        lines.append("  no figures: the run stopped before its first one")
    for i, row in enumerate(rows):
        lines.append("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  " + "  ".join("-" * width for width in widths))
    lines += ["", "phases:"]
    for phase in phases:
        lines.append(f"  {phase.name:<9} {phase.summary}")
        if phase.cpu_s:
            lines.append(f"  {'':<9} {_cpu_text(phase.cpu_s)}")
    if error is not None:
        lines.append(f"  stopped: {error}")
    lines += ["", "MiB/s: 2^20 bytes of message values per second, as Kafka's perf tools count MB/s."]
    return "\n".join(lines)


def report_dict(title: str, setup: dict, phases: list[PhaseReport], error: str | None = None) -> dict:
    figures = [f for phase in phases for f in phase.figures]
    verdicts = [f.passed for f in figures if f.passed is not None]
    return {"title": title, "setup": setup, "figures": [f.as_dict() for f in figures],
            "phases": [p.as_dict() for p in phases], "error": error,
            "all_targets_met": error is None and all(verdicts)}
