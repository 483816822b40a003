"""Preferred leader election, the decisions (pure): Kafka's auto leader rebalance check
(checkAndTriggerAutoLeaderRebalance) and the sorting of an ElectLeaders or /admin/preferred_replica_election
request (processReplicaLeaderElection) into partitions to elect and partitions answered without an election.

The first replica of a partition's assignment is its preferred leader. After a broker comes back, the
partitions it led stay with the replicas that took over; a preferred election gives them back, so that
leadership (and with it produce and fetch traffic) is spread as the assignment spread it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from controller.context import ControllerContext, TopicPartition
from controller.election import preferred_replica_election
from zk.znodes import NO_LEADER


class ElectionType(enum.IntEnum):
    """ElectLeaders' ElectionType field (v1+; v0 always means PREFERRED)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class BrokerImbalance:
    """One broker's share of the partitions that prefer it but are led by another broker."""

    broker: int
    preferred: int   # partitions whose assignment starts with this broker
    led_elsewhere: int  # of those, the ones whose leader (or lack of one) is not this broker

    @property
    def ratio(self) -> float:
        return self.led_elsewhere / self.preferred if self.preferred else 0.0


def leader_imbalance(ctx: ControllerContext) -> dict[int, BrokerImbalance]:
    """Per preferred broker, over the partitions of topics not being deleted. A partition without a state znode
    yet counts as preferring its broker but not as led elsewhere (Kafka's ``exists`` on missing leadership)."""
    preferred: dict[int, int] = {}
    elsewhere: dict[int, int] = {}
    for tp in ctx.all_partitions():
        replicas = ctx.replicas(tp)
        if tp[0] in ctx.topics_to_delete or not replicas:
            continue
        broker = replicas[0]
        preferred[broker] = preferred.get(broker, 0) + 1
        lead = ctx.leadership.get(tp)
        if lead is not None and lead.state.leader != broker:
            elsewhere[broker] = elsewhere.get(broker, 0) + 1
    return {b: BrokerImbalance(b, n, elsewhere.get(b, 0)) for b, n in sorted(preferred.items())}


def preferred_replica_imbalance_count(ctx: ControllerContext) -> int:
    """Kafka's PreferredReplicaImbalanceCount: partitions (of topics not being deleted) not led by their preferred
    replica."""
    return sum(imbalance.led_elsewhere for imbalance in leader_imbalance(ctx).values())


def can_preferred_replica_lead(ctx: ControllerContext, tp: TopicPartition) -> bool:
    lead = ctx.leadership.get(tp)
    if lead is None:
        return False
    return preferred_replica_election(ctx.replicas(tp), lead.state.isr, ctx.live).leader != NO_LEADER


def auto_rebalance_candidates(ctx: ControllerContext, imbalance_percentage: int) -> list[TopicPartition]:
    """The partitions an automatic preferred election moves: those of every broker whose imbalance ratio is
    strictly above ``leader.imbalance.per.broker.percentage``, whose topic still exists and is not being
    deleted, and whose preferred replica is alive and in the ISR (an election that cannot succeed is not
    tried). Nothing moves while any partition is being reassigned (Kafka's check: the reassignment chooses
    its own leaders)."""
    if ctx.reassigning_partitions():
        return []
    over = {b for b, imbalance in leader_imbalance(ctx).items() if imbalance.ratio > imbalance_percentage / 100}
    candidates = []
    for tp in ctx.all_partitions():
        replicas = ctx.replicas(tp)
        if not replicas or replicas[0] not in over or tp[0] in ctx.topics_to_delete:
            continue
        lead = ctx.leadership.get(tp)
        if lead is not None and lead.state.leader != replicas[0] and can_preferred_replica_lead(ctx, tp):
            candidates.append(tp)
    return candidates


@dataclass(frozen=True)
class ElectionResult:
    """One partition's answer: ``leader`` is the leader the election wrote (error NONE), else NO_LEADER."""

    error: ErrorCode
    message: str | None = None
    leader: int = NO_LEADER


@dataclass
class ElectionPlan:
    electable: list[TopicPartition] = field(default_factory=list)
    answered: dict[TopicPartition, ElectionResult] = field(default_factory=dict)


def plan_election(ctx: ControllerContext, partitions: list[TopicPartition], election_type: ElectionType
                  ) -> ElectionPlan:
    """Which requested partitions need an election. PREFERRED: those not led by their preferred replica;
    UNCLEAN: those without a live leader. The others are answered at once, with Kafka's error codes."""
    plan = ElectionPlan()
    for tp in sorted(set(partitions)):
        replicas = ctx.replicas(tp)
        if not replicas:
            plan.answered[tp] = ElectionResult(ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
            continue
        if tp[0] in ctx.topics_to_delete:
            plan.answered[tp] = ElectionResult(ErrorCode.invalid_topic_exception, "The topic is being deleted")
            continue
        lead = ctx.leadership.get(tp)
        leader = NO_LEADER if lead is None else lead.state.leader
        if election_type == ElectionType.PREFERRED:
            needed = leader != replicas[0]
        else:
            needed = leader == NO_LEADER or leader not in ctx.live_brokers
        if needed:
            plan.electable.append(tp)
        else:
            plan.answered[tp] = ElectionResult(ErrorCode.election_not_needed, None, leader)
    return plan


def election_result(ctx: ControllerContext, tp: TopicPartition, election_type: ElectionType) -> ElectionResult:
    """The answer for an electable partition once the election step ran (on the state as now known)."""
    lead = ctx.leadership.get(tp)
    leader = NO_LEADER if lead is None else lead.state.leader
    replicas = ctx.replicas(tp)
    if election_type == ElectionType.PREFERRED:
        if replicas and leader == replicas[0]:
            return ElectionResult(ErrorCode.none, None, leader)
        return ElectionResult(ErrorCode.preferred_leader_not_available,
                              f"Failed to elect leader for partition {tp[0]}-{tp[1]} under strategy "
                              f"PreferredReplicaPartitionLeaderElectionStrategy: preferred replica "
                              f"{replicas[0] if replicas else NO_LEADER} is not alive or not in the ISR")
    if leader != NO_LEADER and leader in ctx.live:
        return ElectionResult(ErrorCode.none, None, leader)
    return ElectionResult(ErrorCode.eligible_leaders_not_available,
                          f"Failed to elect leader for partition {tp[0]}-{tp[1]} under strategy "
                          f"OfflinePartitionLeaderElectionStrategy(true): no replica is alive")
