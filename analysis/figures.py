"""The figures of a run: partition timelines with leader changes marked, follower lag histograms, failover
phase bars, and transactions with the LSO's lag behind the HW. Each function draws on a new matplotlib figure
and returns it; ``write_figures`` saves them as PNG files."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from analysis.focus import LEADER_CHANGES, is_internal
from analysis.report import RunAnalysis

PHASES = [("detection_ms", "fault on the old leader → session expiry"), ("election_ms", "expiry → controller decision"),
          ("propagation_ms", "decision → LeaderAndIsr applied"), ("first_write_ms", "applied → first ack")]


def _seconds(ts_ms: pd.Series, origin_ms: float) -> pd.Series:
    return (ts_ms - origin_ms) / 1000


def _mark_faults(ax, faults: pd.DataFrame, origin: float, label: bool) -> None:
    """Every injected fault as a dashed purple line; its name written once, on the top row."""
    for fault in faults.itertuples():
        x = (fault.ts_ms - origin) / 1000
        ax.axvline(x, color="tab:purple", linestyle="--", alpha=0.6, linewidth=1)
        if label:
            # short, inside the axes: the target may be a long path (a filled log directory)
            who = f" b{int(fault.broker_id)}" if fault.broker_id is not None and fault.broker_id >= 0 else ""
            ax.annotate(f"{fault.action}{who}", (x, 0.98), xycoords=("data", "axes fraction"), rotation=90,
                        fontsize=6, color="tab:purple", va="top", ha="right", annotation_clip=True)


def timeline_figure(result: RunAnalysis) -> Figure:
    """Per partition (those where something happened first; analysis/focus.py), left: one row per broker, a grey
    band while it is in the ISR and a blue one while it leads, red lines at elections with the new epoch; right:
    each replica's LEO and the HW, so a truncation shows as a step down. Injected faults are dashed purple lines."""
    timeline = result.timeline
    keys = result.shown_partitions
    rows = max(1, len(keys))
    fig, axes = plt.subplots(rows, 2, figsize=(14, 3.2 * rows), squeeze=False, sharex=True)
    if timeline.empty or keys.empty:
        axes[0][0].text(0.5, 0.5, "no partition state changes in the traces", ha="center")
        return fig
    origin = min(timeline["ts_ms"].min(), result.faults["ts_ms"].min() if len(result.faults) else float("inf"))
    offsets = result.replica_offsets
    for row, (topic, partition, why) in enumerate(keys[["topic", "partition", "why"]].itertuples(index=False)):
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
        changes = states[states.change.isin(LEADER_CHANGES)]
        for change in changes.itertuples():
            x = (change.ts_ms - origin) / 1000
            ax.axvline(x, color="tab:red", alpha=0.7)
            ax.annotate(f"epoch {change.leader_epoch}\n{change.change}", (x, change.leader + 0.3), fontsize=7,
                        xytext=(3, 0), textcoords="offset points", color="tab:red")
        _mark_faults(ax, result.faults, origin, label=row == 0)
        ax.set_yticks(brokers, [f"broker {b}" for b in brokers])
        ax.set_ylim(min(brokers, default=0) - 0.7, max(brokers, default=0) + 0.9)
        ax.set_title(f"{topic}-{partition} ({why}): leader (blue) and ISR (grey)", fontsize=9)
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
        _mark_faults(ax, result.faults, origin, label=False)
        ax.set_title(f"{topic}-{partition}: log end offsets and high watermark", fontsize=9)
        ax.set_xlabel("seconds")
        ax.set_ylabel("offset")
        if not own.empty:
            # the offsets climb from the lower left to the upper right: "best" keeps the box off the lines
            ax.legend(fontsize=6, loc="best")
        else:
            ax.text(0.5, 0.5, "no LEO or HW traced for this partition", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def lag_figure(result: RunAnalysis) -> Figure:
    fig, (by_offsets, by_time) = plt.subplots(1, 2, figsize=(12, 4))
    lag = result.follower_lag
    if lag.empty:
        by_offsets.text(0.5, 0.5, "no follower fetches traced", ha="center")
    else:
        # the followers side by side in one set of bins: overlaid, each with bins of its own, a follower that
        # never lagged was a hairline hidden behind the others
        followers = list(lag.groupby("replica"))
        labels = [f"follower {replica}" for replica, _ in followers]
        by_offsets.hist([series.lag_offsets.dropna() for _, series in followers], bins=20, label=labels)
        by_time.hist([series.lag_ms.dropna() for _, series in followers], bins=20, label=labels)
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
    if not result.include_internal and not failovers.empty:
        failovers = failovers[~failovers.topic.map(is_internal)].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(12, 2.2 + 0.6 * max(1, len(failovers))))
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
    # the fault may have been a kill, a pause or a cut from ZooKeeper (a zombie leader lives on)
    ax.set_xlabel("seconds since the fault on the old leader")
    ax.set_title("failover phases per leader change")
    ax.invert_yaxis()
    # below the axes, never over the bars
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(failovers) < 3 else -0.12), ncol=4)
    fig.tight_layout()
    return fig


# at most this many transactions drawn (the first ones of the run), and partitions in the LSO figure
SHOWN_TRANSACTIONS = 30
SHOWN_PARTITIONS_LSO = 8
TXN_PHASES = [("ongoing_ms", "begin → end requested (Ongoing)"),
              ("completion_ms", "end requested → complete (markers written)")]


def transactions_figure(result: RunAnalysis) -> Figure:
    """Left: each transaction as a bar from its begin, Ongoing then Prepare* until Complete*, with a tick per
    marker written. Right: the LSO's lag behind the HW per partition over time (0 while it follows the HW)."""
    txns = result.transactions
    lag = result.lso_lag
    fig, (bars, lags) = plt.subplots(1, 2, figsize=(14, 2.5 + 0.25 * min(SHOWN_TRANSACTIONS, max(1, len(txns)))))
    if txns.empty:
        bars.text(0.5, 0.5, "no transactions traced", ha="center")
    else:
        shown = txns.dropna(subset=["begin_ms"]).head(SHOWN_TRANSACTIONS).reset_index(drop=True)
        origin = shown.begin_ms.min()
        labels = [f"{r.transactional_id} #{r.txn} ({r.outcome})" for r in shown.itertuples()]
        left = (shown.begin_ms - origin) / 1000
        for column, name in TXN_PHASES:
            widths = shown[column].fillna(0.0) / 1000
            bars.barh(labels, widths, left=left, label=name)
            left = left + widths
        for row, txn in shown.iterrows():
            if not pd.isna(txn.last_marker_ms):
                bars.plot([(txn.last_marker_ms - origin) / 1000], [row], marker="|", color="black", markersize=10)
        bars.invert_yaxis()
        bars.set_xlabel("seconds since the first transaction began (| last marker)")
        bars.legend(fontsize=7, loc="lower right")
    bars.set_title("transactions: begin, end requested, complete")
    if lag.empty:
        lags.text(0.5, 0.5, "no LSO held behind a high watermark", ha="center")
    else:
        origin = lag.ts_ms.min()
        for (topic, partition), series in list(lag.groupby(["topic", "partition"]))[:SHOWN_PARTITIONS_LSO]:
            series = series.sort_values(["ts_ms", "reported"])
            lags.step(_seconds(series.ts_ms, origin), series.lag_offsets, where="post", linewidth=1,
                      label=f"{topic}-{partition}")
        lags.legend(fontsize=7, loc="upper right")
        lags.set_xlabel("seconds")
        lags.set_ylabel("offsets")
    lags.set_title("LSO lag behind the HW (HW - LSO), per partition")
    fig.tight_layout()
    return fig


FIGURES = {"timeline.png": timeline_figure, "follower_lag.png": lag_figure, "failover_phases.png": failover_figure,
           "transactions.png": transactions_figure}


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
