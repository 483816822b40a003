"""The replication analyses, each a function from trace DataFrames to a DataFrame.

Times are wall-clock epoch milliseconds (``ts_ms``) from the process that wrote each event; every process
of a run shares one machine clock (or, in containers, the host's), so they compare across brokers.

The partition timeline comes from the two kinds of write a partition state znode gets: the controller's
(``leader_elected``) and the leader's ISR changes (``isr_changed``). Each carries the znode version it
produced, so the timeline is the znode's history in version order and a gap in versions means a write
the traces missed.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

TP = ["topic", "partition"]
# every column the jobs read: a run's events are cached with these only (JSON parsing skips the rest)
COLUMNS = ["schema_version", "event", "ts_ms", "broker_id", "topic", "partition", "zk_version", "leader",
           "leader_epoch", "isr", "election", "previous_leader", "replicas", "new_isr", "kind", "reason", "lags",
           "role", "log_end_offset", "high_watermark", "replica", "leader_log_end_offset", "in_isr", "coalesced",
           "lag_ms", "action", "expired_broker", "error", "rule", "from_offset", "to_offset", "bytes_dropped",
           "dropped_total", "target",
           # transactions (analysis/transactions.py)
           "transactional_id", "producer_id", "producer_epoch", "old_state", "new_state", "txn_partitions",
           "coordinator_epoch", "marker", "offset", "last_stable_offset", "open_transactions"]
LONG_ARRAY = "array<bigint>"
# FaultInjected actions that do not take a broker away
NOT_A_DEATH = ("start", "sigcont", "cont", "resume", "connect", "disk-free")
# a fault this long before an election is not what caused it
FAULT_WINDOW_MS = 300_000


def of(events: DataFrame, *kinds: str) -> DataFrame:
    return events.where(F.col("event").isin(*kinds))


def _by_version() -> Window:
    return Window.partitionBy(*TP).orderBy("zk_version", "ts_ms")


def end_of_trace_ms(events: DataFrame) -> float:
    return events.agg(F.max("ts_ms")).first()[0] or 0.0


# --- per-partition timeline ------------------------------------------------------------------------

def leadership_timeline(events: DataFrame) -> DataFrame:
    """One row per state the partition state znode went through: leader, leader epoch, ISR, who wrote it
    and why (the election kind, or isr_shrink / isr_expand with the leader's reason), in version order."""
    elected = of(events, "leader_elected").select(
        *TP, "ts_ms", "zk_version", "leader", "leader_epoch", "isr", F.col("election").alias("change"),
        "previous_leader", F.when(F.size("replicas") > 0, F.col("replicas")).alias("replicas"),
        F.col("broker_id").alias("written_by"), F.col("election").alias("reason"),
        F.lit(None).alias("lags"))
    isr_changes = of(events, "isr_changed").select(
        *TP, "ts_ms", "zk_version", F.col("broker_id").alias("leader"), "leader_epoch",
        F.col("new_isr").alias("isr"), F.concat(F.lit("isr_"), F.col("kind")).alias("change"),
        F.col("broker_id").alias("previous_leader"), F.lit(None).cast(LONG_ARRAY).alias("replicas"),
        F.col("broker_id").alias("written_by"), "reason", "lags")
    states = elected.unionByName(isr_changes, allowMissingColumns=True)
    window = _by_version()
    return (states
            .withColumn("replicas", F.last("replicas", ignorenulls=True).over(
                window.rowsBetween(Window.unboundedPreceding, 0)))
            .withColumn("previous_isr", F.lag("isr").over(window))
            .withColumn("previous_zk_version", F.lag("zk_version").over(window)))


def version_gaps(timeline: DataFrame) -> DataFrame:
    """States whose znode version does not follow the previous one by exactly 1: writes missing from the
    traces (a dropped event, a trace file lost with its container)."""
    return timeline.where(F.col("previous_zk_version").isNotNull()
                          & (F.col("zk_version") != F.col("previous_zk_version") + 1))


def state_intervals(timeline: DataFrame, end_ms: float) -> DataFrame:
    """Each state with how long it lasted (the last one lasts until the end of the trace)."""
    window = _by_version()
    return (timeline
            .withColumn("until_ms", F.coalesce(F.lead("ts_ms").over(window), F.lit(float(end_ms))))
            .withColumn("duration_ms", F.col("until_ms") - F.col("ts_ms"))
            .withColumn("under_replicated", F.size("isr") < F.size("replicas"))
            .withColumn("offline", F.col("leader") < 0))


def replica_offsets(events: DataFrame) -> DataFrame:
    """Each replica's LEO and HW over time: as the replica saw itself (``seen_by`` = its role) and, for
    followers, as their leader saw them after their fetches (``seen_by`` = "leader's view")."""
    own = of(events, "high_watermark_updated").select(
        *TP, "ts_ms", F.col("broker_id").alias("replica"), "log_end_offset", "high_watermark",
        F.col("role").alias("seen_by"))
    seen_by_leader = of(events, "follower_fetch_state_updated").select(
        *TP, "ts_ms", "replica", "log_end_offset", "high_watermark", F.lit("leader's view").alias("seen_by"))
    return own.unionByName(seen_by_leader)


# --- followers ---------------------------------------------------------------------------------------

def follower_lag(events: DataFrame) -> DataFrame:
    """Every (coalesced) leader-side look at a follower: lag in offsets and in time since caught up."""
    return of(events, "follower_fetch_state_updated").select(
        *TP, "ts_ms", F.col("broker_id").alias("leader"), "replica", "leader_epoch", "log_end_offset",
        "leader_log_end_offset", "high_watermark", "in_isr", "coalesced",
        (F.col("leader_log_end_offset") - F.col("log_end_offset")).alias("lag_offsets"),
        # -1: never caught up under this leader, so no time since to count
        F.when(F.col("lag_ms") >= 0, F.col("lag_ms")).alias("lag_ms"))


def follower_lag_summary(lag: DataFrame) -> DataFrame:
    quantiles = F.array(F.lit(0.5), F.lit(0.9), F.lit(0.99))
    return (lag.groupBy(*TP, "replica")
            .agg(F.count("*").alias("samples"),
                 F.percentile_approx("lag_offsets", quantiles).alias("lag_offsets_p50_p90_p99"),
                 F.max("lag_offsets").alias("lag_offsets_max"),
                 F.percentile_approx("lag_ms", quantiles).alias("lag_ms_p50_p90_p99"),
                 F.max("lag_ms").alias("lag_ms_max"))
            .orderBy(*TP, "replica"))


# --- ISR churn and under-replication --------------------------------------------------------------------

def isr_membership_changes(timeline: DataFrame) -> DataFrame:
    """One row per replica leaving or joining an ISR (whoever wrote it: a leader's shrink/expand or the
    controller removing a dead broker), with the lag the leader reported for it."""
    previous = F.coalesce(F.col("previous_isr"), F.array().cast(LONG_ARRAY))
    changes = (timeline.where(F.col("previous_isr").isNotNull())
               .withColumn("left", F.array_except(previous, F.col("isr")))
               .withColumn("joined", F.array_except(F.col("isr"), previous)))

    def exploded(column: str, kind: str) -> DataFrame:
        return changes.select(*TP, "ts_ms", "zk_version", "change", "reason", "lags",
                              F.explode(column).alias("replica"), F.lit(kind).alias("kind"))

    rows = exploded("left", "shrink").unionByName(exploded("joined", "expand"))
    lag = F.filter("lags", lambda entry: entry["replica"] == F.col("replica"))
    return (rows.withColumn("lag_offsets", F.element_at(lag, 1)["lag_offsets"])
            .withColumn("lag_ms", F.element_at(lag, 1)["lag_ms"]).drop("lags"))


def isr_churn(timeline: DataFrame, end_ms: float) -> tuple[DataFrame, DataFrame]:
    """(counts per partition, out-of-ISR periods per replica). A period starts when a replica leaves the
    ISR and ends when it rejoins; one still open at the end of the trace has ``rejoined`` false."""
    changes = isr_membership_changes(timeline)
    counts = (changes.groupBy(*TP)
              .agg(F.sum(F.when(F.col("kind") == "shrink", 1).otherwise(0)).alias("replicas_left"),
                   F.sum(F.when(F.col("kind") == "expand", 1).otherwise(0)).alias("replicas_joined"),
                   F.countDistinct(F.when(F.col("kind") == "shrink", F.col("zk_version"))).alias("shrinks"),
                   F.countDistinct(F.when(F.col("kind") == "expand", F.col("zk_version"))).alias("expands")))
    window = Window.partitionBy(*TP, "replica").orderBy("zk_version")
    periods = (changes
               .withColumn("next_kind", F.lead("kind").over(window))
               .withColumn("next_ms", F.lead("ts_ms").over(window))
               .where(F.col("kind") == "shrink")
               .select(*TP, "replica", F.col("ts_ms").alias("left_ms"), F.col("reason").alias("left_because"),
                       "lag_offsets", "lag_ms",
                       (F.col("next_kind") == "expand").alias("rejoined"),
                       (F.coalesce(F.when(F.col("next_kind") == "expand", F.col("next_ms")), F.lit(float(end_ms)))
                        - F.col("ts_ms")).alias("out_of_isr_ms")))
    return counts, periods


def under_replicated_time(timeline: DataFrame, end_ms: float) -> DataFrame:
    """Per partition: time with fewer in-sync replicas than assigned, and time without a leader."""
    intervals = state_intervals(timeline, end_ms)
    observed = F.max("until_ms") - F.min("ts_ms")
    return (intervals.groupBy(*TP)
            .agg(F.sum(F.when(F.col("under_replicated"), F.col("duration_ms")).otherwise(0.0))
                 .alias("under_replicated_ms"),
                 F.sum(F.when(F.col("offline"), F.col("duration_ms")).otherwise(0.0)).alias("offline_ms"),
                 observed.alias("observed_ms"),
                 F.sum(F.when(F.col("under_replicated"), 1).otherwise(0)).alias("under_replicated_states"))
            .orderBy(*TP))


# --- failovers ------------------------------------------------------------------------------------------

def leader_changes(timeline: DataFrame) -> DataFrame:
    """Controller decisions that moved leadership from one live broker id to another."""
    return timeline.where((F.col("change").isin("offline", "unclean", "controlled_shutdown"))
                          & (F.col("previous_leader") >= 0) & (F.col("leader") >= 0)
                          & (F.col("leader") != F.col("previous_leader")))


def _latest_before(changes: DataFrame, found: DataFrame, match: Column, name: str, keys: list[str]) -> DataFrame:
    joined = changes.join(found, match, "left")
    return joined.groupBy(*keys).agg(F.max("found_ms").alias(name))


def failover_breakdown(events: DataFrame, timeline: DataFrame) -> DataFrame:
    """Per leader change, when each step happened and how long each phase took:

    process death (a fault injected on the old leader) -> session expiry (the controller saw its
    registration go, or, when the old leader was the controller, a new controller was elected) -> controller
    decision (the new leader written) -> LeaderAndIsr applied (the new
    leader took the role) -> first acknowledged produce on the new leader.

    The phases are differences of consecutive steps, so with every step present they add up to the
    total; a step the run did not have (no fault: a controlled shutdown) is null and so are its phases."""
    keys = [*TP, "leader_epoch", "leader", "previous_leader", "decided_ms", "change"]
    changes = leader_changes(timeline).select(*TP, "leader_epoch", "leader", "previous_leader",
                                              F.col("ts_ms").alias("decided_ms"), "change")
    deaths = of(events, "fault_injected").where(~F.col("action").isin(*NOT_A_DEATH)).select(
        F.col("broker_id").alias("victim"), F.col("ts_ms").alias("found_ms"))
    step = _latest_before(changes, deaths, (F.col("victim") == F.col("previous_leader"))
                          & (F.col("found_ms") <= F.col("decided_ms"))
                          & (F.col("found_ms") > F.col("decided_ms") - FAULT_WINDOW_MS), "death_ms", keys)
    keys.append("death_ms")
    # The controller learns of the death when the broker's registration goes. If the dead broker was the
    # controller itself, the same session expiry shows as a new controller elected after the death.
    expiries = of(events, "broker_expired", "controller_elected").select(
        F.col("expired_broker"), F.col("ts_ms").alias("found_ms"))
    step = _latest_before(step, expiries, ((F.col("expired_broker") == F.col("previous_leader"))
                                           | (F.col("expired_broker").isNull() & F.col("death_ms").isNotNull()))
                          & (F.col("found_ms") <= F.col("decided_ms"))
                          & (F.col("found_ms") > F.col("decided_ms") - FAULT_WINDOW_MS)
                          & (F.col("death_ms").isNull() | (F.col("found_ms") >= F.col("death_ms"))),
                          "expiry_ms", keys)
    keys.append("expiry_ms")
    roles = of(events, "replica_role_changed").where(F.col("role") == "leader").select(
        F.col("broker_id").alias("new_leader"), F.col("topic").alias("r_topic"),
        F.col("partition").alias("r_partition"), F.col("leader_epoch").alias("r_epoch"),
        F.col("ts_ms").alias("found_ms"))
    applied = (step.join(roles, (F.col("new_leader") == F.col("leader")) & (F.col("r_topic") == F.col("topic"))
                         & (F.col("r_partition") == F.col("partition")) & (F.col("r_epoch") == F.col("leader_epoch")),
                         "left")
               .groupBy(*keys).agg(F.min("found_ms").alias("applied_ms")))
    keys.append("applied_ms")
    # only the acknowledgements by a new leader of its partition: a small broadcast side keeps the
    # range join below from pairing every change with every produce of the run
    new_leaders = F.broadcast(changes.select(F.col("leader").alias("broker_id"), *TP).distinct())
    acks = (of(events, "produce_acknowledged").where(F.col("error") == "none")
            .join(new_leaders, ["broker_id", *TP], "left_semi")
            .select(F.col("broker_id").alias("acked_by"), F.col("topic").alias("a_topic"),
                    F.col("partition").alias("a_partition"), F.col("ts_ms").alias("found_ms")))
    first_ack = (applied.join(acks, (F.col("acked_by") == F.col("leader")) & (F.col("a_topic") == F.col("topic"))
                              & (F.col("a_partition") == F.col("partition"))
                              & (F.col("found_ms") >= F.col("applied_ms")), "left")
                 .groupBy(*keys).agg(F.min("found_ms").alias("first_ack_ms")))
    return (first_ack
            .withColumn("detection_ms", F.col("expiry_ms") - F.col("death_ms"))
            .withColumn("election_ms", F.col("decided_ms") - F.coalesce("expiry_ms", "death_ms"))
            .withColumn("propagation_ms", F.col("applied_ms") - F.col("decided_ms"))
            .withColumn("first_write_ms", F.col("first_ack_ms") - F.col("applied_ms"))
            .withColumn("total_ms", F.col("first_ack_ms") - F.coalesce("death_ms", "expiry_ms", "decided_ms"))
            .orderBy("decided_ms", *TP))


# --- truncations and lost writes --------------------------------------------------------------------------

def records_written(events: DataFrame) -> DataFrame:
    """Per partition, the highest log end offset any replica traced: how much was written to it."""
    return of(events, "high_watermark_updated").groupBy(*TP).agg(F.max("log_end_offset").alias("records"))


def injected_faults(events: DataFrame) -> DataFrame:
    """Every fault the tools injected (kill, pause, cut, fill, ...) and what undid it, for marking on time axes."""
    return of(events, "fault_injected").select("ts_ms", "action", "target", "broker_id").orderBy("ts_ms")


def truncations(events: DataFrame) -> DataFrame:
    return of(events, "follower_truncated").select(
        F.col("broker_id").alias("replica"), *TP, "ts_ms", "rule", "leader", "leader_epoch", "from_offset",
        "to_offset", (F.col("from_offset") - F.col("to_offset")).alias("records_removed"), "bytes_dropped"
    ).orderBy("ts_ms")


def truncation_totals(truncated: DataFrame) -> DataFrame:
    return (truncated.groupBy(*TP, "replica")
            .agg(F.count("*").alias("truncations"), F.sum("records_removed").alias("records_removed"),
                 F.sum("bytes_dropped").alias("bytes_dropped"))
            .orderBy(*TP, "replica"))


def final_replicas(final_logs: DataFrame, timeline: DataFrame | None) -> DataFrame:
    """Which replica's log is the partition's final log: the last leader ZooKeeper named, when its log was
    collected; otherwise (offline partition, no traces) the replica holding the most records."""
    held = final_logs.groupBy(*TP, "broker").agg(F.count("*").alias("records"))
    by_size = (held.withColumn("rank", F.row_number().over(
        Window.partitionBy(*TP).orderBy(F.desc("records"), "broker"))).where(F.col("rank") == 1)
        .select(*TP, F.col("broker").alias("largest")))
    if timeline is None:
        return by_size.select(*TP, F.col("largest").alias("broker"))
    last = (timeline.withColumn("rank", F.row_number().over(
        Window.partitionBy(*TP).orderBy(F.desc("zk_version"), F.desc("ts_ms")))).where(F.col("rank") == 1)
        .select(*TP, F.col("leader").alias("final_leader")))
    collected = held.select(*TP, F.col("broker").alias("final_leader"))
    leaders = last.join(collected, [*TP, "final_leader"], "inner")
    return (by_size.join(leaders, TP, "left")
            .select(*TP, F.coalesce("final_leader", "largest").alias("broker")))


def missing_writes(history: DataFrame, final_logs: DataFrame, timeline: DataFrame | None = None) -> DataFrame:
    """Acknowledged values absent from their partition's final log, with what that offset holds now."""
    chosen = final_replicas(final_logs, timeline)
    final = final_logs.join(chosen, [*TP, "broker"], "inner")
    acknowledged = history.select(*TP, F.col("offset").alias("acknowledged_offset"), "value",
                                  F.col("ts_ms").alias("acknowledged_ms"))
    missing = acknowledged.join(final.select(*TP, "value"), [*TP, "value"], "left_anti")
    now_there = final.select(*TP, F.col("offset").alias("acknowledged_offset"), F.col("value").alias("now_at_offset"),
                             F.col("broker").alias("final_replica"))
    return (missing.join(now_there, [*TP, "acknowledged_offset"], "left")
            .orderBy(*TP, "acknowledged_offset"))


def dropped_events(events: DataFrame) -> DataFrame:
    """Per writing process, the events its trace writer had to drop (the last count it reported)."""
    return (of(events, "trace_events_dropped").groupBy("broker_id")
            .agg(F.max("dropped_total").alias("dropped")).orderBy("broker_id"))
