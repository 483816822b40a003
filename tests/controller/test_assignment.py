import random
from collections import Counter

import pytest
from kio.schema.errors import ErrorCode

from zk.admin import AdminError, plan_added_partitions
from zk.assignment import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    assign_added_partitions,
    assign_replicas_to_brokers,
    validate_topic_name,
)


def test_known_assignment_for_fixed_start_and_shift():
    # 5 brokers, start 0, shift 0: leaders round-robin; followers shifted, shift grows after a wrap.
    result = assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, start_index=0, next_replica_shift=0)
    assert result[0] == [0, 1, 2]
    assert result[1] == [1, 2, 3]
    assert result[4] == [4, 0, 1]
    assert result[5] == [0, 2, 3]   # second round: followers one further apart
    assert result[9] == [4, 1, 2]


def test_every_partition_has_distinct_replicas_and_leaders_spread_evenly():
    rng = random.Random(7)
    for brokers in ([1, 2, 3], [1, 2, 3, 4, 5, 6]):
        result = assign_replicas_to_brokers(brokers, 12, 3, rng=rng)
        assert all(len(set(r)) == 3 and set(r) <= set(brokers) for r in result.values())
        leaders = Counter(r[0] for r in result.values())
        assert max(leaders.values()) - min(leaders.values()) <= 1


def test_replication_factor_larger_than_brokers_is_refused():
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 live brokers"):
        assign_replicas_to_brokers([1, 2], 1, 3)
    with pytest.raises(InvalidPartitionsError):
        assign_replicas_to_brokers([1, 2], 0, 1)


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "with space", "slash/no", "ümlaut"])
def test_illegal_topic_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["orders", "a.b-c_d", "A" * 249, "__consumer_offsets"])
def test_legal_topic_names(name):
    validate_topic_name(name)


# --- partitions added to an existing topic (Kafka's AdminZkClient.createNewPartitionsAssignment) ---------------

def test_added_partitions_continue_the_round_robin_from_partition_0s_first_replica():
    # a 3-partition topic created with start 0, shift 0 on brokers 1..3
    existing = assign_replicas_to_brokers([1, 2, 3], 3, 3, start_index=0, next_replica_shift=0)
    added = assign_added_partitions([1, 2, 3], existing, 6)
    assert sorted(added) == [3, 4, 5]
    # partition 3 wraps the brokers: the follower shift grows by one, as at creation
    assert added == {3: [1, 3, 2], 4: [2, 1, 3], 5: [3, 2, 1]}
    # the same partitions a topic created with 6 at once would have had
    whole = assign_replicas_to_brokers([1, 2, 3], 6, 3, start_index=0, next_replica_shift=0)
    assert {p: whole[p] for p in (3, 4, 5)} == added


def test_added_partitions_start_at_the_first_broker_not_below_partition_0s_leader():
    existing = {0: [3, 4, 1], 1: [4, 1, 2]}
    added = assign_added_partitions([1, 2, 3, 4, 5], existing, 5)
    # start index 2 (broker 3) and shift 2, partitions numbered from 2
    assert added == assign_replicas_to_brokers([1, 2, 3, 4, 5], 3, 3, start_index=2, next_replica_shift=2,
                                               start_partition_id=2)
    # leader of partition p: broker index (p + start) % 5, as if the topic had been created with 5 partitions
    assert [added[p][0] for p in (2, 3, 4)] == [5, 1, 2]
    assert all(len(set(r)) == 3 for r in added.values())


def test_added_partitions_start_at_index_0_when_partition_0s_leader_is_above_every_live_broker():
    added = assign_added_partitions([1, 2], {0: [9, 1]}, 2)
    assert added == assign_replicas_to_brokers([1, 2], 1, 2, start_index=0, next_replica_shift=0,
                                               start_partition_id=1)


def test_added_partitions_keep_partition_0s_replication_factor():
    added = assign_added_partitions([1, 2, 3, 4], {0: [1, 2], 1: [2, 3]}, 4)
    assert all(len(r) == 2 for r in added.values())


def test_plan_refuses_fewer_or_as_many_partitions_with_kafkas_words():
    existing = {0: [1], 1: [2], 2: [3]}
    with pytest.raises(AdminError, match=r"^Topic currently has 3 partitions, which is higher than the requested 2\.$"
                       ) as fewer:
        plan_added_partitions("t", existing, 2, None, [1, 2, 3])
    assert fewer.value.error_code == ErrorCode.invalid_partitions
    with pytest.raises(AdminError, match=r"^Topic already has 3 partitions\.$") as same:
        plan_added_partitions("t", existing, 3, None, [1, 2, 3])
    assert same.value.error_code == ErrorCode.invalid_partitions


def test_plan_refuses_an_unknown_topic():
    with pytest.raises(AdminError, match="The topic 'gone' does not exist") as unknown:
        plan_added_partitions("gone", {}, 4, None, [1, 2, 3])
    assert unknown.value.error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize(("assignment", "words"), [
    ([[1, 4]], "Unknown broker\\(s\\) in replica assignment: 4"),
    ([[1, 2]], "Increasing the number of partitions by 2 but 1 assignments provided"),
    ([[1, 2], []], "Cannot have replication factor of 0 for partition id 3"),
    ([[1, 1], [2, 3]], "Duplicate brokers not allowed in replica assignment: 1, 1 for partition id 2"),
    ([[1, 2], [3]], "partition 0 has 2 while partition 3 has 1"),
])
def test_plan_refuses_a_bad_explicit_assignment(assignment, words):
    with pytest.raises(AdminError, match=words) as refused:
        plan_added_partitions("t", {0: [1, 2], 1: [2, 3]}, 4, assignment, [1, 2, 3])
    assert refused.value.error_code == ErrorCode.invalid_replica_assignment


def test_plan_takes_an_explicit_assignment_numbered_after_the_existing_partitions():
    assert plan_added_partitions("t", {0: [1, 2]}, 3, [[2, 3], [3, 1]], [1, 2, 3]) == {1: [2, 3], 2: [3, 1]}
