"""Kafka's PartitionStateMachine, pure: given the controller context (with each partition's state as
last read from ZooKeeper) it decides leaders and ISRs and returns the writes and requests as data.

States: NonExistent -> New (assigned, no state znode) -> Online (a live leader) <-> Offline (leader
dead or none). New -> Online creates the state znode; Online/Offline -> Online is a compare-and-set
with leader epoch + 1. A state znode written by a higher controller epoch means we were deposed.
"""

from __future__ import annotations

import enum
import logging

from controller.context import ControllerContext, TopicPartition
from controller.election import (
    Election,
    controlled_shutdown_election,
    offline_partition_election,
    preferred_replica_election,
)
from controller.state_change import ControllerMovedError, PartitionStateWrite, StateChanges
from zk.znodes import NO_LEADER, LeaderIsrAndControllerEpoch

log = logging.getLogger(__name__)

OFFLINE = "offline"
CONTROLLED_SHUTDOWN = "controlled_shutdown"
PREFERRED = "preferred"


class PartitionState(enum.Enum):
    NON_EXISTENT = 3
    NEW = 0
    ONLINE = 1
    OFFLINE = 2


def partition_state(ctx: ControllerContext, tp: TopicPartition) -> PartitionState:
    if tp[1] not in ctx.assignments.get(tp[0], {}):
        return PartitionState.NON_EXISTENT
    lead = ctx.leadership.get(tp)
    if lead is None:
        return PartitionState.NEW
    if lead.state.leader != NO_LEADER and lead.state.leader in ctx.live:
        return PartitionState.ONLINE
    return PartitionState.OFFLINE


def unclean_allowed(ctx: ControllerContext, topic: str, broker_default: bool) -> bool:
    """The topic's unclean.leader.election.enable if it sets one, else the controller's broker config."""
    value = ctx.topic_configs.get(topic, {}).get("unclean.leader.election.enable")
    return broker_default if value is None else value.strip().lower() == "true"


def to_online(ctx: ControllerContext, partitions: list[TopicPartition], unclean_default: bool) -> StateChanges:
    """New -> Online for partitions without a state znode, Online/Offline -> Online (offline election)
    for the rest."""
    changes = StateChanges()
    for tp in partitions:
        if tp in ctx.leadership:
            changes.extend(elect(ctx, [tp], OFFLINE, unclean_default))
        else:
            changes.extend(initialize(ctx, [tp]))
    return changes


def trigger_online_partitions(ctx: ControllerContext, unclean_default: bool) -> StateChanges:
    """Kafka's triggerOnlinePartitionStateChange: every New or Offline partition of a topic that is not
    being deleted tries to come online."""
    return to_online(ctx, ctx.offline_partitions(), unclean_default)


def initialize(ctx: ControllerContext, partitions: list[TopicPartition]) -> StateChanges:
    """New -> Online: leader = first live replica, ISR = live replicas, leader epoch 0. A partition
    with no live replica stays New until one starts."""
    changes = StateChanges()
    for tp in partitions:
        live_replicas = [r for r in ctx.replicas(tp) if r in ctx.live]
        if not live_replicas:
            log.warning("partition %s-%d has no live replica; it stays new until one starts", *tp)
            changes.unchanged.append(tp)
            continue
        state = LeaderIsrAndControllerEpoch(leader=live_replicas[0], leader_epoch=0, isr=live_replicas,
                                            controller_epoch=ctx.epoch)
        changes.writes.append(PartitionStateWrite(tp, state, None, NO_LEADER, "initial", tuple(live_replicas),
                                                  is_new=True))
    return changes


def elect(ctx: ControllerContext, partitions: list[TopicPartition], strategy: str,
          unclean_default: bool = False, *, force_unclean: bool = False) -> StateChanges:
    """Online/Offline -> Online by ``strategy`` (offline, controlled_shutdown or preferred). Partitions whose
    leader and ISR would not change are left alone; so is an offline partition that stays offline, one
    whose preferred replica cannot lead, and one whose only live ISR member is shutting down (Kafka's election
    fails in those two: nothing is written, and the partition keeps its leader).

    ``force_unclean``: an admin's ElectLeaders(UNCLEAN) may elect out of the ISR whatever the topic says."""
    changes = StateChanges()
    for tp in partitions:
        lead = ctx.leadership.get(tp)
        if lead is None:
            continue
        state = lead.state
        _check_not_deposed(ctx, tp, state)
        replicas = ctx.replicas(tp)
        election = _run_strategy(ctx, tp, state, strategy, unclean_default, force_unclean)
        if election.leader == NO_LEADER and strategy in (PREFERRED, CONTROLLED_SHUTDOWN):
            if strategy == CONTROLLED_SHUTDOWN:
                # the state-change log line of Kafka's failed election; the broker hears of it as a remaining partition
                log.info("Failed to elect leader for partition %s-%d under strategy "
                         "ControlledShutdownPartitionLeaderElectionStrategy: no live ISR member other than the "
                         "shutting-down brokers %s (ISR %s); it stays led by %d", *tp, sorted(ctx.shutting_down),
                         state.isr, state.leader)
            changes.unchanged.append(tp)
            continue
        if election.leader == NO_LEADER and state.leader == NO_LEADER:
            changes.unchanged.append(tp)  # still offline: nothing to write
            continue
        if state.leader == election.leader and state.isr == election.isr:
            changes.unchanged.append(tp)
            continue
        new_state = state.with_changes(leader=election.leader, isr=election.isr,
                                       leader_epoch=state.leader_epoch + 1, controller_epoch=ctx.epoch)
        changes.writes.append(PartitionStateWrite(
            tp, new_state, lead.zk_version, state.leader, "unclean" if election.unclean else strategy,
            tuple(r for r in replicas if r in ctx.live_or_shutting_down)))
    return changes


def _run_strategy(ctx: ControllerContext, tp: TopicPartition, state: LeaderIsrAndControllerEpoch,
                  strategy: str, unclean_default: bool, force_unclean: bool = False) -> Election:
    replicas = ctx.replicas(tp)
    if strategy == CONTROLLED_SHUTDOWN:
        return controlled_shutdown_election(replicas, state.isr, ctx.live_or_shutting_down, ctx.shutting_down)
    if strategy == OFFLINE:
        return offline_partition_election(replicas, state.isr, ctx.live,
                                          force_unclean or unclean_allowed(ctx, tp[0], unclean_default))
    if strategy == PREFERRED:
        return preferred_replica_election(replicas, state.isr, ctx.live)
    raise ValueError(f"unknown election strategy {strategy!r}")


def _check_not_deposed(ctx: ControllerContext, tp: TopicPartition, state: LeaderIsrAndControllerEpoch) -> None:
    if state.controller_epoch > ctx.epoch:
        raise ControllerMovedError(f"{tp} was decided by controller epoch {state.controller_epoch}")


def partitions_to_move_for_shutdown(ctx: ControllerContext, broker: int) -> list[TopicPartition]:
    """Controlled shutdown concerns the broker's replicated partitions that are online and not being
    deleted (a single-replica partition has nowhere to move)."""
    return [tp for tp in ctx.partitions_on_broker(broker) if len(ctx.replicas(tp)) > 1
            and tp[0] not in ctx.topics_to_delete and tp in ctx.leadership
            and ctx.leadership[tp].state.leader != NO_LEADER]
