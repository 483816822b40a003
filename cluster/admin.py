"""Cluster administration through ZooKeeper, the way Kafka 2.x's AdminZkClient does it: topics are
created by writing their assignment and config znodes, deleted by a marker under /admin/delete_topics;
the controller does the rest. Reads give the cluster state for ``kafkasim status``."""

from __future__ import annotations

from dataclasses import dataclass, field

from zk.admin import live_broker_ids
from zk.client import ZkClient
from zk.znodes import (
    BrokerIdZNode,
    BrokerTopicsZNode,
    ControllerEpochZNode,
    ControllerZNode,
    TopicConfigZNode,
    TopicPartitionStateZNode,
    TopicZNode,
    ZNodeDecodeError,
)


@dataclass
class PartitionView:
    topic: str
    partition: int
    replicas: list[int]
    leader: int = -1
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    controller_epoch: int = -1
    zk_version: int = -1
    # KIP-455: while the partition is being reassigned, ``replicas`` is the target then the rest of the original
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)


@dataclass
class BrokerView:
    broker_id: int
    endpoints: list[str]
    broker_epoch: int


@dataclass
class ClusterState:
    controller_id: int
    controller_epoch: int
    brokers: list[BrokerView]
    partitions: list[PartitionView]
    topics_being_deleted: list[str]
    problems: list[str]

    def partition(self, topic: str, partition: int) -> PartitionView | None:
        return next((p for p in self.partitions if (p.topic, p.partition) == (topic, partition)), None)

    def as_dict(self) -> dict:
        return {
            "controller": {"id": self.controller_id, "epoch": self.controller_epoch},
            "brokers": [vars(b) for b in self.brokers],
            "partitions": [vars(p) for p in self.partitions],
            "topics_being_deleted": self.topics_being_deleted,
            "problems": self.problems,
        }


async def read_cluster_state(zk: ZkClient, topics: list[str] | None = None) -> ClusterState:
    problems: list[str] = []
    controller_id, controller_epoch = -1, -1
    data, _ = await zk.get_or_none(ControllerZNode.path)
    if data is not None:
        try:
            controller_id = ControllerZNode.decode(data).brokerid
        except ZNodeDecodeError as exc:
            problems.append(str(exc))
    data, _ = await zk.get_or_none(ControllerEpochZNode.path)
    if data is not None:
        try:
            controller_epoch = ControllerEpochZNode.decode(data)
        except ZNodeDecodeError as exc:
            problems.append(str(exc))
    brokers = []
    for broker_id in await live_broker_ids(zk):
        data, stat = await zk.get_or_none(BrokerIdZNode.path(broker_id))
        if data is None:
            continue
        try:
            registration = BrokerIdZNode.decode(broker_id, data)
        except ZNodeDecodeError as exc:
            problems.append(str(exc))
            continue
        brokers.append(BrokerView(broker_id, registration.endpoints, stat.czxid))
    partitions = []
    for topic in sorted(topics if topics is not None else await zk.get_children_or_empty(BrokerTopicsZNode.path)):
        data, _ = await zk.get_or_none(TopicZNode.path(topic))
        if data is None:
            continue
        try:
            decoded = TopicZNode.decode(topic, data)
        except ZNodeDecodeError as exc:
            problems.append(str(exc))
            continue
        for partition, replicas in sorted(decoded.partitions.items()):
            view = PartitionView(topic, partition, list(replicas),
                                 adding_replicas=list(decoded.adding_replicas.get(partition, [])),
                                 removing_replicas=list(decoded.removing_replicas.get(partition, [])))
            state_data, stat = await zk.get_or_none(TopicPartitionStateZNode.path(topic, partition))
            if state_data is not None:
                try:
                    state = TopicPartitionStateZNode.decode(topic, partition, state_data)
                    view.leader, view.leader_epoch, view.isr = state.leader, state.leader_epoch, list(state.isr)
                    view.controller_epoch, view.zk_version = state.controller_epoch, stat.version
                except ZNodeDecodeError as exc:
                    problems.append(str(exc))
            partitions.append(view)
    deleting = sorted(await zk.get_children_or_empty("/admin/delete_topics"))
    return ClusterState(controller_id, controller_epoch, brokers, partitions, deleting, problems)


async def min_isr_by_topic(zk: ZkClient, topics: set[str], broker_default: str | None) -> dict[str, int]:
    """Each topic's effective min.insync.replicas: its own config, else the brokers' default."""
    from cluster.partition_health import effective_min_isr

    found = {}
    for topic in topics:
        data, _ = await zk.get_or_none(TopicConfigZNode.path(topic))
        found[topic] = effective_min_isr(TopicConfigZNode.decode(topic, data) if data is not None else {},
                                         broker_default)
    return found
