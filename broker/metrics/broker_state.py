"""Copies what the metrics report out of the broker's live objects. Runs on the event loop (``on_loop``):
it reads dicts and Partitions the loop changes, and returns plain data only."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from broker.clientplane.network import SocketServer
from broker.log.cleaner.log_cleaner import LogCleaner
from broker.metadata_cache import MetadataCache
from broker.metrics.snapshot import BrokerSnapshot, PartitionSample, RequestTimes
from broker.metrics.topic_stats import IsrStats
from broker.purgatory.purgatory import DelayedOperationPurgatory
from broker.replication.partition import Partition
from broker.replication.replica_fetcher import ReplicaFetcherManager
from broker.replication.replica_manager import ReplicaIO, ReplicaManager
from controller.controller import KafkaController
from controller.preferred_election import preferred_replica_imbalance_count


def sample_partition(partition: Partition, min_insync_replicas: int) -> PartitionSample:
    log = partition.log
    segments = getattr(log, "segments", None)
    followers = ()
    if partition.is_leader:
        followers = tuple((f.broker_id, f.log_end_offset) for f in partition.followers.values())
    return PartitionSample(
        topic=partition.topic, partition=partition.partition, is_leader=partition.is_leader,
        log_start_offset=log.log_start_offset, log_end_offset=log.log_end_offset,
        high_watermark=partition.high_watermark, size_bytes=getattr(log, "size_in_bytes", 0),
        num_segments=len(segments) if segments is not None else 0,
        replicas=tuple(partition.replicas), isr=tuple(partition.isr), min_insync_replicas=min_insync_replicas,
        follower_log_end_offsets=followers)


def snapshot_broker(*, broker_id: int, replica_manager: ReplicaManager, replica_io: ReplicaIO,
                    min_insync_replicas: Callable[[Partition], int], isr_stats: IsrStats,
                    socket_server: SocketServer, metadata_cache: MetadataCache,
                    controller: KafkaController | None, fetchers: ReplicaFetcherManager,
                    purgatories: Iterable[DelayedOperationPurgatory],
                    cleaner: LogCleaner | None = None) -> BrokerSnapshot:
    partitions = [sample_partition(p, min_insync_replicas(p)) for p in list(replica_io.hosted.values())]
    active = controller is not None and controller.is_active
    ctx = controller.ctx if active else None
    controller_epoch = max(replica_manager.highest_controller_epoch, metadata_cache.highest_controller_epoch,
                           ctx.epoch if ctx is not None else 0)
    metrics = socket_server.metrics
    purgatories = list(purgatories)
    return BrokerSnapshot(
        broker_id=broker_id, broker_epoch=replica_manager.broker_epoch, controller_epoch=controller_epoch,
        active_controller=active, partitions=partitions, offline_replicas=len(replica_io.offline),
        offline_partitions=len(ctx.offline_partitions()) if ctx is not None else 0,
        preferred_replica_imbalance=preferred_replica_imbalance_count(ctx) if ctx is not None else 0,
        global_topic_count=len(ctx.assignments) if ctx is not None else 0,
        global_partition_count=sum(len(p) for p in ctx.assignments.values()) if ctx is not None else 0,
        isr=IsrStats(isr_stats.shrinks, isr_stats.expands, isr_stats.failed_updates),
        topics=replica_io.topic_stats.copy(),
        requests=dict(metrics.requests_by_version), errors=dict(metrics.errors_by_code),
        request_times={key: RequestTimes(r.count, r.values()) for key, r in list(metrics.times.items())},
        request_queue_size=socket_server.request_queue_size,
        replica_fetcher_max_lag=max((state.lag for fetcher in list(fetchers.fetchers.values())
                                     for state in list(fetcher.partitions.values())), default=0),
        purgatory_size={p.name: p.watched for p in purgatories},
        purgatory_delayed={p.name: p.num_delayed for p in purgatories},
        cleaner=cleaner.metrics() if cleaner is not None and cleaner.running else None)
