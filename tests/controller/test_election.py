from controller.election import (
    controlled_shutdown_election,
    offline_partition_election,
    remove_replica_from_isr,
)


def test_offline_election_picks_first_live_isr_member_in_assignment_order():
    result = offline_partition_election([3, 1, 2], isr=[1, 2, 3], live={1, 2}, unclean_allowed=False)
    assert result.leader == 1 and result.isr == [1, 2] and not result.unclean


def test_no_live_isr_member_means_offline_and_isr_kept():
    result = offline_partition_election([1, 2, 3], isr=[1], live={2, 3}, unclean_allowed=False)
    assert result.leader == -1 and result.isr == [1]


def test_unclean_election_picks_first_live_replica_and_shrinks_isr_to_it():
    result = offline_partition_election([1, 2, 3], isr=[1], live={3, 2}, unclean_allowed=True)
    assert result.leader == 2 and result.isr == [2] and result.unclean


def test_unclean_is_never_used_while_an_isr_member_lives():
    result = offline_partition_election([1, 2, 3], isr=[3], live={2, 3}, unclean_allowed=True)
    assert result.leader == 3 and not result.unclean


def test_controlled_shutdown_moves_leadership_and_drops_the_broker_from_isr():
    result = controlled_shutdown_election([1, 2, 3], isr=[1, 2, 3], live_or_shutting_down={1, 2, 3},
                                          shutting_down={1})
    assert result.leader == 2 and result.isr == [2, 3]


def test_controlled_shutdown_without_another_isr_member_fails():
    result = controlled_shutdown_election([1, 2], isr=[1], live_or_shutting_down={1, 2}, shutting_down={1})
    assert result.leader == -1


def test_isr_removal_keeps_last_member_and_clears_leader():
    assert remove_replica_from_isr(2, [1, 2, 3], 3) == (2, [1, 2])
    assert remove_replica_from_isr(2, [2, 3], 2) == (-1, [3])
    assert remove_replica_from_isr(2, [2], 2) == (-1, [2])
