"""Preferred leader election without ZooKeeper: the strategy, the auto-rebalance decision and the sorting of an
ElectLeaders request, on a controller context built by hand."""

from kio.schema.errors import ErrorCode

from controller import partition_state_machine as psm
from controller import preferred_election as pe
from controller.election import preferred_replica_election
from tests.controller.test_state_machines import EPOCH, context, kill


def test_preferred_replica_leads_when_alive_and_in_isr_and_isr_is_kept():
    result = preferred_replica_election([2, 1, 3], isr=[1, 3, 2], live={1, 2, 3})
    assert result.leader == 2 and result.isr == [1, 3, 2] and not result.unclean


def test_preferred_election_fails_when_the_preferred_replica_is_dead_or_out_of_the_isr():
    assert preferred_replica_election([2, 1, 3], isr=[1, 3], live={1, 2, 3}).leader == -1
    assert preferred_replica_election([2, 1, 3], isr=[1, 2, 3], live={1, 3}).leader == -1


def test_state_machine_writes_the_preferred_leader_with_a_new_leader_epoch():
    ctx = context(assignments={"t": {0: [2, 1, 3]}}, states={("t", 0): (1, [1, 2, 3], 5)})
    (write,) = psm.elect(ctx, [("t", 0)], psm.PREFERRED).writes
    assert (write.state.leader, write.state.isr, write.state.leader_epoch) == (2, [1, 2, 3], 6)
    assert write.state.controller_epoch == EPOCH and write.expected_zk_version == 4
    assert write.election == "preferred" and write.previous_leader == 1 and write.leader_and_isr_to == (2, 1, 3)


def test_state_machine_writes_nothing_when_the_preferred_replica_cannot_lead():
    ctx = context(assignments={"t": {0: [2, 1, 3]}}, states={("t", 0): (1, [1, 3], 5)})
    changes = psm.elect(ctx, [("t", 0)], psm.PREFERRED)
    assert changes.writes == [] and changes.unchanged == [("t", 0)]


def test_imbalance_ratio_counts_partitions_preferring_a_broker_but_led_elsewhere():
    ctx = context(assignments={"t": {0: [1, 2], 1: [1, 2], 2: [1, 2], 3: [2, 1]}},
                  states={("t", 0): (2, [1, 2], 1), ("t", 1): (1, [1, 2], 0), ("t", 3): (2, [1, 2], 0)})
    imbalance = pe.leader_imbalance(ctx)
    # t-2 has no state znode yet: it counts as preferring broker 1 but not as led elsewhere
    assert (imbalance[1].preferred, imbalance[1].led_elsewhere) == (3, 1)
    assert (imbalance[2].preferred, imbalance[2].led_elsewhere) == (1, 0)
    assert pe.preferred_replica_imbalance_count(ctx) == 1


def test_auto_rebalance_moves_the_partitions_of_a_broker_above_the_percentage():
    ctx = context(assignments={"t": {0: [1, 2], 1: [1, 2], 2: [2, 1]}},
                  states={("t", 0): (2, [1, 2], 1), ("t", 1): (1, [1, 2], 0), ("t", 2): (2, [2, 1], 0)})
    assert pe.auto_rebalance_candidates(ctx, imbalance_percentage=10) == [("t", 0)]


def test_auto_rebalance_needs_a_ratio_strictly_above_the_percentage():
    assignments = {"t": {p: [1, 2] for p in range(4)}}
    states = {("t", p): (2 if p == 0 else 1, [1, 2], 0) for p in range(4)}  # 1 of 4 led elsewhere: 25 %
    ctx = context(assignments=assignments, states=states)
    assert pe.auto_rebalance_candidates(ctx, imbalance_percentage=25) == []
    assert pe.auto_rebalance_candidates(ctx, imbalance_percentage=24) == [("t", 0)]


def test_auto_rebalance_skips_partitions_whose_preferred_replica_cannot_lead():
    ctx = context(assignments={"t": {0: [1, 2], 1: [1, 2]}, "u": {0: [3, 2]}},
                  states={("t", 0): (2, [2], 1), ("t", 1): (2, [1, 2], 1), ("u", 0): (2, [2, 3], 1)})
    kill(ctx, 3)
    # t-0: broker 1 has not caught up yet (not in the ISR); u-0: broker 3 is dead
    assert pe.auto_rebalance_candidates(ctx, imbalance_percentage=10) == [("t", 1)]


def test_auto_rebalance_leaves_topics_being_deleted_alone():
    ctx = context(assignments={"t": {0: [1, 2]}}, states={("t", 0): (2, [1, 2], 1)})
    ctx.topics_to_delete.add("t")
    assert pe.auto_rebalance_candidates(ctx, imbalance_percentage=0) == []
    assert pe.leader_imbalance(ctx) == {}


def test_shutting_down_preferred_replica_is_not_given_leadership():
    ctx = context(assignments={"t": {0: [1, 2]}}, states={("t", 0): (2, [1, 2], 1)})
    ctx.shutting_down.add(1)
    assert pe.auto_rebalance_candidates(ctx, imbalance_percentage=0) == []


def test_an_election_request_is_sorted_with_kafkas_error_codes():
    ctx = context(assignments={"t": {0: [1, 2], 1: [1, 2]}, "gone": {0: [1, 2]}},
                  states={("t", 0): (2, [1, 2], 1), ("t", 1): (1, [1, 2], 0), ("gone", 0): (1, [1, 2], 0)})
    ctx.topics_to_delete.add("gone")
    plan = pe.plan_election(ctx, [("t", 0), ("t", 1), ("t", 7), ("nope", 0), ("gone", 0)], pe.ElectionType.PREFERRED)
    assert plan.electable == [("t", 0)]
    assert {tp: r.error for tp, r in plan.answered.items()} == {
        ("t", 1): ErrorCode.election_not_needed, ("t", 7): ErrorCode.unknown_topic_or_partition,
        ("nope", 0): ErrorCode.unknown_topic_or_partition, ("gone", 0): ErrorCode.invalid_topic_exception}


def test_unclean_request_elects_only_partitions_without_a_live_leader():
    ctx = context(assignments={"t": {0: [1, 2], 1: [2, 3]}}, states={("t", 0): (1, [1], 3), ("t", 1): (2, [2, 3], 0)})
    kill(ctx, 1)
    plan = pe.plan_election(ctx, [("t", 0), ("t", 1)], pe.ElectionType.UNCLEAN)
    assert plan.electable == [("t", 0)] and plan.answered[("t", 1)].error == ErrorCode.election_not_needed
    (write,) = psm.elect(ctx, plan.electable, psm.OFFLINE, False, force_unclean=True).writes
    assert (write.state.leader, write.state.isr, write.election) == (2, [2], "unclean")


def test_admin_unclean_overrides_a_topic_that_forbids_it():
    ctx = context(assignments={"t": {0: [1, 2]}}, states={("t", 0): (1, [1], 3)},
                  configs={"t": {"unclean.leader.election.enable": "false"}})
    kill(ctx, 1)
    assert psm.elect(ctx, [("t", 0)], psm.OFFLINE, True).writes[0].state.leader == -1  # the topic's false wins
    assert psm.elect(ctx, [("t", 0)], psm.OFFLINE, True, force_unclean=True).writes[0].state.leader == 2


def test_results_after_the_election_step():
    ctx = context(assignments={"t": {0: [1, 2], 1: [3, 2]}}, states={("t", 0): (1, [1, 2], 2), ("t", 1): (2, [2], 0)})
    assert pe.election_result(ctx, ("t", 0), pe.ElectionType.PREFERRED) == pe.ElectionResult(ErrorCode.none, None, 1)
    failed = pe.election_result(ctx, ("t", 1), pe.ElectionType.PREFERRED)
    assert failed.error == ErrorCode.preferred_leader_not_available and "3" in failed.message
    kill(ctx, 2)
    assert pe.election_result(ctx, ("t", 1), pe.ElectionType.UNCLEAN).error == ErrorCode.eligible_leaders_not_available
