"""``kafkasim reassign``: partition reassignment (KIP-455) through the Kafka protocol, like
kafka-reassign-partitions.sh --bootstrap-server. confluent-kafka 2.16 has no call for AlterPartitionReassignments or
ListPartitionReassignments, so this uses kafka-python's KafkaAdminClient, which sends both to the controller. Prints
one line per partition."""

from __future__ import annotations

import sys

from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaError

from cluster.processes import ClusterError

TIMEOUT_MS = 30000


def parse_partition(text: str) -> tuple[str, int]:
    topic, _, partition = text.rpartition("/")
    if not topic or not partition.isdigit():
        raise ClusterError(f"{text!r} is not TOPIC/PARTITION (e.g. orders/0)")
    return topic, int(partition)


def parse_replicas(text: str) -> list[int]:
    try:
        replicas = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise ClusterError(f"--replicas {text!r} is not a comma-separated list of broker ids (e.g. 3,1,2)") from None
    if not replicas:
        raise ClusterError("--replicas names no broker")
    return replicas


def _admin(bootstrap: str) -> KafkaAdminClient:
    try:
        return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS,
                                client_id="kafkasim-reassign")
    except KafkaError as exc:
        raise ClusterError(f"connecting to {bootstrap} failed: {exc}; is the cluster up (`kafkasim status`)?"
                           ) from None


def alter(bootstrap: str, partitions: list[tuple[str, int]], replicas: list[int] | None) -> int:
    """Starts (``replicas``) or cancels (None) the reassignment of ``partitions``. Returns 1 if any was refused."""
    admin = _admin(bootstrap)
    try:
        results = admin.alter_partition_reassignments(
            {KafkaTopicPartition(t, p): replicas for t, p in partitions}, timeout_ms=TIMEOUT_MS)
    except KafkaError as exc:
        raise ClusterError(f"AlterPartitionReassignments failed: {exc}") from None
    finally:
        admin.close()
    failed = 0
    print("TOPIC/PARTITION  RESULT")
    for tp in sorted(results, key=lambda t: (t.topic, t.partition)):
        error = results[tp]
        if error is None:
            outcome = "cancelled: back to its original replicas" if replicas is None else \
                f"started: moving to {','.join(map(str, replicas))} (`kafkasim reassign --status` follows it)"
        else:
            failed += 1
            outcome = f"{error.__name__} ({error.errno}): {error.description}"
        print(f"{tp.topic}/{tp.partition}  {outcome}")
    return 1 if failed else 0


def status(bootstrap: str, partitions: list[tuple[str, int]] | None = None) -> int:
    """The reassignments in progress, one line per partition."""
    admin = _admin(bootstrap)
    try:
        wanted = None if partitions is None else [KafkaTopicPartition(t, p) for t, p in partitions]
        ongoing = admin.list_partition_reassignments(wanted, timeout_ms=TIMEOUT_MS)
    except KafkaError as exc:
        raise ClusterError(f"ListPartitionReassignments failed: {exc}") from None
    finally:
        admin.close()
    if not ongoing:
        print("no partition reassignment in progress")
        return 0
    print("TOPIC/PARTITION  REPLICAS  ADDING  REMOVING")
    for tp in sorted(ongoing, key=lambda t: (t.topic, t.partition)):
        moving = ongoing[tp]
        print(f"{tp.topic}/{tp.partition}  {_ids(moving['replicas'])}  {_ids(moving['adding_replicas'])}  "
              f"{_ids(moving['removing_replicas'])}")
    return 0


def _ids(replicas: list[int]) -> str:
    return ",".join(map(str, replicas)) or "-"


def run(bootstrap: str, partition: str | None, replicas: str | None, show_status: bool, cancel: bool) -> int:
    if show_status:
        if replicas or cancel:
            raise ClusterError("--status only lists; give it no --replicas or --cancel")
        return status(bootstrap, None if partition is None else [parse_partition(partition)])
    if partition is None:
        raise ClusterError("name the partition to move, as TOPIC/PARTITION, or give --status")
    if cancel == (replicas is not None):
        raise ClusterError("give either --replicas B1,B2,... or --cancel")
    code = alter(bootstrap, [parse_partition(partition)], None if cancel else parse_replicas(replicas))
    if code:
        print("nothing was changed for the refused partition(s)", file=sys.stderr)
    return code
