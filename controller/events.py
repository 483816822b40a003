"""Controller events. ZooKeeper watches and requests only enqueue these; one loop processes them in
order, so controller state never races."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Startup:
    pass


@dataclass(frozen=True)
class Reelect:
    """/controller was deleted: resign if it was us, then try to become controller."""


@dataclass(frozen=True)
class ControllerChange:
    """/controller was created or changed: resign if it is no longer us."""


@dataclass(frozen=True)
class Expire:
    """Our ZooKeeper session expired: our ephemerals are gone, so resign before anything else."""


@dataclass(frozen=True)
class RegisterBrokerAndReelect:
    """A new session after expiry: the broker has re-registered; take part in the election again."""


@dataclass(frozen=True)
class BrokerChange:
    pass


@dataclass(frozen=True)
class TopicChange:
    pass


@dataclass(frozen=True)
class PartitionModifications:
    """/brokers/topics/<topic> changed (Kafka's PartitionModificationsHandler): partitions may have been added."""

    topic: str


@dataclass(frozen=True)
class TopicDeletion:
    pass


@dataclass(frozen=True)
class IsrChangeNotification:
    pass


@dataclass(frozen=True)
class TopicConfigChange:
    """A /config/changes notification named this topic: re-read its config; unclean election turned on elects
    its offline partitions at once (Kafka's TopicUncleanLeaderElectionEnable)."""

    topic: str


@dataclass(frozen=True)
class UncleanLeaderElectionEnable:
    """The broker's unclean.leader.election.enable was turned on dynamically: elect every offline partition that
    may now be elected out of its ISR (Kafka's UncleanLeaderElectionEnable)."""


@dataclass(frozen=True)
class ControlledShutdown:
    broker_id: int
    broker_epoch: int
    reply: asyncio.Future = field(compare=False)
    # the other brokers' answers to the moves, filled by the event: the asker waits for them, not the event queue
    applying: list[asyncio.Future] = field(default_factory=list, compare=False)


@dataclass(frozen=True)
class AutoPreferredReplicaLeaderElection:
    """The periodic leader imbalance check (leader.imbalance.check.interval.seconds)."""


@dataclass(frozen=True)
class ReplicaLeaderElection:
    """An ElectLeaders request (``partitions`` None: every partition), or, with ``reply`` None, the
    /admin/preferred_replica_election znode appeared."""

    partitions: tuple[tuple[str, int], ...] | None
    election_type: int  # preferred_election.ElectionType
    reply: asyncio.Future | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ApiPartitionReassignment:
    """AlterPartitionReassignments: each partition's target replicas, None to cancel. ``reply`` gets, per partition,
    None (started) or reassignment.Refused."""

    reassignments: tuple[tuple[tuple[str, int], tuple[int, ...] | None], ...]
    reply: asyncio.Future = field(compare=False)


@dataclass(frozen=True)
class ListPartitionReassignments:
    """ListPartitionReassignments (``partitions`` None: all); ``reply`` gets the partitions being moved with their
    reassignment.ReplicaAssignment."""

    partitions: tuple[tuple[str, int], ...] | None
    reply: asyncio.Future = field(compare=False)


@dataclass(frozen=True)
class ZkPartitionReassignment:
    """/admin/reassign_partitions was created (the legacy path), or the controller's look at failover."""


@dataclass(frozen=True)
class Shutdown:
    pass


ControllerEvent = (Startup | Reelect | ControllerChange | Expire | RegisterBrokerAndReelect | BrokerChange
                   | TopicChange | PartitionModifications | TopicDeletion | IsrChangeNotification | TopicConfigChange
                   | UncleanLeaderElectionEnable
                   | ControlledShutdown
                   | AutoPreferredReplicaLeaderElection | ReplicaLeaderElection | ApiPartitionReassignment
                   | ListPartitionReassignments | ZkPartitionReassignment | Shutdown)
