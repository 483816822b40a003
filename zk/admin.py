"""Topic administration through ZooKeeper, as Kafka 2.x's AdminZkClient: a topic is created by writing
its config and assignment znodes, grown by rewriting its assignment znode, deleted by a marker under
/admin/delete_topics; the controller, which watches those paths, does the rest. A topic's config is changed
by rewriting /config/topics/<t> (a broker's, or the cluster-wide default's, /config/brokers/<id> or <default>) and
then announcing it with a sequential /config/changes/config_change_ node, which every broker watches. Used by
brokers (CreateTopics, CreatePartitions, DeleteTopics, auto-creation, the config APIs) and by the ``kafkasim`` CLI."""

from __future__ import annotations

from collections.abc import Mapping

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kio.schema.errors import ErrorCode

from zk.assignment import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    PartitionLimit,
    PartitionLimitError,
    assign_added_partitions,
    assign_replicas_to_brokers,
    validate_topic_name,
)
from zk.client import CreateOp, ZkClient
from zk.znodes import (
    BrokerConfigZNode,
    BrokerIdsZNode,
    ConfigChangeNotificationZNode,
    DeleteTopicsTopicZNode,
    TopicConfigZNode,
    TopicZNode,
    ZNodeDecodeError,
)

# a concurrent change of the assignment znode between our read and our write: read and decide again
ADD_PARTITIONS_ATTEMPTS = 3


class AdminError(RuntimeError):
    """What was asked cannot be done; ``error_code`` is Kafka's answer, the message says why."""

    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.invalid_request) -> None:
        super().__init__(message)
        self.error_code = error_code


_RULE_ERRORS = {
    InvalidTopicError: ErrorCode.invalid_topic_exception,
    InvalidPartitionsError: ErrorCode.invalid_partitions,
    InvalidReplicationFactorError: ErrorCode.invalid_replication_factor,
    PartitionLimitError: ErrorCode.policy_violation,
}


async def live_broker_ids(zk: ZkClient) -> list[int]:
    return sorted(int(child) for child in await zk.get_children_or_empty(BrokerIdsZNode.path) if child.isdigit())


def check_assignment(assignment: Mapping[int, list[int]], live: list[int]) -> None:
    """A replica assignment given by the user (Kafka's validateReplicaAssignment)."""
    if sorted(assignment) != list(range(len(assignment))):
        raise AdminError(f"partitions {sorted(assignment)} must be numbered 0..{len(assignment) - 1}",
                         ErrorCode.invalid_replica_assignment)
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise AdminError("every partition needs the same, non-zero number of replicas",
                         ErrorCode.invalid_replica_assignment)
    for partition, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise AdminError(f"partition {partition} lists a broker twice: {replicas}",
                             ErrorCode.invalid_replica_assignment)
        unknown = sorted(set(replicas) - set(live))
        if unknown:
            raise AdminError(f"partition {partition} names brokers {unknown} that are not alive",
                             ErrorCode.broker_not_available)


async def create_topic(zk: ZkClient, topic: str, partitions: int, replication_factor: int,
                       config: Mapping[str, str] | None = None, *,
                       assignment: Mapping[int, list[int]] | None = None,
                       validate_only: bool = False, limit: PartitionLimit | None = None) -> dict[int, list[int]]:
    """Validate, then (unless ``validate_only``) write the topic. Raises AdminError."""
    try:
        validate_topic_name(topic)
        brokers = await live_broker_ids(zk)
        if assignment is None:
            if limit is not None and replication_factor <= len(brokers):
                limit.check_count(brokers, partitions, replication_factor)
            chosen = assign_replicas_to_brokers(brokers, partitions, replication_factor)
        else:
            check_assignment(assignment, brokers)
            chosen = {p: list(r) for p, r in assignment.items()}
        if limit is not None:
            limit.check_assignment(chosen)
    except (InvalidTopicError, InvalidPartitionsError, InvalidReplicationFactorError, PartitionLimitError) as exc:
        raise AdminError(str(exc), _RULE_ERRORS[type(exc)]) from None
    if await zk.exists(TopicZNode.path(topic)) is not None:
        raise AdminError(f"topic {topic!r} already exists", ErrorCode.topic_already_exists)
    if validate_only:
        return chosen
    # Kafka writes the config znode first, then the assignment that the controller watches for.
    try:
        await zk.multi([CreateOp(TopicConfigZNode.path(topic), TopicConfigZNode.encode(dict(config or {}))),
                        CreateOp(TopicZNode.path(topic), TopicZNode.encode(chosen))])
    except Exception as exc:
        cause = getattr(exc, "cause", exc)
        if isinstance(cause, NodeExistsError):
            raise AdminError(f"topic {topic!r} already exists (or is still being deleted)",
                             ErrorCode.topic_already_exists) from None
        raise
    return chosen


def _require_legal_name(topic: str) -> None:
    """A name that cannot be a topic's names no topic (Kafka answers from its metadata cache, which holds no such
    name): UNKNOWN_TOPIC_OR_PARTITION, before a ZooKeeper path is built from it."""
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        raise AdminError(f"topic {topic!r} does not exist", ErrorCode.unknown_topic_or_partition) from None


async def delete_topic(zk: ZkClient, topic: str) -> None:
    _require_legal_name(topic)
    if await zk.exists(TopicZNode.path(topic)) is None:
        raise AdminError(f"topic {topic!r} does not exist", ErrorCode.unknown_topic_or_partition)
    try:
        await zk.create(DeleteTopicsTopicZNode.path(topic))
    except NodeExistsError:
        # Kafka answers success here: the deletion asked for is already under way.
        raise AdminError(f"topic {topic!r} is already marked for deletion", ErrorCode.none) from None


def plan_added_partitions(topic: str, existing: Mapping[int, list[int]], new_count: int,
                          assignment: list[list[int]] | None, live: list[int],
                          limit: PartitionLimit | None = None) -> dict[int, list[int]]:
    """The replicas of the partitions CreatePartitions adds, checked in the order and with the words of Kafka
    2.8's ZkAdminManager.createPartitions and AdminZkClient.createNewPartitionsAssignment. Pure; raises
    AdminError."""
    if not existing:
        raise AdminError(f"The topic '{topic}' does not exist.", ErrorCode.unknown_topic_or_partition)
    increment = new_count - len(existing)
    if increment < 0:
        raise AdminError(f"Topic currently has {len(existing)} partitions, which is higher than the requested "
                         f"{new_count}.", ErrorCode.invalid_partitions)
    if increment == 0:
        raise AdminError(f"Topic already has {len(existing)} partitions.", ErrorCode.invalid_partitions)
    if assignment is None:
        try:
            if limit is not None and len(existing[0]) <= len(live):
                limit.check_count(live, increment, len(existing[0]))
            added = assign_added_partitions(live, dict(existing), new_count)
        except InvalidReplicationFactorError as exc:
            raise AdminError(str(exc), ErrorCode.invalid_replication_factor) from None
        except PartitionLimitError as exc:
            raise AdminError(str(exc), ErrorCode.policy_violation) from None
        _check_limit(limit, added)
        return added
    unknown = sorted({b for replicas in assignment for b in replicas} - set(live))
    if unknown:
        raise AdminError(f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.",
                         ErrorCode.invalid_replica_assignment)
    if len(assignment) != increment:
        raise AdminError(f"Increasing the number of partitions by {increment} but {len(assignment)} assignments "
                         "provided.", ErrorCode.invalid_replica_assignment)
    replication_factor = len(existing[0])
    added = {len(existing) + i: list(replicas) for i, replicas in enumerate(assignment)}
    for partition, replicas in added.items():
        if not replicas:
            raise AdminError(f"Cannot have replication factor of 0 for partition id {partition}.",
                             ErrorCode.invalid_replica_assignment)
        if len(set(replicas)) != len(replicas):
            raise AdminError(f"Duplicate brokers not allowed in replica assignment: "
                             f"{', '.join(map(str, replicas))} for partition id {partition}.",
                             ErrorCode.invalid_replica_assignment)
        if len(replicas) != replication_factor:
            raise AdminError(f"Inconsistent replication factor between partitions, partition 0 has "
                             f"{replication_factor} while partition {partition} has {len(replicas)}.",
                             ErrorCode.invalid_replica_assignment)
    _check_limit(limit, added)
    return added


def _check_limit(limit: PartitionLimit | None, added: Mapping[int, list[int]]) -> None:
    if limit is None:
        return
    try:
        limit.check_assignment(added)
    except PartitionLimitError as exc:
        raise AdminError(str(exc), ErrorCode.policy_violation) from None


async def add_partitions(zk: ZkClient, topic: str, new_count: int, assignment: list[list[int]] | None = None, *,
                         validate_only: bool = False, limit: PartitionLimit | None = None) -> dict[int, list[int]]:
    """CreatePartitions through ZooKeeper (Kafka's AdminZkClient.addPartitions): the topic znode is rewritten
    with the old and the new partitions, compared and set against the version read; the controller's data
    watch on it creates the new partitions. Returns the added partitions' replicas. Raises AdminError."""
    _require_legal_name(topic)
    for _ in range(ADD_PARTITIONS_ATTEMPTS):
        if await zk.exists(DeleteTopicsTopicZNode.path(topic)) is not None:
            raise AdminError("The topic is queued for deletion.", ErrorCode.invalid_topic_exception)
        data, stat = await zk.get_or_none(TopicZNode.path(topic))
        try:
            current = TopicZNode.decode(topic, data) if data is not None else None
        except ZNodeDecodeError as exc:
            raise AdminError(str(exc), ErrorCode.unknown_server_error) from None
        if current is not None and (current.adding_replicas or current.removing_replicas):
            # Kafka refuses, so the controller's reassignment and the new partitions do not race
            raise AdminError(f"A partition reassignment is in progress for the topic '{topic}'.",
                             ErrorCode.reassignment_in_progress)
        existing = dict(current.partitions) if current is not None else {}
        added = plan_added_partitions(topic, existing, new_count, assignment, await live_broker_ids(zk), limit)
        if validate_only:
            return added
        try:
            await zk.set(TopicZNode.path(topic), TopicZNode.encode({**existing, **added}), stat.version)
        except BadVersionError:
            continue
        except NoNodeError:
            raise AdminError(f"The topic '{topic}' does not exist.", ErrorCode.unknown_topic_or_partition) from None
        return added
    raise AdminError(f"the assignment of topic '{topic}' kept changing while partitions were added; try again",
                     ErrorCode.unknown_server_error)


async def topic_config_overrides(zk: ZkClient, topic: str) -> dict[str, str]:
    """The topic's dynamic config (/config/topics/<t>); raises AdminError for a topic that does not exist."""
    _require_legal_name(topic)
    if await zk.exists(TopicZNode.path(topic)) is None:
        raise AdminError(f"Topic '{topic}' does not exist.", ErrorCode.unknown_topic_or_partition)
    data, _ = await zk.get_or_none(TopicConfigZNode.path(topic))
    return TopicConfigZNode.decode(topic, data) if data else {}


async def change_topic_config(zk: ZkClient, topic: str, config: Mapping[str, str]) -> None:
    """Replace the topic's dynamic config, then announce it (AdminZkClient.changeTopicConfig): the config
    znode first, so a broker reading it on the notification sees the new value. Validation is the caller's."""
    _require_legal_name(topic)
    if await zk.exists(TopicZNode.path(topic)) is None:
        raise AdminError(f"Topic '{topic}' does not exist.", ErrorCode.unknown_topic_or_partition)
    await _write_and_announce(zk, TopicConfigZNode.path(topic), TopicConfigZNode.encode(dict(config)),
                              f"{TopicConfigZNode.entity_type}/{topic}")


async def broker_config_overrides(zk: ZkClient, broker_id: int | None) -> dict[str, str]:
    """A broker's dynamic config (/config/brokers/<id>), or the cluster-wide default's (``None``: <default>)."""
    name = BrokerConfigZNode.entity_name(broker_id)
    data, _ = await zk.get_or_none(BrokerConfigZNode.path(name))
    return BrokerConfigZNode.decode(name, data) if data else {}


async def change_broker_config(zk: ZkClient, broker_id: int | None, config: Mapping[str, str]) -> None:
    """Replace a broker's dynamic config, or the cluster-wide default's (``None``), then announce it as
    "brokers/<id>" or "brokers/<default>" (AdminZkClient.changeBrokerConfig). Validation is the caller's."""
    name = BrokerConfigZNode.entity_name(broker_id)
    await _write_and_announce(zk, BrokerConfigZNode.path(name), BrokerConfigZNode.encode(dict(config)),
                              f"{BrokerConfigZNode.entity_type}/{name}")


async def _write_and_announce(zk: ZkClient, path: str, data: bytes, entity_path: str) -> None:
    # the config znode first, so a broker reading it on the notification sees the new value
    try:
        await zk.set(path, data)
    except NoNodeError:
        await zk.create(path, data, makepath=True)
    await zk.create(ConfigChangeNotificationZNode.child_path(), ConfigChangeNotificationZNode.encode(entity_path),
                    sequence=True, makepath=True)
