"""Partition reassignment (KIP-455; Kafka 2.8's KafkaController.onPartitionReassignment), pure: which target a
request makes, whether it is valid, and the writes and requests of each step, returned as data.

Vocabulary as Kafka's: ORS the original replicas, TRS the target, RS = TRS then the rest of ORS (what the topic znode
lists while moving), AR = TRS - ORS (adding), RR = ORS - TRS (removing). The steps:

* start: RS, AR and RR are written to the topic znode; replicas of an earlier RS left out of the new one are stopped
  and deleted (a replaced or cancelled reassignment); if TRS is not yet in the ISR, the leader epoch is bumped and
  every replica of RS hears LeaderAndIsr, so the new ones create their logs and fetch;
* completion, once TRS is a subset of the ISR (re-checked on every ISR change notification): the assignment in
  memory becomes TRS; a leader outside TRS (or dead) is replaced by the first live ISR member of TRS, else the epoch
  is bumped; RR leave the ISR and get StopReplica with delete; the topic znode is written with RS = TRS and no AR/RR.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from controller.context import ControllerContext, TopicPartition
from controller.partition_state_machine import _check_not_deposed
from controller.replica_state_machine import EPOCH_DURING_DELETE
from controller.state_change import PartitionStateWrite, StateChanges, StopReplica
from zk.znodes import NO_LEADER

REASSIGNMENT = "reassignment"


@dataclass(frozen=True)
class ReplicaAssignment:
    """A partition's replicas as its topic znode holds them (Kafka's ReplicaAssignment)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: list[int] | tuple[int, ...]) -> ReplicaAssignment:
        """RS = target then the original replicas not in it; an earlier reassignment's adding replicas are not
        original, so a new target replaces it rather than adds to it."""
        original = self.original
        replicas = tuple(dict.fromkeys([*target, *original]))
        return ReplicaAssignment(replicas, tuple(r for r in replicas if r not in original),
                                 tuple(r for r in replicas if r not in target))


@dataclass(frozen=True)
class Refused:
    error: ErrorCode
    message: str


def current_assignment(ctx: ControllerContext, tp: TopicPartition) -> ReplicaAssignment:
    return ReplicaAssignment(tuple(ctx.replicas(tp)), tuple(ctx.adding_replicas.get(tp, ())),
                             tuple(ctx.removing_replicas.get(tp, ())))


def plan(ctx: ControllerContext, tp: TopicPartition, target: list[int] | None) -> ReplicaAssignment | Refused:
    """What an AlterPartitionReassignments entry (or a /admin/reassign_partitions one) asks for, checked as Kafka's
    processApiPartitionReassignment and validateReplicas check it. ``target`` None cancels."""
    topic, partition = tp
    if topic not in ctx.assignments or topic in ctx.topics_to_delete or partition not in ctx.assignments[topic]:
        return Refused(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
    current = current_assignment(ctx, tp)
    if target is None:
        if not current.is_being_reassigned:
            return Refused(ErrorCode.no_reassignment_in_progress,
                           f"No reassignment of {topic}-{partition} is in progress: nothing to cancel.")
        return current.reassign_to(current.original)
    if not target:
        return Refused(ErrorCode.invalid_replica_assignment, "Empty replica list specified in partition reassignment.")
    if len(set(target)) != len(target):
        return Refused(ErrorCode.invalid_replica_assignment,
                       f"Duplicate replica ids in partition reassignment replica list: {list(target)}")
    if any(r < 0 for r in target):
        return Refused(ErrorCode.invalid_replica_assignment, f"Invalid broker id in replica list: {list(target)}")
    moved = current.reassign_to(target)
    if not set(moved.adding) <= set(ctx.live_brokers):
        return Refused(ErrorCode.invalid_replica_assignment,
                       f"Replica assignment has brokers that are not alive. Replica list: {list(target)}, "
                       f"live broker list: {sorted(ctx.live_brokers)}")
    return moved


def is_complete(ctx: ControllerContext, tp: TopicPartition) -> bool:
    """Kafka's isReassignmentComplete: every target replica is in the ISR as last read from ZooKeeper."""
    lead = ctx.leadership.get(tp)
    if lead is None:
        return False
    return set(current_assignment(ctx, tp).target) <= set(lead.state.isr)


def bump_leader_epoch(ctx: ControllerContext, partitions: list[TopicPartition]) -> StateChanges:
    """Phase A (and Kafka's step for a leader already in the target): same leader and ISR, leader epoch + 1,
    LeaderAndIsr to every live replica of the assignment in memory, so new ones start fetching and the leader counts
    them as followers. A partition without a live leader is left to the next election."""
    changes = StateChanges()
    for tp in partitions:
        lead = ctx.leadership.get(tp)
        if lead is None or lead.state.leader == NO_LEADER or lead.state.leader not in ctx.live_brokers:
            changes.unchanged.append(tp)
            continue
        _check_not_deposed(ctx, tp, lead.state)
        state = lead.state.with_changes(leader_epoch=lead.state.leader_epoch + 1, controller_epoch=ctx.epoch)
        changes.writes.append(PartitionStateWrite(tp, state, lead.zk_version, lead.state.leader, REASSIGNMENT,
                                                  _live(ctx, ctx.replicas(tp))))
    return changes


def elect_in_target(ctx: ControllerContext, partitions: list[TopicPartition]) -> StateChanges:
    """Completion step B3, once the assignment in memory is the target: a leader outside it or dead gives way to the
    first target replica that is live and in the ISR (Kafka's ReassignPartitionLeaderElectionStrategy; ISR
    unchanged), otherwise the epoch is bumped. LeaderAndIsr to the target's live replicas."""
    changes = StateChanges()
    for tp in partitions:
        lead = ctx.leadership.get(tp)
        target = ctx.replicas(tp)
        if lead is None:
            changes.unchanged.append(tp)
            continue
        _check_not_deposed(ctx, tp, lead.state)
        leader = lead.state.leader
        if leader not in target or leader not in ctx.live:
            leader = next((r for r in target if r in ctx.live and r in lead.state.isr), NO_LEADER)
            if leader == NO_LEADER:
                changes.unchanged.append(tp)  # Kafka's election fails too; the removal below still happens
                continue
        state = lead.state.with_changes(leader=leader, leader_epoch=lead.state.leader_epoch + 1,
                                        controller_epoch=ctx.epoch)
        changes.writes.append(PartitionStateWrite(tp, state, lead.zk_version, lead.state.leader, REASSIGNMENT,
                                                  _live(ctx, target)))
    return changes


def stop_removed_replicas(ctx: ControllerContext, partitions: list[TopicPartition], removed: list[int]
                          ) -> StateChanges:
    """``removed`` replicas go Offline then ReplicaDeletionStarted: out of the ISR (leader epoch + 1; a removed leader
    gives way to the first live ISR member left), then StopReplica with delete, so their log directory goes. Kafka
    shrinks the ISR once per removed replica; one write for all of them ends in the same state."""
    changes = StateChanges()
    for tp in partitions:
        for replica in removed:
            changes.stop_replicas.append(StopReplica(replica, tp, delete=True, leader_epoch=EPOCH_DURING_DELETE))
        lead = ctx.leadership.get(tp)
        if lead is None or not set(removed) & set(lead.state.isr):
            continue
        _check_not_deposed(ctx, tp, lead.state)
        isr = [r for r in lead.state.isr if r not in removed]
        if not isr:
            continue  # the controller never writes an empty ISR
        leader = lead.state.leader
        if leader in removed:
            leader = next((r for r in ctx.replicas(tp) if r in ctx.live and r in isr), NO_LEADER)
        state = lead.state.with_changes(leader=leader, isr=isr, leader_epoch=lead.state.leader_epoch + 1,
                                        controller_epoch=ctx.epoch)
        changes.writes.append(PartitionStateWrite(tp, state, lead.zk_version, lead.state.leader, "isr_removal",
                                                  _live(ctx, ctx.replicas(tp))))
    return changes


def _live(ctx: ControllerContext, replicas: list[int] | tuple[int, ...]) -> tuple[int, ...]:
    return tuple(r for r in replicas if r in ctx.live_or_shutting_down)
