"""The transaction analyses: each transaction's timeline, from the coordinator's state changes and the partition
leaders' markers, and every leader's last stable offset behind its high watermark.

A transactional id runs one transaction after another, often under the same producer id and epoch, so a
transaction is told apart by its place in the id's sequence: one begins where the coordinator moves the id to
Ongoing from any other state (AddPartitionsToTxn while Ongoing adds partitions to the same one). Its markers are
the leaders' TxnMarkerWritten of its producer id from its end request (Prepare*) until the id's next transaction
begins; the coordinator writes Complete* once every marker is written, so they fall in between.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis.jobs import TP, of

TXN = ["transactional_id", "txn"]
# the events each analysis reads: a run without them skips it (and gets empty tables with these columns)
TRANSACTION_EVENTS = ("transaction_state_changed", "txn_marker_written")
LSO_EVENTS = ("last_stable_offset_changed",)
STEP_COLUMNS = [*TXN, "producer_id", "producer_epoch", "ts_ms", "step", "state", "partitions", "broker", "reason"]
SUMMARY_COLUMNS = [*TXN, "producer_id", "producer_epoch", "begin_ms", "end_requested_ms", "last_marker_ms",
                   "complete_ms", "end_reason", "partitions", "markers", "marker_offsets", "outcome", "ongoing_ms",
                   "markers_ms", "completion_ms", "total_ms", "after_previous_ms"]
LSO_LAG_COLUMNS = [*TP, "leader", "ts_ms", "reported", "high_watermark", "last_stable_offset", "lag_offsets"]
LSO_SUMMARY_COLUMNS = [*TP, "samples", "lag_offsets_max", "lag_offsets_p50", "held_ms"]
BEGIN, ADDED, END_REQUESTED, MARKER, COMPLETE = "begin", "partitions added", "end requested", "marker", "complete"
PREPARED = ("PrepareCommit", "PrepareAbort")
COMPLETED = ("CompleteCommit", "CompleteAbort")


def _numbered_states(events: DataFrame) -> DataFrame:
    """Each coordinator state change with the number of the transaction it belongs to (0: before the first)."""
    window = Window.partitionBy("transactional_id").orderBy("ts_ms")
    begins = (F.col("new_state") == "Ongoing") & (F.col("old_state") != "Ongoing")
    return (of(events, "transaction_state_changed")
            .select("ts_ms", F.col("broker_id").alias("coordinator"), "transactional_id", "producer_id",
                    "producer_epoch", "old_state", "new_state", "txn_partitions", "coordinator_epoch", "reason")
            .withColumn("txn", F.sum(F.when(begins, 1).otherwise(0)).over(
                window.rowsBetween(Window.unboundedPreceding, 0))))


def transaction_steps(events: DataFrame) -> DataFrame:
    """One row per step of every transaction, in time order: begin (the first Ongoing), partitions added (a
    later Ongoing naming new partitions), end requested (Prepare*, with the reason: EndTxn, a timeout, a
    fence), one marker per partition (its leader, the marker's offset and type) and complete (Complete*).
    Every Ongoing names at least one partition (AddOffsetsToTxn adds the group's ``__consumer_offsets`` one)."""
    states = _numbered_states(events).where(F.col("txn") > 0)
    window = Window.partitionBy(*TXN).orderBy("ts_ms")
    ongoing = (states.where(F.col("new_state") == "Ongoing")
               .withColumn("before", F.lag("txn_partitions").over(window))
               .withColumn("added", F.array_except("txn_partitions", F.coalesce(
                   "before", F.array().cast("array<string>"))))
               .where(F.size("added") > 0)
               .select(*TXN, "producer_id", "producer_epoch", "ts_ms",
                       F.when(F.col("before").isNull(), F.lit(BEGIN)).otherwise(F.lit(ADDED)).alias("step"),
                       F.col("new_state").alias("state"), F.col("added").alias("partitions"),
                       F.col("coordinator").alias("broker"), "reason"))
    ends = (states.where(F.col("new_state").isin(*PREPARED, *COMPLETED))
            .select(*TXN, "producer_id", "producer_epoch", "ts_ms",
                    F.when(F.col("new_state").isin(*PREPARED), F.lit(END_REQUESTED)).otherwise(F.lit(COMPLETE))
                    .alias("step"), F.col("new_state").alias("state"), F.col("txn_partitions").alias("partitions"),
                    F.col("coordinator").alias("broker"), "reason"))
    steps = ongoing.unionByName(ends)
    return steps.unionByName(_marker_steps(events, states)).orderBy(*TXN, "ts_ms")


def _marker_steps(events: DataFrame, states: DataFrame) -> DataFrame:
    """Markers matched to their transaction: same producer id, written from its end request on and before the
    id's next transaction began."""
    window = Window.partitionBy("transactional_id").orderBy("txn")
    spans = (states.groupBy(*TXN, "producer_id")
             .agg(F.min(F.when(F.col("new_state").isin(*PREPARED), F.col("ts_ms"))).alias("prepared_ms"),
                  F.min(F.when(F.col("new_state") == "Ongoing", F.col("ts_ms"))).alias("begin_ms"))
             .withColumn("next_begin_ms", F.lead("begin_ms").over(window))
             .where(F.col("prepared_ms").isNotNull()))
    markers = of(events, "txn_marker_written").select(
        F.col("ts_ms").alias("marker_ms"), F.col("producer_id").alias("marker_producer_id"),
        F.col("producer_epoch").alias("marker_epoch"), "topic", "partition", F.col("broker_id").alias("leader"),
        "marker", "offset", F.col("coordinator_epoch").alias("marker_coordinator_epoch"))
    matched = spans.join(markers, (F.col("marker_producer_id") == F.col("producer_id"))
                         & (F.col("marker_ms") >= F.col("prepared_ms"))
                         & (F.col("next_begin_ms").isNull() | (F.col("marker_ms") < F.col("next_begin_ms"))))
    return matched.select(
        *TXN, "producer_id", F.col("marker_epoch").alias("producer_epoch"), F.col("marker_ms").alias("ts_ms"),
        F.lit(MARKER).alias("step"), F.col("marker").alias("state"),
        F.array(F.concat_ws("-", "topic", F.col("partition").cast("string"))).alias("partitions"),
        F.col("leader").alias("broker"),
        F.concat(F.lit("offset "), F.col("offset").cast("string"), F.lit(", coordinator epoch "),
                 F.col("marker_coordinator_epoch").cast("string")).alias("reason"))


def transaction_summary(events: DataFrame, steps: DataFrame | None = None) -> DataFrame:
    """One row per transaction: its times and the durations between them — ``ongoing_ms`` (begin → end
    requested), ``markers_ms`` (end requested → last marker), ``completion_ms`` (end requested → complete),
    ``total_ms`` (begin → complete), ``after_previous_ms`` (the id's previous transaction complete → this begin:
    the producer's own time, and its AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS until that completion)
    — with its outcome, partitions and markers (partition@leader:offset). A transaction still open at the end of
    the trace has null for what it did not reach."""
    steps = steps if steps is not None else transaction_steps(events)

    def first(step: str, column: str = "ts_ms"):
        return F.min(F.when(F.col("step") == step, F.col(column)))

    marker_text = F.concat(F.element_at("partitions", 1), F.lit("@"), F.col("broker").cast("string"), F.lit(":"),
                           F.regexp_extract("reason", r"offset (\d+)", 1))
    summary = (steps.groupBy(*TXN)
               .agg(F.first("producer_id").alias("producer_id"), F.max("producer_epoch").alias("producer_epoch"),
                    first(BEGIN).alias("begin_ms"), first(END_REQUESTED).alias("end_requested_ms"),
                    F.max(F.when(F.col("step") == MARKER, F.col("ts_ms"))).alias("last_marker_ms"),
                    first(COMPLETE).alias("complete_ms"),
                    F.max(F.when(F.col("step") == END_REQUESTED, F.col("state"))).alias("end_state"),
                    F.max(F.when(F.col("step") == END_REQUESTED, F.col("reason"))).alias("end_reason"),
                    F.max(F.when(F.col("step") == COMPLETE, F.col("state"))).alias("final_state"),
                    F.array_sort(F.array_distinct(F.flatten(F.collect_list(
                        F.when(F.col("step").isin(BEGIN, ADDED), F.col("partitions")))))).alias("partitions"),
                    F.count(F.when(F.col("step") == MARKER, 1)).alias("markers"),
                    F.array_sort(F.collect_list(F.when(F.col("step") == MARKER, marker_text)))
                    .alias("marker_offsets")))
    outcome = (F.when(F.col("final_state") == "CompleteCommit", "commit")
               .when(F.col("final_state") == "CompleteAbort", "abort")
               .when(F.col("end_state") == "PrepareCommit", "committing")
               .when(F.col("end_state") == "PrepareAbort", "aborting").otherwise("open"))
    return (summary.withColumn("outcome", outcome)
            .withColumn("ongoing_ms", F.col("end_requested_ms") - F.col("begin_ms"))
            .withColumn("markers_ms", F.col("last_marker_ms") - F.col("end_requested_ms"))
            .withColumn("completion_ms", F.col("complete_ms") - F.col("end_requested_ms"))
            .withColumn("total_ms", F.col("complete_ms") - F.col("begin_ms"))
            .withColumn("after_previous_ms", F.col("begin_ms") - F.lag("complete_ms").over(
                Window.partitionBy("transactional_id").orderBy("txn")))
            .drop("end_state", "final_state")
            .orderBy("begin_ms", *TXN))


# --- last stable offset behind the high watermark ------------------------------------------------------------

def lso_lag(events: DataFrame) -> DataFrame:
    """Each leader's HW and LSO over time for the partitions where a transaction held the LSO: one row per HW
    move and per LSO report, ``lag_offsets`` = HW - LSO. Between reports the LSO is the one last reported while
    held (below the HW), else it follows the HW (the leader reports only while a transaction is open or held)."""
    reports = of(events, "last_stable_offset_changed").select(
        *TP, F.col("broker_id").alias("leader"), "ts_ms", "high_watermark", "last_stable_offset",
        F.lit(True).alias("reported"))
    watched = reports.select(*TP, "leader").distinct()
    moves = (of(events, "high_watermark_updated").where(F.col("role") == "leader")
             .select(*TP, F.col("broker_id").alias("leader"), "ts_ms", "high_watermark",
                     F.lit(None).cast("bigint").alias("last_stable_offset"), F.lit(False).alias("reported"))
             .join(F.broadcast(watched), [*TP, "leader"], "left_semi"))
    # the leader traces an HW move before the LSO report it causes: at one instant the report comes second
    window = (Window.partitionBy(*TP, "leader").orderBy("ts_ms", "reported")
              .rowsBetween(Window.unboundedPreceding, 0))
    held = F.when(F.col("last_stable_offset") < F.col("high_watermark"), F.col("last_stable_offset")).otherwise(-1)
    rows = (moves.unionByName(reports)
            .withColumn("held", F.last(F.when(F.col("reported"), held), ignorenulls=True).over(window))
            .withColumn("lso", F.when((F.col("held") >= 0) & (F.col("held") < F.col("high_watermark")),
                                      F.col("held")).otherwise(F.col("high_watermark"))))
    return rows.select(*TP, "leader", "ts_ms", "reported", "high_watermark", F.col("lso").alias("last_stable_offset"),
                       (F.col("high_watermark") - F.col("lso")).alias("lag_offsets")).orderBy(*TP, "ts_ms", "reported")


def lso_lag_summary(lag: DataFrame, end_ms: float) -> DataFrame:
    """Per partition: the largest and median lag, and for how long the LSO was held below the HW (each row's
    lag lasts until the partition's next row; the last one until the end of the trace)."""
    window = Window.partitionBy(*TP).orderBy("ts_ms", "reported")
    lasting = lag.withColumn("until_ms", F.coalesce(F.lead("ts_ms").over(window), F.lit(float(end_ms))))
    return (lasting.groupBy(*TP)
            .agg(F.count("*").alias("samples"), F.max("lag_offsets").alias("lag_offsets_max"),
                 F.percentile_approx("lag_offsets", 0.5).alias("lag_offsets_p50"),
                 F.sum(F.when(F.col("lag_offsets") > 0, F.col("until_ms") - F.col("ts_ms")).otherwise(0.0))
                 .alias("held_ms"))
            .orderBy(*TP))
