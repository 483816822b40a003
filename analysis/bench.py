"""How long the analysis takes on a synthetic run in local mode (``kafkasim bench analysis`` reports it).

Generates a schema-valid synthetic run (``analysis/synthetic.py``), then times every job and the figures
(``analyze_run`` + ``write_figures``, as ``kafkasim analyze`` runs them) after the SparkSession is up.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TARGET_S = 60.0


@dataclass(frozen=True)
class AnalysisTimes:
    events: int
    trace_mib: float
    generate_s: float
    spark_start_s: float
    analysis_s: float      # every job and the figures, SparkSession already up
    leader_changes: int


def measure(events: int = 1_000_000, master: str | None = None) -> AnalysisTimes:
    from analysis.analyze import write_figures
    from analysis.report import analyze_run
    from analysis.session import spark_session
    from analysis.synthetic import write_synthetic_run

    with tempfile.TemporaryDirectory(prefix="kafkasim-analysis-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        started = time.monotonic()
        written = write_synthetic_run(run_dir, events)
        generate_s = time.monotonic() - started
        size_mib = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file()) / 2**20
        started = time.monotonic()
        spark = spark_session(master)
        spark_start_s = time.monotonic() - started
        try:
            started = time.monotonic()
            result = analyze_run(spark, run_dir)
            write_figures(result, Path(tmp) / "figures")
            analysis_s = time.monotonic() - started
        finally:
            spark.stop()
    return AnalysisTimes(written, size_mib, generate_s, spark_start_s, analysis_s, len(result.failovers))
