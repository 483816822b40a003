"""The run's pictures, Jepsen style: what the clients saw over time, with every fault shaded where it was
active, so a drop in acknowledgements sits visibly on top of the fault that caused it."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on a CI machine or in a container
import matplotlib.pyplot as plt

from cluster.chaos.history import NEMESIS_FILE, OPERATIONS_FILE, read_nemesis, read_operations

THROUGHPUT_PNG = "throughput-latency.png"
OFFSETS_PNG = "offsets.png"


def fault_windows(out: Path, origin_ms: float) -> list[tuple[float, float, str]]:
    """(start s, end s, label) of every fault, relative to ``origin_ms``."""
    starts: dict[tuple[int | None, str], float] = {}
    windows = []
    for event in read_nemesis(out / NEMESIS_FILE):
        key = (event.step, event.kind)
        if event.type == "start":
            starts[key] = event.ts_ms
        elif key in starts:
            label = f"{event.kind} {list(event.targets)}" if event.targets else event.kind
            windows.append(((starts.pop(key) - origin_ms) / 1000, (event.ts_ms - origin_ms) / 1000, label))
    return windows


def write_plots(out: Path) -> list[Path]:
    operations = read_operations(out / OPERATIONS_FILE)
    if not operations:
        return []
    origin = operations[0].ts_ms
    invoked = {op.index: op for op in operations if op.type == "invoke" and op.f == "send"}
    acks = [(op.ts_ms, op) for op in operations if op.f == "send" and op.type == "ok"]
    per_second: dict[int, int] = defaultdict(int)
    latency: list[tuple[float, float]] = []
    offsets: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for ts, op in acks:
        second = (ts - origin) / 1000
        per_second[int(second)] += 1
        latency.append((second, ts - invoked[op.index].ts_ms))
        if op.offset is not None:
            offsets[f"{op.topic}-{op.partition}"].append((second, op.offset))
    windows = fault_windows(out, origin)

    def shade(axis) -> None:
        for start, end, label in windows:
            axis.axvspan(start, end, color="tab:red", alpha=0.15)
            axis.text(start, 1.0, label, transform=axis.get_xaxis_transform(), fontsize=7, va="top", rotation=90)

    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 6))
    seconds = sorted(per_second)
    top.plot(seconds, [per_second[s] for s in seconds], drawstyle="steps-post")
    top.set_ylabel("acknowledged sends / s")
    bottom.scatter([t for t, _ in latency], [ms for _, ms in latency], s=2)
    bottom.set_yscale("log")
    bottom.set_ylabel("ack latency (ms)")
    bottom.set_xlabel("seconds since the first operation")
    for axis in (top, bottom):
        shade(axis)
    figure.tight_layout()
    written = [out / THROUGHPUT_PNG]
    figure.savefig(written[0], dpi=110)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(11, 4))
    for name, points in sorted(offsets.items()):
        axis.plot([t for t, _ in points], [o for _, o in points], ".", markersize=2, label=name)
    axis.set_xlabel("seconds since the first operation")
    axis.set_ylabel("offset of each acknowledged send")
    axis.legend(fontsize=7, ncol=3)
    shade(axis)
    figure.tight_layout()
    written.append(out / OFFSETS_PNG)
    figure.savefig(written[1], dpi=110)
    plt.close(figure)
    return written
