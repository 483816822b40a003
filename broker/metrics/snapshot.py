"""What one scrape reports, as plain data: taken on the broker's event loop in one go (nothing the loop
mutates is read from another thread), then turned into Prometheus families off the loop by ``collector.py``."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.log.cleaner.log_cleaner import CleanerMetrics
from broker.metrics.topic_stats import BrokerTopicStats, IsrStats


@dataclass(frozen=True)
class PartitionSample:
    topic: str
    partition: int
    is_leader: bool
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    num_segments: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    min_insync_replicas: int
    follower_log_end_offsets: tuple[tuple[int, int], ...] = ()  # (follower, its LEO as the leader knows it)

    @property
    def under_replicated(self) -> bool:
        # Kafka's Partition.isUnderReplicated: only the leader knows, and says so
        return self.is_leader and len(self.isr) < len(self.replicas)

    @property
    def under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.min_insync_replicas

    @property
    def at_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) == self.min_insync_replicas


@dataclass(frozen=True)
class RequestTimes:
    count: int
    values: list[float]


@dataclass(frozen=True)
class BrokerSnapshot:
    broker_id: int
    broker_epoch: int
    controller_epoch: int               # the highest this broker has seen (its own while it is the controller)
    active_controller: bool
    partitions: list[PartitionSample] = field(default_factory=list)
    offline_replicas: int = 0
    offline_partitions: int = 0         # only the active controller counts them, as in Kafka
    preferred_replica_imbalance: int = 0  # the same
    global_topic_count: int = 0
    global_partition_count: int = 0
    isr: IsrStats = field(default_factory=IsrStats)
    topics: BrokerTopicStats = field(default_factory=BrokerTopicStats)
    requests: dict[tuple[str, int], int] = field(default_factory=dict)          # (API, version) -> count
    errors: dict[tuple[str, str], int] = field(default_factory=dict)            # (API, error) -> count
    request_times: dict[tuple[str, str], RequestTimes] = field(default_factory=dict)  # (metric, API)
    request_queue_size: int = 0
    replica_fetcher_max_lag: int = 0    # over the partitions this broker follows
    purgatory_size: dict[str, int] = field(default_factory=dict)                # delayed operation -> watched
    purgatory_delayed: dict[str, int] = field(default_factory=dict)             # delayed operation -> pending
    cleaner: CleanerMetrics | None = None  # None when the log cleaner does not run (log.cleaner.enable=false)


def on_loop(loop: asyncio.AbstractEventLoop, take: Callable[[], BrokerSnapshot],
            timeout_s: float = 5.0) -> BrokerSnapshot:
    """Runs ``take`` on the event loop and waits for it from the calling (scrape) thread: the loop's
    dicts and Partitions are copied between two of its steps, never while a step is changing them."""
    future: concurrent.futures.Future[BrokerSnapshot] = concurrent.futures.Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(take())
        except BaseException as exc:
            future.set_exception(exc)

    loop.call_soon_threadsafe(run)
    try:
        return future.result(timeout_s)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"the broker's event loop did not answer the scrape within {timeout_s:.0f} s") from None
