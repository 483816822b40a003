"""Which partitions a run's figures lead with, pure (pandas): a class looks at the partitions where something
happened — acknowledged writes missing, truncations, leader changes, ISR changes, then records written, in that
order of weight — and not at fifty quiet ``__consumer_offsets`` partitions. Kafka's internal topics are left out
unless asked."""

from __future__ import annotations

import pandas as pd

LEADER_CHANGES = ("offline", "unclean", "controlled_shutdown", "preferred", "reassignment")


# Kafka's Topic.isInternal: exactly these two
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def focus_partitions(timeline: pd.DataFrame, truncations: pd.DataFrame | None = None,
                     missing_writes: pd.DataFrame | None = None, records: pd.DataFrame | None = None,
                     include_internal: bool = False, limit: int = 6) -> pd.DataFrame:
    """At most ``limit`` partitions as (topic, partition, why), the busiest first; quiet partitions fill the
    remaining places so a run without faults still shows its topics."""
    columns = ["topic", "partition"]
    keys = timeline[columns].drop_duplicates()
    if not include_internal:
        keys = keys[~keys.topic.map(is_internal)]
    if keys.empty:
        return pd.DataFrame(columns=[*columns, "why"])

    def counts(frame: pd.DataFrame | None, mask: pd.Series | None = None) -> pd.Series:
        if frame is None or frame.empty:
            return pd.Series(dtype="int64")
        chosen = frame if mask is None else frame[mask]
        return chosen.groupby(columns).size()

    scores = {
        "missing writes": counts(missing_writes),
        "truncations": counts(truncations),
        "leader changes": counts(timeline, timeline.change.isin(LEADER_CHANGES)),
        "ISR changes": counts(timeline, timeline.change.isin(["isr_shrink", "isr_expand"])),
        "records": (records.set_index(columns)["records"] if records is not None and not records.empty
                    else pd.Series(dtype="int64")),
    }
    rows = []
    for topic, partition in keys.itertuples(index=False):
        found = {name: int(score.get((topic, partition), 0)) for name, score in scores.items()}
        events = ", ".join(f"{n} {name}" for name, n in found.items() if n and name != "records")
        rows.append((topic, partition, *found.values(), events or "quiet"))
    ranked = pd.DataFrame(rows, columns=[*columns, *scores, "why"])
    ranked = ranked.sort_values([*scores, "topic", "partition"], ascending=[False] * len(scores) + [True, True])
    return ranked[[*columns, "why"]].head(limit).reset_index(drop=True)
