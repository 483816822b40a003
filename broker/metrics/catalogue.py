"""Every metric a broker exports: its Prometheus name (built from the Kafka MBean by ``names.py``), kind,
labels and meaning. ``docs/metrics.md`` lists the same names; a test keeps the two in step."""

from __future__ import annotations

from dataclasses import dataclass

from broker.metrics.names import Kind, exporter_name


@dataclass(frozen=True)
class MetricDef:
    name: str                  # the Prometheus family name (a meter's ends in _total)
    kind: Kind
    labels: tuple[str, ...]
    help: str
    mbean: str | None = None   # the Kafka MBean it mirrors; None for kafkasim's own


def kafka(domain: str, mbean_type: str, name: str, kind: Kind, labels: tuple[str, ...], text: str) -> MetricDef:
    tags = "".join(f",{label}=..." for label in labels if label not in ("quantile",))
    return MetricDef(exporter_name(domain, mbean_type, name, kind), kind, labels, text,
                     f"{domain}:type={mbean_type},name={name}{tags}")


def own(name: str, kind: Kind, labels: tuple[str, ...], text: str) -> MetricDef:
    return MetricDef(name, kind, labels, text)


G, M, H = Kind.GAUGE, Kind.METER, Kind.HISTOGRAM
TP = ("topic", "partition")

# kafka.server:type=ReplicaManager
UNDER_REPLICATED = kafka("kafka.server", "ReplicaManager", "UnderReplicatedPartitions", G, (),
                         "Partitions led here whose ISR is smaller than their replica list")
PARTITION_COUNT = kafka("kafka.server", "ReplicaManager", "PartitionCount", G, (), "Partition replicas hosted here")
LEADER_COUNT = kafka("kafka.server", "ReplicaManager", "LeaderCount", G, (), "Partitions led here")
OFFLINE_REPLICAS = kafka("kafka.server", "ReplicaManager", "OfflineReplicaCount", G, (),
                         "Replicas in a failed log directory")
UNDER_MIN_ISR = kafka("kafka.server", "ReplicaManager", "UnderMinIsrPartitionCount", G, (),
                      "Partitions led here with fewer in-sync replicas than min.insync.replicas")
AT_MIN_ISR = kafka("kafka.server", "ReplicaManager", "AtMinIsrPartitionCount", G, (),
                   "Partitions led here with exactly min.insync.replicas in-sync replicas")
ISR_SHRINKS = kafka("kafka.server", "ReplicaManager", "IsrShrinksPerSec", M, (),
                    "ISR shrinks this broker wrote as leader")
ISR_EXPANDS = kafka("kafka.server", "ReplicaManager", "IsrExpandsPerSec", M, (),
                    "ISR expands this broker wrote as leader")
FAILED_ISR_UPDATES = kafka("kafka.server", "ReplicaManager", "FailedIsrUpdatesPerSec", M, (),
                           "ISR changes ZooKeeper refused (stale zkVersion)")

# kafka.controller:type=KafkaController (only the active controller reports non-zero)
ACTIVE_CONTROLLER = kafka("kafka.controller", "KafkaController", "ActiveControllerCount", G, (),
                          "1 on the active controller, 0 elsewhere")
OFFLINE_PARTITIONS = kafka("kafka.controller", "KafkaController", "OfflinePartitionsCount", G, (),
                           "Partitions without a live leader (active controller only)")
PREFERRED_IMBALANCE = kafka("kafka.controller", "KafkaController", "PreferredReplicaImbalanceCount", G, (),
                            "Partitions not led by their preferred replica (active controller only)")
GLOBAL_TOPICS = kafka("kafka.controller", "KafkaController", "GlobalTopicCount", G, (),
                      "Topics in the cluster (active controller only)")
GLOBAL_PARTITIONS = kafka("kafka.controller", "KafkaController", "GlobalPartitionCount", G, (),
                          "Partitions in the cluster (active controller only)")

# kafka.server:type=BrokerTopicMetrics: the all-topics sample has no label, the per-topic ones a topic label
BYTES_IN = kafka("kafka.server", "BrokerTopicMetrics", "BytesInPerSec", M, ("topic",),
                 "Record-batch bytes producers sent that a leader here appended")
MESSAGES_IN = kafka("kafka.server", "BrokerTopicMetrics", "MessagesInPerSec", M, ("topic",),
                    "Records in those batches")
BYTES_OUT = kafka("kafka.server", "BrokerTopicMetrics", "BytesOutPerSec", M, ("topic",),
                  "Record bytes sent to consumers")
TOTAL_PRODUCE = kafka("kafka.server", "BrokerTopicMetrics", "TotalProduceRequestsPerSec", M, ("topic",),
                      "Partition appends asked of this broker by producers")
FAILED_PRODUCE = kafka("kafka.server", "BrokerTopicMetrics", "FailedProduceRequestsPerSec", M, ("topic",),
                       "Those that failed")
TOTAL_FETCH = kafka("kafka.server", "BrokerTopicMetrics", "TotalFetchRequestsPerSec", M, ("topic",),
                    "Partition reads served to consumers")
FAILED_FETCH = kafka("kafka.server", "BrokerTopicMetrics", "FailedFetchRequestsPerSec", M, ("topic",),
                     "Those answered with an error")
REPLICATION_BYTES_OUT = kafka("kafka.server", "BrokerTopicMetrics", "ReplicationBytesOutPerSec", M, (),
                              "Record bytes sent to followers")

# kafka.network
REQUESTS = kafka("kafka.network", "RequestMetrics", "RequestsPerSec", M, ("request", "version"),
                 "Requests handled, by API and version")
ERRORS = kafka("kafka.network", "RequestMetrics", "ErrorsPerSec", M, ("request", "error"),
               "Requests by the error they ended with (NONE included)")
REQUEST_TIMES = {
    metric: kafka("kafka.network", "RequestMetrics", metric, H, ("request", "quantile"), text)
    for metric, text in (
        ("TotalTimeMs", "Time from receiving the request to sending the response, ms"),
        ("RequestQueueTimeMs", "Time waiting in the request queue, ms"),
        ("LocalTimeMs", "Time in the handler, ms"),
        ("RemoteTimeMs", "Time waiting in a purgatory (acks=all produce, long-poll fetch), ms"),
        ("ResponseSendTimeMs", "Time writing the response, ms"),
    )
}
REQUEST_QUEUE_SIZE = kafka("kafka.network", "RequestChannel", "RequestQueueSize", G, (),
                           "Requests waiting for a handler")
PURGATORY_SIZE = kafka("kafka.server", "DelayedOperationPurgatory", "PurgatorySize", G, ("delayedOperation",),
                       "Entries in the purgatory's watcher lists (completed ones not yet purged included)")
MAX_LAG = kafka("kafka.server", "ReplicaFetcherManager", "MaxLag", G, ("clientId",),
                "The largest lag of the partitions this broker follows: the leader's high watermark minus its "
                "log end offset after the last fetch, in offsets")
NUM_DELAYED = kafka("kafka.server", "DelayedOperationPurgatory", "NumDelayedOperations", G, ("delayedOperation",),
                    "Operations waiting in the purgatory")

# kafka.log:type=Log and kafka.cluster:type=Partition, per partition replica hosted here
LOG_END_OFFSET = kafka("kafka.log", "Log", "LogEndOffset", G, TP, "The replica's log end offset")
LOG_START_OFFSET = kafka("kafka.log", "Log", "LogStartOffset", G, TP, "The replica's log start offset")
LOG_SIZE = kafka("kafka.log", "Log", "Size", G, TP, "Bytes in the replica's segments")
LOG_SEGMENTS = kafka("kafka.log", "Log", "NumLogSegments", G, TP, "Segments of the replica's log")
PARTITION_UNDER_REPLICATED = kafka("kafka.cluster", "Partition", "UnderReplicated", G, TP,
                                   "1 if led here and under-replicated")
PARTITION_ISR_COUNT = kafka("kafka.cluster", "Partition", "InSyncReplicasCount", G, TP,
                            "In-sync replicas (on the leader; 0 elsewhere)")
PARTITION_REPLICAS_COUNT = kafka("kafka.cluster", "Partition", "ReplicasCount", G, TP,
                                 "Assigned replicas (on the leader; 0 elsewhere)")
PARTITION_UNDER_MIN_ISR = kafka("kafka.cluster", "Partition", "UnderMinIsr", G, TP,
                                "1 if led here with fewer in-sync replicas than min.insync.replicas")
PARTITION_AT_MIN_ISR = kafka("kafka.cluster", "Partition", "AtMinIsr", G, TP,
                             "1 if led here with exactly min.insync.replicas in-sync replicas")

# kafka.log:type=LogCleaner and type=LogCleanerManager (only while the cleaner runs, as Kafka creates it only then)
CLEANER_BUFFER = kafka("kafka.log", "LogCleaner", "max-buffer-utilization-percent", G, (),
                       "The fullest offset map of the cleaner threads' last cleanings, percent")
CLEANER_RECOPY = kafka("kafka.log", "LogCleaner", "cleaner-recopy-percent", G, (),
                       "Bytes written over bytes read by the cleaner threads' last cleanings, percent")
CLEANER_MAX_TIME = kafka("kafka.log", "LogCleaner", "max-clean-time-secs", G, (),
                         "The longest of the cleaner threads' last cleanings, seconds")
CLEANER_MAX_DELAY = kafka("kafka.log", "LogCleaner", "max-compaction-delay-secs", G, (),
                          "How far past max.compaction.lag.ms the oldest dirty record was when a thread last chose "
                          "a log, seconds")
CLEANER_DEAD_THREADS = kafka("kafka.log", "LogCleaner", "DeadThreadCount", G, (), "Cleaner threads that died")
CLEANER_MAX_DIRTY = kafka("kafka.log", "LogCleanerManager", "max-dirty-percent", G, (),
                          "The highest dirty ratio of the compacted logs at the last choice, percent")
CLEANER_SINCE_RUN = kafka("kafka.log", "LogCleanerManager", "time-since-last-run-ms", G, (),
                          "Milliseconds since a cleaner thread last looked for a log to clean")
UNCLEANABLE_PARTITIONS = kafka("kafka.log", "LogCleanerManager", "uncleanable-partitions-count", G,
                               ("logDirectory",), "Partitions whose cleaning failed (skipped until a restart)")
UNCLEANABLE_BYTES = kafka("kafka.log", "LogCleanerManager", "uncleanable-bytes", G, ("logDirectory",),
                          "Cleanable bytes of those partitions")
CLEANER = [CLEANER_BUFFER, CLEANER_RECOPY, CLEANER_MAX_TIME, CLEANER_MAX_DELAY, CLEANER_DEAD_THREADS,
           CLEANER_MAX_DIRTY, CLEANER_SINCE_RUN, UNCLEANABLE_PARTITIONS, UNCLEANABLE_BYTES]

# kafkasim's own: Kafka 2.x has no MBean for these
HIGH_WATERMARK = own("kafkasim_partition_highwatermark", G, TP,
                     "The replica's high watermark (the leader's, or what a follower last learnt, capped by its LEO)")
FOLLOWER_LAG = own("kafkasim_partition_follower_lag", G, (*TP, "replica"),
                   "On the leader: its LEO minus the follower's LEO, in offsets (followers heard from this epoch)")
BROKER_EPOCH = own("kafkasim_server_broker_epoch", G, (),
                   "This broker's epoch: the czxid of its /brokers/ids registration")
CONTROLLER_EPOCH = own("kafkasim_controller_epoch", G, (),
                       "The highest controller epoch this broker has seen (its own while it is the controller)")

ALL: list[MetricDef] = [
    UNDER_REPLICATED, PARTITION_COUNT, LEADER_COUNT, OFFLINE_REPLICAS, UNDER_MIN_ISR, AT_MIN_ISR,
    ISR_SHRINKS, ISR_EXPANDS, FAILED_ISR_UPDATES,
    ACTIVE_CONTROLLER, OFFLINE_PARTITIONS, PREFERRED_IMBALANCE, GLOBAL_TOPICS, GLOBAL_PARTITIONS,
    BYTES_IN, MESSAGES_IN, BYTES_OUT, TOTAL_PRODUCE, FAILED_PRODUCE, TOTAL_FETCH, FAILED_FETCH, REPLICATION_BYTES_OUT,
    REQUESTS, ERRORS, *REQUEST_TIMES.values(), REQUEST_QUEUE_SIZE, PURGATORY_SIZE, NUM_DELAYED, MAX_LAG,
    LOG_END_OFFSET, LOG_START_OFFSET, LOG_SIZE, LOG_SEGMENTS,
    PARTITION_UNDER_REPLICATED, PARTITION_ISR_COUNT, PARTITION_REPLICAS_COUNT, PARTITION_UNDER_MIN_ISR,
    PARTITION_AT_MIN_ISR,
    *CLEANER,
    HIGH_WATERMARK, FOLLOWER_LAG, BROKER_EPOCH, CONTROLLER_EPOCH,
]
