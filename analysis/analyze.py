"""``kafkasim analyze RUN_DIR``: every job on a run folder; figures as PNG files and a text summary."""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, on machines without a display too (the notebook keeps its inline backend)

from analysis.figures import write_figures
from analysis.report import analyze_run, summary_text
from analysis.session import spark_session

SUMMARY_FILE = "summary.txt"


def run_analyze(run_dir: Path, out: Path | None = None, master: str | None = None,
                history: list[Path] | None = None, include_internal: bool = False) -> tuple[str, list[Path]]:
    """Returns the summary and the files written (figures, summary, the tables as CSV)."""
    out = out or run_dir / "analysis"
    started = time.monotonic()
    spark = spark_session(master)
    result = analyze_run(spark, run_dir, history, include_internal)
    written = write_figures(result, out)
    for name in ("timeline", "failovers", "isr_counts", "out_of_isr", "under_replicated", "follower_lag_summary",
                 "truncations", "shown_partitions", "faults", "transactions", "lso_lag_summary"):
        path = out / f"{name}.csv"
        getattr(result, name).to_csv(path, index=False)
        written.append(path)
    if result.missing_writes is not None:
        path = out / "missing_writes.csv"
        result.missing_writes.to_csv(path, index=False)
        written.append(path)
    summary = summary_text(result) + f"analysis time: {time.monotonic() - started:.1f} s\n"
    (out / SUMMARY_FILE).write_text(summary)
    written.append(out / SUMMARY_FILE)
    return summary, written
