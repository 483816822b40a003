"""Runs every job on one run folder and keeps the (small) results as pandas frames for figures and text.

``kafkasim analyze RUN_DIR`` and the notebook both go through ``analyze_run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from analysis import jobs
from analysis import transactions as txn_jobs
from analysis.focus import focus_partitions
from analysis.load import check_schema_versions, load_events, load_final_logs, load_history

# the leader-side samples kept for the lag histograms (the summary covers all of them)
LAG_SAMPLE_ROWS = 100_000
# the partitions the timeline figure draws (with their LEO/HW lines), and at most this many points
SHOWN_PARTITIONS = 6
OFFSET_SAMPLE_ROWS = 100_000
TRANSACTION_STEP_ROWS = 100_000


@dataclass
class RunAnalysis:
    run_dir: Path
    events: int
    event_counts: pd.DataFrame
    timeline: pd.DataFrame
    version_gaps: pd.DataFrame
    replica_offsets: pd.DataFrame
    follower_lag: pd.DataFrame
    follower_lag_summary: pd.DataFrame
    isr_counts: pd.DataFrame
    out_of_isr: pd.DataFrame
    under_replicated: pd.DataFrame
    failovers: pd.DataFrame
    truncations: pd.DataFrame
    truncation_totals: pd.DataFrame
    dropped: pd.DataFrame
    missing_writes: pd.DataFrame | None = None       # None: no workload history in the run
    acknowledged_writes: int = 0
    end_ms: float = 0.0       # the last event of the run
    notes: list[str] = field(default_factory=list)
    # the partitions the figures draw, busiest first, with why (analysis/focus.py)
    shown_partitions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["topic", "partition", "why"]))
    include_internal: bool = False   # whether internal topics may appear in the figures
    faults: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["ts_ms", "action", "target",
                                                                              "broker_id"]))
    # transactions (analysis/transactions.py): one row per transaction, and the LSO behind the HW
    transactions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=txn_jobs.SUMMARY_COLUMNS))
    transaction_steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=txn_jobs.STEP_COLUMNS))
    lso_lag: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=txn_jobs.LSO_LAG_COLUMNS))
    lso_lag_summary: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=txn_jobs.LSO_SUMMARY_COLUMNS))


def analyze_run(spark: SparkSession, run_dir: Path, history: list[Path] | None = None,
                include_internal: bool = False) -> RunAnalysis:
    """``include_internal``: internal topics (``__consumer_offsets``) may lead the figures too."""
    events = load_events(spark, run_dir).select(*jobs.COLUMNS).cache()
    check_schema_versions(events)
    end_ms = jobs.end_of_trace_ms(events)
    timeline = jobs.leadership_timeline(events).cache()
    lag = jobs.follower_lag(events)
    isr_counts, out_of_isr = jobs.isr_churn(timeline, end_ms)
    truncated = jobs.truncations(events)
    timeline_rows = timeline.orderBy(*jobs.TP, "zk_version").drop("lags").toPandas()
    truncation_rows = truncated.toPandas()
    notes: list[str] = []
    missing, acknowledged = None, 0
    history_df = load_history(spark, run_dir, history)
    final_logs = load_final_logs(spark, run_dir)
    if history_df is None:
        notes.append("no workload history (*history.jsonl): lost acknowledged writes were not checked")
    elif final_logs is None:
        notes.append("no final logs (final-logs/): run `kafkasim traces collect` to check lost writes")
    else:
        acknowledged = history_df.count()
        missing = jobs.missing_writes(history_df, final_logs, timeline).toPandas()
    # the figures lead with the partitions where something happened (analysis/focus.py)
    shown = focus_partitions(timeline_rows, truncation_rows, missing, jobs.records_written(events).toPandas(),
                             include_internal, SHOWN_PARTITIONS)
    offsets = jobs.replica_offsets(events)
    offsets = (offsets.join(spark.createDataFrame(shown[jobs.TP], "topic string, partition long"), jobs.TP,
                            "left_semi")
               if len(shown) else offsets.limit(0))
    event_counts = events.groupBy("event").count().orderBy("event").toPandas()
    traced = set(event_counts["event"])
    result = RunAnalysis(
        run_dir=run_dir,
        events=int(event_counts["count"].sum()),
        event_counts=event_counts,
        timeline=timeline_rows,
        version_gaps=jobs.version_gaps(timeline).select(*jobs.TP, "previous_zk_version", "zk_version").toPandas(),
        replica_offsets=offsets.limit(OFFSET_SAMPLE_ROWS).toPandas(),
        follower_lag=lag.select("topic", "partition", "replica", "ts_ms", "lag_offsets", "lag_ms")
        .limit(LAG_SAMPLE_ROWS).toPandas(),
        follower_lag_summary=jobs.follower_lag_summary(lag).toPandas(),
        isr_counts=isr_counts.orderBy(*jobs.TP).toPandas(),
        out_of_isr=out_of_isr.orderBy("left_ms").toPandas(),
        under_replicated=jobs.under_replicated_time(timeline, end_ms).toPandas(),
        failovers=jobs.failover_breakdown(events, timeline).toPandas(),
        truncations=truncation_rows,
        truncation_totals=jobs.truncation_totals(truncated).toPandas(),
        dropped=jobs.dropped_events(events).toPandas(),
        missing_writes=missing,
        acknowledged_writes=acknowledged,
        end_ms=end_ms,
        notes=notes,
        shown_partitions=shown,
        include_internal=include_internal,
        faults=jobs.injected_faults(events).toPandas(),
        **transaction_tables(events, traced, end_ms),
    )
    if not result.version_gaps.empty:
        result.notes.append(f"{len(result.version_gaps)} partition state writes are missing from the traces")
    events.unpersist()
    timeline.unpersist()
    return result


def transaction_tables(events: DataFrame, traced: set[str], end_ms: float) -> dict[str, pd.DataFrame]:
    """The transaction jobs' tables, for a run that traced transactions (the others keep RunAnalysis' empty ones,
    without a Spark job)."""
    tables: dict[str, pd.DataFrame] = {}
    if traced & set(txn_jobs.TRANSACTION_EVENTS):
        steps = txn_jobs.transaction_steps(events).cache()
        tables["transactions"] = txn_jobs.transaction_summary(events, steps).toPandas()
        tables["transaction_steps"] = steps.limit(TRANSACTION_STEP_ROWS).toPandas()
        steps.unpersist()
    if traced & set(txn_jobs.LSO_EVENTS):
        lag = txn_jobs.lso_lag(events).cache()
        tables["lso_lag"] = lag.limit(OFFSET_SAMPLE_ROWS).toPandas()
        tables["lso_lag_summary"] = txn_jobs.lso_lag_summary(lag, end_ms).toPandas()
        lag.unpersist()
    return tables


def summary_text(result: RunAnalysis) -> str:
    lines = [f"run: {result.run_dir}", f"trace events: {result.events}"]
    dropped = int(result.dropped["dropped"].sum()) if not result.dropped.empty else 0
    lines.append(f"events dropped by trace writers: {dropped}")
    partitions = result.timeline.groupby(["topic", "partition"]).size()
    lines.append(f"partitions: {len(partitions)}, partition state changes: {len(result.timeline)}")
    if not result.failovers.empty:
        lines.append(f"leader changes: {len(result.failovers)}")
        for row in result.failovers.itertuples():
            phases = ", ".join(f"{name} {_ms(getattr(row, name + '_ms'))}"
                               for name in ("detection", "election", "propagation", "first_write"))
            lines.append(f"  {row.topic}-{row.partition} epoch {row.leader_epoch}: {row.previous_leader} -> "
                         f"{row.leader} ({row.change}); {phases}; total {_ms(row.total_ms)}")
    else:
        lines.append("leader changes: 0")
    if not result.isr_counts.empty:
        lines.append(f"ISR shrinks: {int(result.isr_counts['shrinks'].sum())}, "
                     f"expands: {int(result.isr_counts['expands'].sum())}")
    if not result.out_of_isr.empty:
        lines.append(f"out-of-ISR periods: {len(result.out_of_isr)}, longest "
                     f"{_ms(result.out_of_isr['out_of_isr_ms'].max())}")
    under = result.under_replicated
    if not under.empty:
        worst = under.sort_values("under_replicated_ms", ascending=False).iloc[0]
        lines.append(f"under-replicated time: {_ms(under['under_replicated_ms'].sum())} over all partitions "
                     f"(most: {worst['topic']}-{worst['partition']}, {_ms(worst['under_replicated_ms'])})")
    if not result.follower_lag_summary.empty:
        lines.append(f"follower lag: max {int(result.follower_lag_summary['lag_offsets_max'].max())} offsets, "
                     f"max {_ms(result.follower_lag_summary['lag_ms_max'].max())} behind")
    lines.append(f"truncations: {len(result.truncations)}, records removed "
                 f"{int(result.truncations['records_removed'].sum()) if len(result.truncations) else 0}, "
                 f"bytes removed {int(result.truncations['bytes_dropped'].sum()) if len(result.truncations) else 0}")
    lines.extend(transaction_lines(result))
    if result.missing_writes is not None:
        missing = result.missing_writes
        lines.append(f"acknowledged writes: {result.acknowledged_writes}, missing from the final logs: {len(missing)}")
        for row in missing.head(20).itertuples():
            lines.append(f"  MISSING {row.topic}-{row.partition} offset {row.acknowledged_offset}: {row.value!r} "
                         f"(now there: {row.now_at_offset!r})")
    lines.extend(f"note: {note}" for note in result.notes)
    return "\n".join(lines) + "\n"


def transaction_lines(result: RunAnalysis) -> list[str]:
    """Nothing for a run without transactions; else the outcomes, the durations' medians and worst, the markers
    and the partitions whose LSO a transaction held behind the HW."""
    txns = result.transactions
    if txns.empty:
        return []
    outcomes = ", ".join(f"{outcome} {n}" for outcome, n in txns.outcome.value_counts().sort_index().items())
    lines = [f"transactions: {len(txns)} ({outcomes}), markers written: {int(txns.markers.sum())}"]
    for column, name in (("ongoing_ms", "begin → end requested"), ("completion_ms", "end requested → complete"),
                         ("total_ms", "begin → complete"),
                         ("after_previous_ms", "previous transaction of the id complete → begin")):
        values = txns[column].dropna()
        if len(values):
            lines.append(f"  {name}: median {_ms(values.median())}, p99 {_ms(values.quantile(0.99))}, "
                         f"max {_ms(values.max())}")
    held = result.lso_lag_summary
    held = held[held.lag_offsets_max > 0] if not held.empty else held
    if not held.empty:
        worst = held.sort_values("lag_offsets_max", ascending=False).iloc[0]
        lines.append(f"LSO held behind the HW: {len(held)} partitions, {_ms(held.held_ms.sum())} in all; largest lag "
                     f"{int(worst.lag_offsets_max)} offsets ({worst.topic}-{worst.partition})")
    return lines


def _ms(value: float | None) -> str:
    if value is None or pd.isna(value):
        return "n/a"
    return f"{value / 1000:.2f} s" if abs(value) >= 1000 else f"{value:.0f} ms"
