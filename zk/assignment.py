"""Where a new topic's replicas go, and which topic names are legal. Pure functions."""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


class InvalidTopicError(ValueError):
    """Kafka's INVALID_TOPIC_EXCEPTION (17)."""


class InvalidReplicationFactorError(ValueError):
    """Kafka's INVALID_REPLICATION_FACTOR (38)."""


class InvalidPartitionsError(ValueError):
    """Kafka's INVALID_PARTITIONS (37)."""


class PartitionLimitError(ValueError):
    """More partition replicas on a broker than ``max.broker.partitions`` allows: POLICY_VIOLATION (44)."""


@dataclass(frozen=True)
class PartitionLimit:
    """KIP-578's ``max.broker.partitions``: no request may leave a broker hosting more partition replicas than
    this. Kafka 2.8 has no such limit (KIP-578 came later) and allocates whatever count a request carries, so a
    CreateTopics with 2**31 - 1 partitions exhausts the controller's memory; kafkasim checks the count before
    anything is allocated or written to ZooKeeper. ``hosted`` is how many replicas each broker hosts now."""

    max_broker_partitions: int
    hosted: Mapping[int, int] = field(default_factory=dict)

    def check_count(self, broker_ids: Iterable[int], partitions: int, replication_factor: int) -> None:
        """Before an assignment is made: the new replicas fit on ``broker_ids`` at all. Plain arithmetic, so a
        forged count costs nothing."""
        brokers = sorted(set(broker_ids))
        if partitions <= 0 or replication_factor <= 0 or not brokers:
            return  # the assignment's own checks answer these
        room = sum(max(0, self.max_broker_partitions - self.hosted.get(b, 0)) for b in brokers)
        wanted = partitions * replication_factor
        if wanted > room:
            raise PartitionLimitError(
                f"{partitions} partitions with replication factor {replication_factor} would place {wanted} "
                f"replicas on brokers {brokers}, which have room for {room} under max.broker.partitions="
                f"{self.max_broker_partitions} (raise it on every broker to allow more)")

    def check_assignment(self, assignment: Mapping[int, Iterable[int]]) -> None:
        """After an assignment is made (or given by the client): no broker ends above the limit."""
        added = Counter(b for replicas in assignment.values() for b in replicas)
        for broker, count in sorted(added.items()):
            total = self.hosted.get(broker, 0) + count
            if total > self.max_broker_partitions:
                raise PartitionLimitError(
                    f"broker {broker} would host {total} partition replicas, more than max.broker.partitions="
                    f"{self.max_broker_partitions} (raise it on every broker to allow more)")


def hosted_replicas(assignments: Iterable[Iterable[int]]) -> dict[int, int]:
    """How many partition replicas each broker hosts, from every partition's replica list."""
    return dict(Counter(b for replicas in assignments for b in replicas))


def validate_topic_name(name: str) -> None:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} characters; at most {MAX_TOPIC_NAME_LENGTH} are allowed")
    if not _LEGAL_TOPIC_NAME.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: use only ASCII letters, digits, '.', '_' and '-'")


def replica_index(first_replica: int, second_shift: int, index: int, broker_count: int) -> int:
    shift = 1 + (second_shift + index) % (broker_count - 1)
    return (first_replica + shift) % broker_count


def assign_replicas_to_brokers(broker_ids: list[int], partitions: int, replication_factor: int,
                               rng: random.Random | None = None,
                               start_index: int | None = None, next_replica_shift: int | None = None,
                               start_partition_id: int = 0) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment: leaders round-robin over the sorted brokers from a random start;
    each follower set shifted, and the shift grows every time the leaders wrap around the brokers, so
    partitions spread their followers over different brokers. Partitions are numbered from
    ``start_partition_id`` (added partitions continue the round-robin where the topic's left off)."""
    if partitions <= 0:
        raise InvalidPartitionsError(f"number of partitions must be larger than 0 (got {partitions})")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(f"replication factor must be larger than 0 (got {replication_factor})")
    if replication_factor > len(broker_ids):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {len(broker_ids)} live brokers")
    rng = rng or random.Random()
    brokers = sorted(broker_ids)
    count = len(brokers)
    start = rng.randrange(count) if start_index is None else start_index
    shift = rng.randrange(count) if next_replica_shift is None else next_replica_shift
    assignment: dict[int, list[int]] = {}
    for partition in range(start_partition_id, start_partition_id + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        replicas = [brokers[first]]
        replicas += [brokers[replica_index(first, shift, j, count)] for j in range(replication_factor - 1)]
        assignment[partition] = replicas
    return assignment


def assign_added_partitions(broker_ids: list[int], existing: dict[int, list[int]], new_count: int
                            ) -> dict[int, list[int]]:
    """Where CreatePartitions puts the partitions that take a topic from ``len(existing)`` to ``new_count``
    (Kafka's AdminZkClient.createNewPartitionsAssignment): the replication factor of partition 0, the
    round-robin started at the first live broker whose id is at least partition 0's first replica, and that
    same index as the follower shift; numbered after the existing partitions."""
    first_partition = existing[0]
    brokers = sorted(broker_ids)
    start = next((i for i, b in enumerate(brokers) if b >= first_partition[0]), 0)
    return assign_replicas_to_brokers(brokers, new_count - len(existing), len(first_partition),
                                      start_index=start, next_replica_shift=start,
                                      start_partition_id=len(existing))
