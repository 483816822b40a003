"""DescribeLogDirs (API 35): per log directory of this broker, the replicas it holds, their size on disk and
offset lag (Kafka's ReplicaManager.describeLogDirs). kafka-ui calls it to decide that a cluster is online;
kafka-log-dirs.sh prints it. AlterReplicaLogDirs (API 34): Kafka's checks of a move between this broker's log
dirs, answered without moving anything. Read only: no log, partition or segment is changed."""

from __future__ import annotations

import shutil
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import ClusterAccess
from broker.clientplane.handlers.common import NO_THROTTLE, response_module
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey

# what Kafka answers for a log without a hosted replica (DescribeLogDirsResponse.INVALID_OFFSET_LAG)
INVALID_OFFSET_LAG = -1
UNKNOWN_BYTES = -1


def offset_lag(cluster: ClusterAccess, tp: tuple[str, int], log_end_offset: int) -> int:
    """Kafka's getLogEndOffsetLag for a current (not future) log: how far the high watermark is ahead of the
    log end, never negative. A replica's high watermark never passes its own log end offset, so this is 0
    for leaders and followers alike; kafkasim has no future logs (AlterReplicaLogDirs), where it would not be."""
    partition = cluster.replica_io.hosted.get(tp)
    if partition is None:
        return INVALID_OFFSET_LAG
    return max(partition.high_watermark - log_end_offset, 0)


def volume_bytes(log_dir: Path) -> tuple[int, int]:
    """Total and usable bytes of the volume (v4, KIP-827): usable is what a non-root writer may still use,
    as Java's File.getUsableSpace."""
    try:
        usage = shutil.disk_usage(log_dir)
    except OSError:
        return UNKNOWN_BYTES, UNKNOWN_BYTES
    return usage.total, usage.free


async def handle_describe_log_dirs(cluster: ClusterAccess, request: Request):
    body = request.body
    module = response_module(ApiKey.DESCRIBE_LOG_DIRS, request.header.api_version)
    manager = cluster.log_manager
    logs = manager.logs
    wanted = None if body.topics is None else {(t.topic, p) for t in body.topics for p in t.partitions}
    results = []
    for log_dir in manager.log_dirs:
        path = str(log_dir.absolute())
        if log_dir not in manager.live_log_dirs:
            results.append(build(module.DescribeLogDirsResult, error_code=ErrorCode.kafka_storage_error,
                                 log_dir=path, topics=()))
            continue
        by_topic: dict[str, list] = {}
        for tp, log in sorted(logs.items()):
            if log.directory.parent != log_dir:
                continue
            # as Kafka 2.8: a topic held here is listed even when none of its partitions was asked for (with
            # no partitions), and a topic not held here is simply absent
            partitions = by_topic.setdefault(tp[0], [])
            if wanted is None or tp in wanted:
                partitions.append(build(module.DescribeLogDirsPartition, partition_index=tp[1],
                                        partition_size=log.size_in_bytes,
                                        offset_lag=offset_lag(cluster, tp, log.log_end_offset), is_future_key=False))
        total, usable = volume_bytes(log_dir)
        results.append(build(module.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=path,
                             topics=tuple(build(module.DescribeLogDirsTopic, name=name, partitions=tuple(partitions))
                                          for name, partitions in by_topic.items()),
                             total_bytes=total, usable_bytes=usable))
    return build(module.DescribeLogDirsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 results=tuple(results))


# Kafka's Log.logFutureDirName: "<topic>-<partition>.<32 hex uuid>-future", which must fit a file name
FUTURE_DIR_NAME_MAX = 255
FUTURE_DIR_SUFFIX_LEN = 1 + 32 + len("-future")


def alter_replica_log_dir_error(tp: tuple[str, int], destination: str, configured: list[str], live: list[str],
                                current_dir: str | None, offline: bool, known: bool) -> ErrorCode:
    """Kafka 2.8's ReplicaManager.alterReplicaLogDirs for one replica, in its order of checks, given the broker's
    configured and live log dirs (absolute paths), the replica's current dir (None: not hosted here), whether it
    is in an offline dir and whether the metadata knows the partition. kafkasim never moves a replica between
    its own log dirs (no future logs) and Kafka has no error for that: a move is refused with INVALID_REQUEST,
    not retriable, blaming neither a disk (KAFKA_STORAGE_ERROR) nor a missing replica (REPLICA_NOT_AVAILABLE,
    which kafka-reassign-partitions.sh retries until it times out)."""
    topic, partition = tp
    if len(f"{topic}-{partition}") + FUTURE_DIR_SUFFIX_LEN > FUTURE_DIR_NAME_MAX:
        return ErrorCode.invalid_topic_exception
    # LogManager.isLogDirOnline: the path sent must equal a configured dir's absolute path, character for
    # character (no normalisation of a trailing slash or of "..")
    if destination not in configured:
        return ErrorCode.log_dir_not_found
    if destination not in live or offline:
        return ErrorCode.kafka_storage_error
    if current_dir is None:
        # a partition elsewhere in the cluster: NOT_LEADER_OR_FOLLOWER, which Kafka answers as REPLICA_NOT_AVAILABLE
        # "for compatibility"; a partition the metadata does not know: UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.replica_not_available if known else ErrorCode.unknown_topic_or_partition
    if current_dir == destination:
        return ErrorCode.none  # Partition.maybeCreateFutureReplica: already there, nothing to do
    return ErrorCode.invalid_request


async def handle_alter_replica_log_dirs(cluster: ClusterAccess, request: Request):
    """AlterReplicaLogDirs (API 34): per replica, whether it may move to the named log dir of this broker.
    Nothing on disk changes: a replica already in the dir answers NONE, a move is refused (see above)."""
    module = response_module(ApiKey.ALTER_REPLICA_LOG_DIRS, request.header.api_version)
    manager = cluster.log_manager
    configured = [str(d.absolute()) for d in manager.log_dirs]
    live = [str(d.absolute()) for d in manager.live_log_dirs]
    # Kafka reads the request into a map: a partition named under two dirs gets the last one
    destinations: dict[tuple[str, int], str] = {}
    for log_dir in request.body.dirs:
        for topic in log_dir.topics:
            for partition in topic.partitions:
                destinations[(topic.name, partition)] = log_dir.path
    by_topic: dict[str, list] = {}
    for tp, destination in destinations.items():
        log = manager.logs.get(tp)
        current_dir = None if log is None or tp not in cluster.replica_io.hosted else str(log.log_dir.absolute())
        error = alter_replica_log_dir_error(tp, destination, configured, live, current_dir,
                                            offline=tp in cluster.replica_io.offline,
                                            known=tp in cluster.metadata_cache.partitions)
        by_topic.setdefault(tp[0], []).append(
            build(module.AlterReplicaLogDirPartitionResult, partition_index=tp[1], error_code=error))
    return build(module.AlterReplicaLogDirsResponse, throttle_time=NO_THROTTLE,
                 results=tuple(build(module.AlterReplicaLogDirTopicResult, topic_name=name, partitions=tuple(results))
                               for name, results in by_topic.items()))
