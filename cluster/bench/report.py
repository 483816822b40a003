"""One report for every bench: figures with their targets and verdicts, the phases that produced them, notes,
printed as one rich table style or as JSON of one shape. Pure apart from printing, so the rules are tested
directly."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Figure:
    name: str                      # stable key for JSON consumers
    label: str                     # what the table says
    value: float
    unit: str
    target: float | None = None    # None: measured and shown, nothing to meet
    at_least: bool = True          # the target is a floor (throughput), else a ceiling (latency)

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        return self.value >= self.target if self.at_least else self.value <= self.target

    def as_json(self) -> dict:
        return {"name": self.name, "label": self.label, "value": _finite(self.value), "unit": self.unit,
                "target": self.target, "target_is": None if self.target is None else self.target_is,
                "met": self.met}

    @property
    def target_is(self) -> str:
        return "floor" if self.at_least else "ceiling"


def _finite(value: float) -> float | None:
    # JSON has no NaN or infinity; a figure that could not be computed is null
    return round(value, 3) if math.isfinite(value) else None


@dataclass
class Phase:
    """One timed part of a bench and the figures it produced."""

    name: str
    summary: str
    elapsed_s: float
    figures: list[Figure] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    cpu_s: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"name": self.name, "summary": self.summary, "elapsed_s": round(self.elapsed_s, 3),
                "figures": [f.name for f in self.figures], "details": self.details, "cpu_s": self.cpu_s}


@dataclass
class Report:
    bench: str
    title: str
    settings: dict
    phases: list[Phase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None       # why the run stopped before its last phase

    @property
    def figures(self) -> list[Figure]:
        return [f for phase in self.phases for f in phase.figures]

    @property
    def missed(self) -> list[Figure]:
        return [f for f in self.figures if f.met is False]

    @property
    def all_targets_met(self) -> bool:
        return self.error is None and not self.missed

    def as_json(self) -> dict:
        return {"bench": self.bench, "title": self.title, "settings": self.settings,
                "figures": [f.as_json() for f in self.figures], "phases": [p.as_json() for p in self.phases],
                "notes": self.notes, "error": self.error, "all_targets_met": self.all_targets_met}

    def exit_code(self, strict: bool) -> int:
        """1 when the run stopped early, or with ``strict`` when a figure missed its target; else 0."""
        if self.error is not None:
            return 1
        return 1 if strict and self.missed else 0


def to_json(report: Report) -> str:
    return json.dumps(report.as_json(), indent=2, default=str, ensure_ascii=False)


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _target(figure: Figure) -> str:
    if figure.target is None:
        return "-"
    return f"{'>=' if figure.at_least else '<='} {figure.target:g} {figure.unit}"


def _verdict(figure: Figure) -> Text:
    return {None: Text("-"), True: Text("pass"), False: Text("FAIL", style="bold red")}[figure.met]


def _cpu_text(cpu_s: dict) -> str:
    brokers = "/".join(f"{s:.1f}" for _, s in sorted(cpu_s.get("brokers", {}).items()))
    return (f"CPU s: brokers {brokers}, client {cpu_s.get('client', 0):.1f}, "
            f"other processes {cpu_s.get('other_processes', 0):.1f}")


def render(report: Report, console: Console) -> None:
    """The title as a line of its own (it names the data dir, which must not be cut), then a table of figures
    and one of phases in the same style, then notes."""
    console.print(report.title, soft_wrap=True, highlight=False, markup=False)
    figures = Table(box=box.SIMPLE_HEAD, pad_edge=False, highlight=False)
    for column, justify in (("figure", "left"), ("measured", "right"), ("target", "left"), ("result", "left")):
        figures.add_column(column, justify=justify)
    for f in report.figures:
        figures.add_row(Text(f.label), f"{_number(f.value)} {f.unit}", _target(f), _verdict(f))
    if report.figures:
        console.print(figures)
    else:
        console.print("  no figures: the run stopped before its first one")
    phases = Table(box=box.SIMPLE_HEAD, pad_edge=False, highlight=False)
    phases.add_column("phase")
    phases.add_column("what happened")
    for phase in report.phases:
        summary = phase.summary + (f"\n{_cpu_text(phase.cpu_s)}" if phase.cpu_s else "")
        phases.add_row(Text(phase.name), Text(summary))
    if report.phases:
        console.print(phases)
    if report.error is not None:
        console.print(f"stopped: {report.error}", soft_wrap=True, highlight=False, markup=False)
    for note in report.notes:
        console.print(note, soft_wrap=True, highlight=False, markup=False)
