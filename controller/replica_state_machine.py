"""Kafka's ReplicaStateMachine, pure: which requests a replica's state change sends and which ISR
writes it needs, returned as data.

States used here: Online (LeaderAndIsr tells it its role), Offline (it leaves every ISR it is in:
leader epoch + 1, no leader if it led; the last ISR member stays so that a later clean election can
find it), ReplicaDeletionStarted (StopReplica with delete when its topic is deleted).
"""

from __future__ import annotations

import enum

from controller.context import ControllerContext, TopicPartition
from controller.election import remove_replica_from_isr
from controller.partition_state_machine import _check_not_deposed
from controller.state_change import LeaderAndIsr, PartitionStateWrite, StateChanges, StopReplica

# StopReplica's leader epoch for a deletion: the replica goes whatever epoch it is at (Kafka's
# LeaderAndIsr.EpochDuringDelete)
EPOCH_DURING_DELETE = -2


class ReplicaState(enum.Enum):
    NEW = 1
    ONLINE = 2
    OFFLINE = 3
    DELETION_STARTED = 4
    DELETION_SUCCESSFUL = 5
    DELETION_INELIGIBLE = 6
    NON_EXISTENT = 7


def to_online(ctx: ControllerContext, brokers: set[int] | list[int],
              partitions: list[TopicPartition] | None = None) -> StateChanges:
    """Replicas on ``brokers`` -> Online: each hears LeaderAndIsr for its partitions that have a live
    leader (a partition still without one hears it when it is elected)."""
    brokers = set(brokers)
    changes = StateChanges()
    for tp in partitions if partitions is not None else ctx.all_partitions():
        lead = ctx.leadership.get(tp)
        on = tuple(b for b in ctx.replicas(tp) if b in brokers)
        if lead is not None and on and lead.state.leader in ctx.live:
            changes.leader_and_isr.append(LeaderAndIsr(on, tp))
    return changes


def to_offline(ctx: ControllerContext, replica: int, partitions: list[TopicPartition] | None = None,
               stop: bool = False) -> StateChanges:
    """The replica on ``replica`` -> Offline for ``partitions`` (all by default): out of every ISR,
    and with ``stop`` a StopReplica without delete first (controlled shutdown of a follower)."""
    changes = StateChanges()
    for tp in partitions if partitions is not None else ctx.all_partitions():
        lead = ctx.leadership.get(tp)
        if stop and lead is not None:
            changes.stop_replicas.append(StopReplica(replica, tp, delete=False, leader_epoch=lead.state.leader_epoch))
        if lead is None or replica not in lead.state.isr:
            continue
        state = lead.state
        _check_not_deposed(ctx, tp, state)
        leader, isr = remove_replica_from_isr(state.leader, state.isr, replica)
        new_state = state.with_changes(leader=leader, isr=isr, leader_epoch=state.leader_epoch + 1,
                                       controller_epoch=ctx.epoch)
        changes.writes.append(PartitionStateWrite(
            tp, new_state, lead.zk_version, state.leader, "isr_removal",
            tuple(r for r in ctx.replicas(tp) if r in ctx.live_or_shutting_down and r != replica)))
    return changes


def shutdown_followers(ctx: ControllerContext, broker: int, partitions: list[TopicPartition]) -> StateChanges:
    """Controlled shutdown, after leadership moved: the partitions ``broker`` no longer leads get a
    StopReplica (no delete) and lose it from their ISR."""
    followed = [tp for tp in partitions if ctx.leadership[tp].state.leader != broker]
    return to_offline(ctx, broker, followed, stop=True)


def still_led_by(ctx: ControllerContext, broker: int, partitions: list[TopicPartition]) -> list[TopicPartition]:
    return [tp for tp in partitions if tp in ctx.leadership and ctx.leadership[tp].state.leader == broker]


def deletion_started(ctx: ControllerContext, topic: str) -> StateChanges:
    """Every replica of ``topic`` -> ReplicaDeletionStarted: StopReplica with delete."""
    changes = StateChanges()
    for partition in sorted(ctx.assignments.get(topic, {})):
        tp = (topic, partition)
        for replica in ctx.replicas(tp):
            changes.stop_replicas.append(StopReplica(replica, tp, delete=True, leader_epoch=EPOCH_DURING_DELETE))
    return changes


def replicas_in_dead_isr(ctx: ControllerContext) -> list[int]:
    """Brokers that are in some ISR but not registered: at failover they go Offline."""
    return sorted({r for lead in ctx.leadership.values() for r in lead.state.isr if r not in ctx.live_brokers})

