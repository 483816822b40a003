"""Which partitions the figures lead with (analysis/focus.py), on hand-made tables: the partition where the
leader changed comes before fifty quiet __consumer_offsets partitions, which are left out unless asked."""

from __future__ import annotations

import pandas as pd

from analysis.focus import focus_partitions


def states(topic: str, partition: int, *changes: str) -> list[dict]:
    return [{"topic": topic, "partition": partition, "zk_version": v, "change": c} for v, c in enumerate(changes)]


def timeline(*parts: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([row for part in parts for row in part])


OFFSETS = [states("__consumer_offsets", p, "initial", "isr_shrink", "isr_expand") for p in range(50)]


def test_the_partition_that_failed_over_leads_and_internal_topics_stay_out():
    rows = timeline(*OFFSETS, states("a-quiet", 0, "initial"), states("a-quiet", 1, "initial"),
                    states("orders", 0, "initial", "isr_shrink", "offline", "isr_expand"))
    shown = focus_partitions(rows, limit=6)
    assert list(zip(shown.topic, shown.partition, strict=True)) == [("orders", 0), ("a-quiet", 0), ("a-quiet", 1)]
    assert shown.why[0] == "1 leader changes, 2 ISR changes" and shown.why[1] == "quiet"
    with_internal = focus_partitions(rows, include_internal=True, limit=6)
    assert with_internal.topic[0] == "orders" and (with_internal.topic == "__consumer_offsets").sum() == 5


def test_lost_writes_then_truncations_then_elections_then_records_decide_the_order():
    rows = timeline(states("t", 0, "initial", "offline"), states("t", 1, "initial"), states("t", 2, "initial"),
                    states("t", 3, "initial"), states("t", 4, "initial"))
    missing = pd.DataFrame([{"topic": "t", "partition": 1, "acknowledged_offset": 7}])
    truncations = pd.DataFrame([{"topic": "t", "partition": 2, "records_removed": 3}])
    records = pd.DataFrame([{"topic": "t", "partition": 3, "records": 100}, {"topic": "t", "partition": 4,
                                                                               "records": 5}])
    shown = focus_partitions(rows, truncations, missing, records, limit=4)
    assert list(shown.partition) == [1, 2, 0, 3]
    assert shown.why[0] == "1 missing writes"


def test_a_run_of_internal_topics_only_shows_nothing_rather_than_them():
    assert focus_partitions(timeline(*OFFSETS)).empty
