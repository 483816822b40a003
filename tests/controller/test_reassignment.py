"""Partition reassignment's decisions (KIP-455), without ZooKeeper: the replica sets a request makes, what is
refused, and each step's writes and requests, given a controller context."""

import pytest
from kio.schema.errors import ErrorCode

from controller import reassignment as ra
from controller.replica_state_machine import EPOCH_DURING_DELETE
from controller.state_change import ControllerMovedError, StopReplica
from controller.topic_deletion import decide_topic_deletion
from tests.controller.test_state_machines import EPOCH, context, kill

TP = ("t", 0)


def moving(ctx, replicas, adding=(), removing=()):
    ctx.assignments["t"][0] = list(replicas)
    ctx.adding_replicas[TP], ctx.removing_replicas[TP] = list(adding), list(removing)


# --- the replica sets -----------------------------------------------------------------------------------

def test_a_new_target_lists_the_target_first_then_the_original_replicas_left():
    moved = ra.ReplicaAssignment((1, 2, 3)).reassign_to([2, 3, 4])
    assert moved == ra.ReplicaAssignment((2, 3, 4, 1), adding=(4,), removing=(1,))
    assert moved.original == (2, 3, 1) and moved.target == (2, 3, 4) and moved.is_being_reassigned


def test_a_target_replacing_a_reassignment_keeps_the_original_replicas_not_the_earlier_additions():
    first = ra.ReplicaAssignment((1, 2, 3)).reassign_to([4, 5, 6])
    assert first.replicas == (4, 5, 6, 1, 2, 3)
    second = first.reassign_to([7, 2, 3])
    assert second == ra.ReplicaAssignment((7, 2, 3, 1), adding=(7,), removing=(1,))


def test_cancelling_goes_back_to_the_original_replicas_without_restoring_their_order():
    # Kafka's own example: [1,2,3] -> [3,4,2] is stored as [3,4,2,1]; cancelled, it is [3,2,1]
    ctx = context(live=(1, 2, 3, 4), states={TP: (1, [1, 2, 3], 5)})
    moving(ctx, [3, 4, 2, 1], adding=[4], removing=[1])
    assert ra.plan(ctx, TP, None) == ra.ReplicaAssignment((3, 2, 1))


def test_a_reordering_moves_no_replica():
    moved = ra.ReplicaAssignment((1, 2, 3)).reassign_to([3, 2, 1])
    assert moved == ra.ReplicaAssignment((3, 2, 1)) and not moved.is_being_reassigned


# --- what is refused --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("target", "error", "words"), [
    ([], ErrorCode.invalid_replica_assignment, "Empty replica list"),
    ([2, 2, 3], ErrorCode.invalid_replica_assignment, "Duplicate replica ids"),
    ([-1, 2, 3], ErrorCode.invalid_replica_assignment, "Invalid broker id"),
    ([2, 3, 9], ErrorCode.invalid_replica_assignment, "brokers that are not alive"),
])
def test_invalid_targets_are_refused_with_kafkas_errors(target, error, words):
    ctx = context(live=(1, 2, 3, 4), states={TP: (1, [1, 2, 3], 5)})
    refused = ra.plan(ctx, TP, target)
    assert isinstance(refused, ra.Refused) and refused.error == error and words in refused.message


def test_a_dead_broker_may_stay_in_the_target_but_not_be_added():
    ctx = context(live=(1, 2, 3, 4), states={TP: (1, [1, 2, 3], 5)})
    kill(ctx, 3, 4)
    assert ra.plan(ctx, TP, [3, 2, 1]) == ra.ReplicaAssignment((3, 2, 1))
    assert isinstance(ra.plan(ctx, TP, [4, 2, 1]), ra.Refused)


def test_unknown_partitions_and_topics_being_deleted_are_unknown():
    ctx = context(live=(1, 2, 3, 4), states={TP: (1, [1, 2, 3], 5)})
    assert ra.plan(ctx, ("t", 7), [1, 2, 3]).error == ErrorCode.unknown_topic_or_partition
    assert ra.plan(ctx, ("nope", 0), [1, 2, 3]).error == ErrorCode.unknown_topic_or_partition
    ctx.topics_to_delete.add("t")
    assert ra.plan(ctx, TP, [2, 3, 4]).error == ErrorCode.unknown_topic_or_partition


def test_cancelling_a_partition_that_is_not_moving_is_no_reassignment_in_progress():
    ctx = context(live=(1, 2, 3, 4), states={TP: (1, [1, 2, 3], 5)})
    assert ra.plan(ctx, TP, None).error == ErrorCode.no_reassignment_in_progress


# --- the steps ---------------------------------------------------------------------------------------------

def test_phase_a_bumps_the_leader_epoch_and_tells_every_replica_of_the_full_set():
    ctx = context(live=(1, 2, 3, 4), states={TP: (1, [1, 2, 3], 5)})
    moving(ctx, [2, 3, 4, 1], adding=[4], removing=[1])
    assert not ra.is_complete(ctx, TP)
    (write,) = ra.bump_leader_epoch(ctx, [TP]).writes
    assert (write.state.leader, write.state.isr, write.state.leader_epoch) == (1, [1, 2, 3], 6)
    assert write.state.controller_epoch == EPOCH and write.expected_zk_version == 4
    assert write.leader_and_isr_to == (2, 3, 4, 1) and write.election == "reassignment"


def test_phase_a_leaves_a_partition_without_a_live_leader_to_the_next_election():
    ctx = context(live=(1, 2, 3, 4), states={TP: (1, [1, 2, 3], 5)})
    moving(ctx, [2, 3, 4, 1], adding=[4], removing=[1])
    kill(ctx, 1)
    changes = ra.bump_leader_epoch(ctx, [TP])
    assert not changes.writes and changes.unchanged == [TP]


def test_the_reassignment_is_complete_once_every_target_replica_is_in_the_isr():
    ctx = context(live=(1, 2, 3, 4), states={TP: (1, [1, 2, 3, 4], 6)})
    moving(ctx, [2, 3, 4, 1], adding=[4], removing=[1])
    assert ra.is_complete(ctx, TP)


def test_a_leader_outside_the_target_gives_way_to_the_first_live_isr_member_of_the_target():
    ctx = context(live=(1, 2, 3, 4), assignments={"t": {0: [4, 3, 2]}}, states={TP: (1, [1, 2, 3, 4], 6)})
    (write,) = ra.elect_in_target(ctx, [TP]).writes
    assert (write.state.leader, write.state.isr, write.state.leader_epoch) == (4, [1, 2, 3, 4], 7)
    assert write.previous_leader == 1 and write.leader_and_isr_to == (4, 3, 2)


def test_a_leader_in_the_target_stays_and_only_the_epoch_moves():
    ctx = context(live=(1, 2, 3, 4), assignments={"t": {0: [2, 3, 4]}}, states={TP: (3, [1, 2, 3, 4], 6)})
    (write,) = ra.elect_in_target(ctx, [TP]).writes
    assert (write.state.leader, write.state.leader_epoch) == (3, 7)


def test_a_dead_leader_in_the_target_is_replaced_too():
    ctx = context(live=(1, 2, 3, 4), assignments={"t": {0: [2, 3, 4]}}, states={TP: (2, [2, 3, 4], 6)})
    kill(ctx, 2)
    (write,) = ra.elect_in_target(ctx, [TP]).writes
    assert write.state.leader == 3


def test_removed_replicas_leave_the_isr_and_are_stopped_with_delete():
    ctx = context(live=(1, 2, 3, 4), assignments={"t": {0: [2, 3, 4]}}, states={TP: (2, [1, 2, 3, 4], 7)})
    changes = ra.stop_removed_replicas(ctx, [TP], [1])
    (write,) = changes.writes
    assert (write.state.leader, write.state.isr, write.state.leader_epoch) == (2, [2, 3, 4], 8)
    assert write.leader_and_isr_to == (2, 3, 4)
    assert changes.stop_replicas == [StopReplica(1, TP, delete=True, leader_epoch=EPOCH_DURING_DELETE)]


def test_a_removed_replica_out_of_the_isr_is_only_stopped():
    ctx = context(live=(1, 2, 3, 4), assignments={"t": {0: [1, 2, 3]}}, states={TP: (1, [1, 2, 3], 7)})
    changes = ra.stop_removed_replicas(ctx, [TP], [4])
    assert not changes.writes and [s.broker for s in changes.stop_replicas] == [4]


def test_a_removed_leader_hands_over_to_a_live_isr_member_left():
    ctx = context(live=(1, 2, 3, 4), assignments={"t": {0: [1, 2, 3]}}, states={TP: (4, [4, 1, 2, 3], 7)})
    (write,) = ra.stop_removed_replicas(ctx, [TP], [4]).writes
    assert (write.state.leader, write.state.isr) == (1, [1, 2, 3])


def test_a_state_written_by_a_newer_controller_means_we_were_deposed():
    ctx = context(live=(1, 2, 3, 4), states={TP: (1, [1, 2, 3], 5)})
    moving(ctx, [2, 3, 4, 1], adding=[4], removing=[1])
    ctx.leadership[TP].state = ctx.leadership[TP].state.with_changes(controller_epoch=EPOCH + 1)
    with pytest.raises(ControllerMovedError):
        ra.bump_leader_epoch(ctx, [TP])


def test_a_topic_being_reassigned_waits_to_be_deleted():
    ctx = context(live=(1, 2, 3, 4), states={TP: (1, [1, 2, 3], 5)})
    moving(ctx, [2, 3, 4, 1], adding=[4], removing=[1])
    decision = decide_topic_deletion(ctx, ["t"], delete_topic_enable=True)
    assert decision.ready == [] and "t" in decision.waiting
    ctx.adding_replicas.clear()
    ctx.removing_replicas.clear()
    assert decide_topic_deletion(ctx, ["t"], delete_topic_enable=True).ready == ["t"]


def test_the_automatic_preferred_election_waits_while_a_partition_is_being_reassigned():
    from controller.preferred_election import auto_rebalance_candidates

    ctx = context(live=(1, 2, 3, 4), assignments={"t": {0: [1, 2, 3], 1: [1, 2, 3]}},
                  states={TP: (2, [1, 2, 3], 5), ("t", 1): (2, [1, 2, 3], 5)})
    assert auto_rebalance_candidates(ctx, 10) == [TP, ("t", 1)]
    ctx.assignments["t"][1] = [2, 3, 4, 1]
    ctx.adding_replicas[("t", 1)], ctx.removing_replicas[("t", 1)] = [4], [1]
    assert auto_rebalance_candidates(ctx, 10) == []
