"""The figures of a run: partition timelines with leader changes marked, follower lag histograms, and
failover phase bars. Each function draws on a new matplotlib figure and returns it; ``write_figures``
saves them as PNG files."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from analysis.report import SHOWN_PARTITIONS, RunAnalysis

PHASES = [("detection_ms", "process death → session expiry"), ("election_ms", "expiry → controller decision"),
          ("propagation_ms", "decision → LeaderAndIsr applied"), ("first_write_ms", "applied → first ack")]
MAX_TIMELINE_PARTITIONS = SHOWN_PARTITIONS


def _seconds(ts_ms: pd.Series, origin_ms: float) -> pd.Series:
    return (ts_ms - origin_ms) / 1000


def timeline_figure(result: RunAnalysis) -> Figure:
    """Per partition, left: one row per broker, a grey band while it is in the ISR and a blue one while it
    leads, red lines at leader changes with the new epoch; right: each replica's LEO and the HW."""
    timeline = result.timeline
    keys = timeline[["topic", "partition"]].drop_duplicates().head(MAX_TIMELINE_PARTITIONS)
    rows = max(1, len(keys))
    fig, axes = plt.subplots(rows, 2, figsize=(14, 3.2 * rows), squeeze=False, sharex=True)
    if timeline.empty:
        axes[0][0].text(0.5, 0.5, "no partition state changes in the traces", ha="center")
        return fig
    origin = timeline["ts_ms"].min()
    offsets = result.replica_offsets
    for row, (topic, partition) in enumerate(keys.itertuples(index=False)):
        states = timeline[(timeline.topic == topic) & (timeline.partition == partition)].sort_values("zk_version")
        ax = axes[row][0]
        starts = list(_seconds(states.ts_ms, origin))
        ends = [*starts[1:], (max(result.end_ms, states.ts_ms.max()) - origin) / 1000]
        brokers = sorted({b for isr in states.isr for b in isr} | {b for b in states.leader if b >= 0})
        for start, end, state in zip(starts, ends, states.itertuples(), strict=True):
            for member in state.isr:
                ax.broken_barh([(start, end - start)], (member - 0.3, 0.6), color="lightgrey")
            if state.leader >= 0:
                ax.broken_barh([(start, end - start)], (state.leader - 0.15, 0.3), color="tab:blue")
        changes = states[states.change.isin(["offline", "unclean", "controlled_shutdown"])]
        for change in changes.itertuples():
            x = (change.ts_ms - origin) / 1000
            ax.axvline(x, color="tab:red", alpha=0.7)
            ax.annotate(f"epoch {change.leader_epoch}\n{change.change}", (x, change.leader + 0.3), fontsize=7,
                        xytext=(3, 0), textcoords="offset points", color="tab:red")
        ax.set_yticks(brokers, [f"broker {b}" for b in brokers])
        ax.set_ylim(min(brokers, default=0) - 0.7, max(brokers, default=0) + 0.9)
        ax.set_title(f"{topic}-{partition}: leader (blue) and ISR (grey)")
        ax.set_xlabel("seconds")
        ax = axes[row][1]
        mine = offsets[(offsets.topic == topic) & (offsets.partition == partition)]
        own = mine[mine.seen_by != "leader's view"]   # each replica's own account, as leader or follower
        for replica, series in own.groupby("replica"):
            series = series.sort_values("ts_ms")
            ax.step(_seconds(series.ts_ms, origin), series.log_end_offset, where="post", linewidth=1,
                    label=f"LEO of broker {replica}")
        led = own[own.seen_by == "leader"].sort_values("ts_ms")
        if not led.empty:
            ax.step(_seconds(led.ts_ms, origin), led.high_watermark, where="post", color="black", linewidth=1.5,
                    linestyle=":", label="HW (the leader's)")
        for change in changes.itertuples():
            ax.axvline((change.ts_ms - origin) / 1000, color="tab:red", alpha=0.6)
        ax.set_title(f"{topic}-{partition}: log end offsets and high watermark")
        ax.set_xlabel("seconds")
        ax.set_ylabel("offset")
        if not mine.empty:
            ax.legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    return fig


def lag_figure(result: RunAnalysis) -> Figure:
    fig, (by_offsets, by_time) = plt.subplots(1, 2, figsize=(12, 4))
    lag = result.follower_lag
    if lag.empty:
        by_offsets.text(0.5, 0.5, "no follower fetches traced", ha="center")
    else:
        for replica, series in lag.groupby("replica"):
            by_offsets.hist(series.lag_offsets, bins=40, alpha=0.5, label=f"follower {replica}")
            by_time.hist(series.lag_ms, bins=40, alpha=0.5, label=f"follower {replica}")
        by_offsets.legend(fontsize=7)
        by_time.legend(fontsize=7)
    by_offsets.set_title("follower lag in offsets (leader LEO - follower LEO)")
    by_offsets.set_xlabel("offsets")
    by_offsets.set_ylabel("samples")
    by_time.set_title("follower lag in time (since last caught up)")
    by_time.set_xlabel("ms")
    fig.tight_layout()
    return fig


def failover_figure(result: RunAnalysis) -> Figure:
    failovers = result.failovers
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.6 * max(1, len(failovers))))
    if failovers.empty:
        ax.text(0.5, 0.5, "no leader changes", ha="center")
        return fig
    labels = [f"{r.topic}-{r.partition} e{r.leader_epoch}: {r.previous_leader}→{r.leader}"
              for r in failovers.itertuples()]
    left = pd.Series(0.0, index=failovers.index)
    for column, name in PHASES:
        widths = failovers[column].fillna(0.0) / 1000
        ax.barh(labels, widths, left=left, label=name)
        left = left + widths
    ax.set_xlabel("seconds since the old leader died")
    ax.set_title("failover phases per leader change")
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


FIGURES = {"timeline.png": timeline_figure, "follower_lag.png": lag_figure, "failover_phases.png": failover_figure}


def write_figures(result: RunAnalysis, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in FIGURES.items():
        fig = draw(result)
        path = out / name
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
