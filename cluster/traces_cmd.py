"""``kafkasim traces collect``: one folder with everything a run left behind that the analysis reads.

    OUT/traces/<source>/broker-N/trace.jsonl[.k]   each broker's trace files (rotated ones too)
    OUT/traces/<source>/tools-trace.jsonl          faults injected by kafkasim's tools
    OUT/history/<source>/*history.jsonl            workload histories of acknowledged writes
    OUT/final-logs/<source>/broker-N.jsonl         every replica's records, read from its segment files
    OUT/collected.json                             what was gathered from where

``collect`` takes any number of source folders (a cluster's data dir, or folders copied out of
containers), so one analysis can cover several runs.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cluster.final_logs import broker_records
from cluster.processes import ClusterError
from traces.history import FINAL_LOGS_DIR, HISTORY_SUFFIX

MANIFEST = "collected.json"
_TRACE_FILE = re.compile(r"^(.*-)?trace\.jsonl(\.\d+)?$")
_BROKER_DIR = re.compile(r"^broker-(\d+)$")


@dataclass
class Collected:
    out: Path
    trace_files: list[str] = field(default_factory=list)
    history_files: list[str] = field(default_factory=list)
    final_logs: dict[str, int] = field(default_factory=dict)   # file -> records

    def summary(self) -> str:
        return (f"collected {len(self.trace_files)} trace files, {len(self.history_files)} histories and "
                f"{sum(self.final_logs.values())} records from {len(self.final_logs)} brokers' logs into {self.out}")


def _files(source: Path, out: Path) -> list[Path]:
    """Regular files under ``source``, skipping earlier collections (and ``out`` itself)."""
    skip = [p.parent for p in source.rglob(MANIFEST)] + [out]
    return [p for p in sorted(source.rglob("*"))
            if p.is_file() and not any(p.is_relative_to(s) for s in skip)]


def _labels(sources: Sequence[Path]) -> list[str]:
    labels: list[str] = []
    for source in sources:
        label = source.name or "run"
        while label in labels:
            label += "_"
        labels.append(label)
    return labels


def collect(sources: Sequence[Path], out: Path) -> Collected:
    sources = [s.resolve() for s in sources]
    out = out.resolve()
    for source in sources:
        if not source.is_dir():
            raise ClusterError(f"{source} is not a folder; pass a cluster's data dir (--data-dir) or a copy of it")
    if out.exists() and any(out.iterdir()):
        raise ClusterError(f"{out} is not empty; choose a new --out folder")
    labels = _labels(sources)
    # decide everything first: a folder without traces is refused before anything is written
    copies: list[tuple[Path, Path, list[str]]] = []
    result = Collected(out)
    for source, label in zip(sources, labels, strict=True):
        for path in _files(source, out):
            relative = path.relative_to(source)
            if _TRACE_FILE.match(path.name):
                copies.append((path, out / "traces" / label / relative, result.trace_files))
            elif path.name.endswith(HISTORY_SUFFIX):
                copies.append((path, out / "history" / label / relative, result.history_files))
    if not any(found is result.trace_files for _, _, found in copies):
        raise ClusterError(f"no trace files under {', '.join(map(str, sources))}; is this a kafkasim data dir?")
    for path, target, found in copies:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        found.append(str(target.relative_to(out)))
    for source, label in zip(sources, labels, strict=True):
        for broker_dir in sorted(p for p in source.iterdir() if p.is_dir() and _BROKER_DIR.match(p.name)):
            logs = broker_dir / "logs"
            if not logs.is_dir():
                continue
            broker = int(_BROKER_DIR.match(broker_dir.name)[1])
            target = out / FINAL_LOGS_DIR / label / f"{broker_dir.name}.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            count = 0
            with open(target, "w", encoding="utf-8") as dump:
                for record in broker_records(broker, [logs]):
                    dump.write(record.model_dump_json() + "\n")
                    count += 1
            result.final_logs[str(target.relative_to(out))] = count
    (out / MANIFEST).write_text(json.dumps({"collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                            "sources": [str(s) for s in sources], **asdict(result),
                                            "out": str(out)}, indent=2) + "\n")
    return result


def default_out(data_dir: Path) -> Path:
    return data_dir / "runs" / time.strftime("run-%Y%m%dT%H%M%SZ", time.gmtime())
