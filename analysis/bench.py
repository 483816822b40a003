"""How long the analysis takes on one million events in local mode:

    python -m analysis.bench [--events 1000000] [--master local[2]]

Generates a schema-valid synthetic run (``analysis/synthetic.py``), then times every job and the figures
(``analyze_run`` + ``write_figures``, as ``kafkasim analyze`` runs them) after the SparkSession is up.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--master", default=None, help="Spark master (default local[2])")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from analysis.analyze import write_figures
    from analysis.report import analyze_run
    from analysis.session import spark_session
    from analysis.synthetic import write_synthetic_run

    with tempfile.TemporaryDirectory(prefix="kafkasim-analysis-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        started = time.monotonic()
        events = write_synthetic_run(run_dir, args.events)
        generated_s = time.monotonic() - started
        size_mib = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file()) / 2**20
        started = time.monotonic()
        spark = spark_session(args.master)
        session_s = time.monotonic() - started
        started = time.monotonic()
        result = analyze_run(spark, run_dir)
        write_figures(result, Path(tmp) / "figures")
        analysis_s = time.monotonic() - started
        spark.stop()
    figures = {"events": events, "trace_mib": round(size_mib, 1), "generate_s": round(generated_s, 1),
               "spark_start_s": round(session_s, 1), "analysis_s": round(analysis_s, 1),
               "leader_changes": len(result.failovers), "target_s": TARGET_S}
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"{events} events ({size_mib:.0f} MiB of trace files, generated in {generated_s:.1f} s)")
        print(f"SparkSession start: {session_s:.1f} s")
        print(f"analysis (every job and the figures): {analysis_s:.1f} s  (target: under {TARGET_S:.0f} s) "
              f"{'OK' if analysis_s < TARGET_S else 'MISSED'}")
        print(f"leader changes found: {len(result.failovers)}")
    return 0 if analysis_s < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
