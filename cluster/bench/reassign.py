"""``kafkasim bench reassign``: a partition of SIZE MiB on brokers 1, 2, 3 of a fresh 4-broker cluster is moved to
2, 3, 4 (KIP-455, AlterPartitionReassignments through kafka-python's KafkaAdminClient); the figure is the time from
the request to the topic znode listing the target alone, and the bytes broker 4 copied."""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition

from cluster.bench.cluster_run import poll_until, temporary_cluster
from cluster.bench.client_kit import THROUGHPUT_PRODUCER
from cluster.bench.measure import MIB, throughput_mib_s
from cluster.bench.options import positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.replication_run import partition_log_bytes
from cluster.bench.report import Figure, Phase, Report
from cluster.processes import ClusterError
from zk.admin import create_topic
from zk.client import connected
from zk.znodes import TopicZNode

TOPIC = "reassign-bench"
ORIGINAL, TARGET = [1, 2, 3], [2, 3, 4]
VALUE_BYTES = 10_000
SEGMENT_BYTES = 128 * MIB


async def _create(connect: str) -> None:
    async with connected(connect) as zk:
        await create_topic(zk, TOPIC, 1, len(ORIGINAL), {"segment.bytes": str(SEGMENT_BYTES)},
                           assignment={0: ORIGINAL})


async def _assignment(connect: str) -> tuple[list[int], bool]:
    async with connected(connect) as zk:
        data, _ = await zk.get(TopicZNode.path(TOPIC))
    body = TopicZNode.decode(TOPIC, data)
    return body.partitions[0], bool(body.adding_replicas or body.removing_replicas)


def _fill(bootstrap: str, size_mib: int, progress: Progress) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, **THROUGHPUT_PRODUCER, "acks": "all"})
    value = os.urandom(VALUE_BYTES)
    errors: list = []
    count = size_mib * MIB // VALUE_BYTES
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=0,
                                 on_delivery=lambda error, _: error is not None and errors.append(error))
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20000 == 0 and i:
            progress.say(f"  {i * VALUE_BYTES // MIB} MiB written")
    if producer.flush(600) or errors:
        raise ClusterError(f"filling {TOPIC} failed: {errors[:3] or 'not all writes were answered'}")
    return count * VALUE_BYTES


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size-mib", type=positive_int, default=1024,
                        help="the partition's size before it moves (default 1024: 1 GiB)")
    parser.add_argument("--timeout", type=positive_int, default=1800, metavar="SECONDS",
                        help="how long the fill and the move may each take (default 1800)")


def run(args: argparse.Namespace, progress: Progress) -> Report:
    settings = {"size_mib": args.size_mib, "original": ORIGINAL, "target": TARGET, "value_bytes": VALUE_BYTES}
    with temporary_cluster(brokers=4, say=progress.say,
                           overrides={"auto.leader.rebalance.enable": "false"}) as (spec, layout):
        asyncio.run(_create(spec.zookeeper))
        progress.say(f"writing {args.size_mib} MiB to {TOPIC}-0 on brokers {ORIGINAL} (acks=all) ...")
        started = time.monotonic()
        written = _fill(spec.bootstrap_servers, args.size_mib, progress)
        fill_s = time.monotonic() - started
        logs = {b: layout.broker_dir(b) / "logs" for b in [*ORIGINAL, 4]}

        def sizes() -> dict[int, int]:
            return {b: partition_log_bytes(d, TOPIC, 1)[0] for b, d in logs.items()}

        poll_until(lambda: len({sizes()[b] for b in ORIGINAL}) == 1, args.timeout, "the replicas to be in step", 0.1)
        leader_bytes = sizes()[1]
        progress.say(f"moving {TOPIC}-0 ({leader_bytes / MIB:.0f} MiB on disk) from {ORIGINAL} to {TARGET} ...")
        admin = KafkaAdminClient(bootstrap_servers=spec.bootstrap_servers, request_timeout_ms=60000)
        try:
            started = time.monotonic()
            result = admin.alter_partition_reassignments({KafkaTopicPartition(TOPIC, 0): TARGET})
            answered_s = time.monotonic() - started
        finally:
            admin.close()
        if any(error is not None for error in result.values()):
            raise ClusterError(f"the reassignment was refused: {result}")
        first_byte_s = None
        while True:
            now = time.monotonic() - started
            if first_byte_s is None and sizes()[4] > 0:
                first_byte_s = now
            replicas, moving = asyncio.run(_assignment(spec.zookeeper))
            if replicas == TARGET and not moving:
                break
            if now > args.timeout:
                raise ClusterError(f"the reassignment did not complete within {args.timeout} s: broker 4 holds "
                                   f"{sizes()[4] / MIB:.0f} of {leader_bytes / MIB:.0f} MiB")
            time.sleep(0.05)
        move_s = time.monotonic() - started
        copied = sizes()[4]
        removed_gone = poll_until(lambda: not (logs[1] / f"{TOPIC}-0").exists(), 60,
                                  "broker 1's copy to be deleted", 0.05)
    figures = [
        Figure("reassignment_time_s", f"reassignment of a {args.size_mib} MiB partition: time", move_s, "s"),
        Figure("reassignment_bytes_copied_mib", f"reassignment of a {args.size_mib} MiB partition: bytes copied",
               copied / MIB, "MiB"),
        Figure("reassignment_copy_rate_mib_s", "reassignment copy rate (bytes copied / time)",
               throughput_mib_s(copied, move_s), "MiB/s"),
    ]
    phases = [
        Phase("fill", f"{written / MIB:.0f} MiB of {VALUE_BYTES}-byte values written acks=all to brokers {ORIGINAL} "
              f"in {fill_s:.1f} s", fill_s),
        Phase("move", f"AlterPartitionReassignments answered in {answered_s * 1000:.0f} ms; broker 4's first byte "
              f"after {first_byte_s or 0:.1f} s; the topic znode listed {TARGET} alone after {move_s:.1f} s; "
              f"broker 4 copied {copied:,} bytes (the leader held {leader_bytes:,}); broker 1's copy deleted: "
              f"{bool(removed_gone)}", move_s, figures,
              {"answered_ms": round(answered_s * 1000, 1), "first_byte_s": first_byte_s,
               "copied_bytes": copied, "leader_bytes": leader_bytes}),
    ]
    return Report("reassign", f"kafkasim partition reassignment: {args.size_mib} MiB, {ORIGINAL} -> {TARGET}",
                  settings, phases, ["time: from the AlterPartitionReassignments request to the topic znode with "
                                     "no adding or removing replicas (broker 4 caught up, joined the ISR, the "
                                     "leader moved, broker 1 stopped); bytes: broker 4's segment files"])


BENCH = Bench("reassign", "a partition of SIZE MiB moved from brokers 1,2,3 to 2,3,4: time and bytes copied",
              options, run)
