"""The controller's cached view of the cluster, loaded from ZooKeeper at failover and kept current by
the events it processes. Only the controller's event loop reads or writes it."""

from __future__ import annotations

from dataclasses import dataclass, field

from zk.znodes import NO_LEADER, BrokerRegistration, LeaderIsrAndControllerEpoch

TopicPartition = tuple[str, int]


@dataclass
class PartitionLeadership:
    state: LeaderIsrAndControllerEpoch
    zk_version: int


@dataclass
class ControllerContext:
    epoch: int
    epoch_zk_version: int
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    broker_epochs: dict[int, int] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    leadership: dict[TopicPartition, PartitionLeadership] = field(default_factory=dict)
    topics_to_delete: set[str] = field(default_factory=set)
    # KIP-455: the replicas being added and removed of each partition being reassigned, as in its topic znode
    adding_replicas: dict[TopicPartition, list[int]] = field(default_factory=dict)
    removing_replicas: dict[TopicPartition, list[int]] = field(default_factory=dict)
    # partitions whose reassignment came from /admin/reassign_partitions, with their target
    zk_reassignments: dict[TopicPartition, list[int]] = field(default_factory=dict)

    @property
    def live_or_shutting_down(self) -> set[int]:
        return set(self.live_brokers)

    @property
    def live(self) -> set[int]:
        """Brokers that may lead: registered and not shutting down."""
        return set(self.live_brokers) - self.shutting_down

    def replicas(self, tp: TopicPartition) -> list[int]:
        return self.assignments.get(tp[0], {}).get(tp[1], [])

    def all_partitions(self) -> list[TopicPartition]:
        return sorted((topic, p) for topic, parts in self.assignments.items() for p in parts)

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.replicas(tp)]

    def partitions_led_by(self, broker_ids: set[int]) -> list[TopicPartition]:
        return [tp for tp, lead in sorted(self.leadership.items()) if lead.state.leader in broker_ids]

    def offline_partitions(self) -> list[TopicPartition]:
        """Partitions without a live leader, or never initialised (no state znode yet)."""
        result = []
        for tp in self.all_partitions():
            if tp[0] in self.topics_to_delete:
                continue
            lead = self.leadership.get(tp)
            if lead is None or lead.state.leader == NO_LEADER or lead.state.leader not in self.live:
                result.append(tp)
        return result

    def is_reassigning(self, tp: TopicPartition) -> bool:
        return bool(self.adding_replicas.get(tp) or self.removing_replicas.get(tp))

    def reassigning_partitions(self) -> list[TopicPartition]:
        return sorted(tp for tp in {*self.adding_replicas, *self.removing_replicas} if self.is_reassigning(tp))

    def topic_reassigning(self, topic: str) -> bool:
        return any(tp[0] == topic for tp in self.reassigning_partitions())

    def remove_topic(self, topic: str) -> None:
        self.assignments.pop(topic, None)
        self.topic_configs.pop(topic, None)
        self.topics_to_delete.discard(topic)
        for tp in [tp for tp in self.leadership if tp[0] == topic]:
            del self.leadership[tp]
        for moves in (self.adding_replicas, self.removing_replicas, self.zk_reassignments):
            for tp in [tp for tp in moves if tp[0] == topic]:
                del moves[tp]
