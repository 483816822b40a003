"""DescribeLogDirs (API 35): per log directory of this broker, the replicas it holds, their size on disk and
offset lag (Kafka's ReplicaManager.describeLogDirs). kafka-ui calls it to decide that a cluster is online;
kafka-log-dirs.sh prints it. Read only: no log, partition or segment is changed."""

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
