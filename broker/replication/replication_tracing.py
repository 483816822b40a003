"""The broker's high-rate replication traces, coalesced so tracing stays cheap: the leader's view of each
follower after its fetches, the replica fetches served, and the parked produces/fetches that finished.

Called from the loop only; the decisions of what to fold are in ``traces/coalesce.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker.replication.partition import LastStableOffsetReport, Partition, TxnMarkerAppended
from traces import events as te
from traces.coalesce import Coalescer, Tallies, Tally
from traces.writer import TraceWriter

TopicPartition = tuple[str, int]


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _since_caught_up(now_ms: int, last_caught_up_time_ms: int) -> int:
    # 0: never caught up under this leader (Kafka starts a replica outside the ISR there); -1 says so, where
    # now - 0 would be the machine's uptime
    return now_ms - last_caught_up_time_ms if last_caught_up_time_ms > 0 else -1


def replica_lags(partition: Partition, replicas: list[int], now_ms: int) -> list[te.ReplicaLag]:
    """How far behind ``replicas`` are right now, as the leader sees them (for an ISR change's trace)."""
    found = []
    for replica in replicas:
        follower = partition.followers.get(replica)
        if follower is None:
            continue
        found.append(te.ReplicaLag(replica=replica, log_end_offset=follower.log_end_offset,
                                   lag_offsets=max(0, partition.log_end_offset - follower.log_end_offset),
                                   lag_ms=_since_caught_up(now_ms, follower.last_caught_up_time_ms)))
    return found


class ReplicationTracer:
    def __init__(self, trace: TraceWriter, now_ms: Callable[[], int], interval_ms: int) -> None:
        self.trace = trace
        self.now_ms = now_ms
        self.interval_ms = interval_ms
        self._follower_states = Coalescer(interval_ms)
        self._fetches = Tallies(interval_ms)
        self._completions = Tallies(interval_ms)

    # --- the leader's view of its followers -------------------------------------------------------

    def follower_fetched(self, partition: Partition, replica: int, high_watermark_moved: bool,
                         previous_log_end_offset: int) -> None:
        if not self.trace.enabled:
            return
        follower = partition.followers.get(replica)
        if follower is None:
            return
        leader_leo = partition.log_end_offset
        if not high_watermark_moved and follower.log_end_offset == previous_log_end_offset >= leader_leo:
            # caught up before and still, nothing moved: the catching up was traced (forced below), and an idle
            # follower's fetches, twice a second per partition, were a third of an idle broker's CPU at 1000
            return
        now = self.now_ms()
        # never hide: an HW move, the first fetch in this epoch, or the follower catching up to the LEO
        force = (high_watermark_moved or previous_log_end_offset < 0
                 or (follower.log_end_offset >= leader_leo > previous_log_end_offset))
        folded = self._follower_states.admit((partition.topic_partition, replica), now, force=force)
        if folded is None:
            return
        self.trace.emit(te.FollowerFetchStateUpdated, topic=partition.topic, partition=partition.partition,
                        replica=replica, leader_epoch=partition.leader_epoch,
                        log_end_offset=follower.log_end_offset, leader_log_end_offset=leader_leo,
                        high_watermark=partition.high_watermark,
                        lag_ms=_since_caught_up(now, follower.last_caught_up_time_ms),
                        in_isr=replica in partition.isr, coalesced=folded)

    # --- replica fetches served ----------------------------------------------------------------------

    def fetch_served(self, follower: int, fetch_offsets: dict[TopicPartition, int], size: int,
                     wait_ms: float) -> None:
        if not self.trace.enabled:
            return
        # the partitions are named when the event is written, not on every fetch
        tally = self._fetches.add(follower, self.now_ms(), items=len(fetch_offsets), size=size, wait_ms=wait_ms,
                                  offsets=fetch_offsets)
        if tally is not None:
            self._emit_fetches(follower, tally)

    def _emit_fetches(self, follower: int, tally: Tally) -> None:
        self.trace.emit(te.FetchServed, follower=follower, fetches=tally.count, partitions=tally.items,
                        last_fetch_offsets={_name(tp): offset for tp, offset in tally.last_offsets.items()},
                        bytes=tally.bytes,
                        wait_ms_total=round(tally.wait_ms_total, 3), wait_ms_max=round(tally.wait_ms_max, 3))

    # --- purgatories ---------------------------------------------------------------------------------

    def delayed_finished(self, purgatory: str, expired: bool, partitions: list[TopicPartition]) -> None:
        if not self.trace.enabled:
            return
        if expired and purgatory == "Produce":  # rare and telling: one event each, with what it waited on
            self.trace.emit(te.DelayedOperationFinished, purgatory=purgatory, outcome="expired", count=1,
                            waited_on=[_name(tp) for tp in partitions])
            return
        # completions, and idle long polls running out (the normal end of a fetch), are summed
        key = (purgatory, "expired" if expired else "completed")
        tally = self._completions.add(key, self.now_ms())
        if tally is not None:
            self._emit_completions(key, tally)

    def _emit_completions(self, key: tuple[str, str], tally: Tally) -> None:
        self.trace.emit(te.DelayedOperationFinished, purgatory=key[0], outcome=key[1], count=tally.count,
                        waited_on=[])

    # --- transactions (one event each: markers are per transaction, LSO reports only while one is open) ---

    def txn_marker_written(self, partition: Partition, marker: TxnMarkerAppended) -> None:
        self.trace.emit(te.TxnMarkerWritten, topic=partition.topic, partition=partition.partition,
                        producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                        marker="ABORT" if marker.aborted else "COMMIT", offset=marker.offset,
                        coordinator_epoch=marker.coordinator_epoch)

    def last_stable_offset_changed(self, partition: Partition, report: LastStableOffsetReport) -> None:
        self.trace.emit(te.LastStableOffsetChanged, topic=partition.topic, partition=partition.partition,
                        last_stable_offset=report.last_stable_offset, high_watermark=report.high_watermark,
                        open_transactions=report.open_transactions)

    # --- quiet spells and shutdown -------------------------------------------------------------------

    def flush(self, everything: bool = False) -> None:
        now = self.now_ms()
        for follower, tally in (self._fetches.drain() if everything else self._fetches.due(now)).items():
            self._emit_fetches(follower, tally)
        for key, tally in (self._completions.drain() if everything else self._completions.due(now)).items():
            self._emit_completions(key, tally)

    async def flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(max(self.interval_ms, 100) / 1000)
            self.flush()
