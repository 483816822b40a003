"""max.broker.partitions (KIP-578): the count is checked before anything is allocated, the assignment after."""

import time
import tracemalloc

import pytest
from kio.schema.errors import ErrorCode

from zk.admin import AdminError, plan_added_partitions
from zk.assignment import PartitionLimit, PartitionLimitError, assign_replicas_to_brokers, hosted_replicas

BROKERS = [1, 2, 3]
INT32_MAX = 2**31 - 1


def test_a_forged_partition_count_is_refused_by_arithmetic_alone():
    limit = PartitionLimit(10_000)
    tracemalloc.start()
    started = time.monotonic()
    with pytest.raises(PartitionLimitError, match=r"max\.broker\.partitions=10000"):
        limit.check_count(BROKERS, INT32_MAX, 3)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 100_000  # bytes: nothing proportional to the count was built
    assert time.monotonic() - started < 1


def test_the_count_that_exactly_fills_the_brokers_is_taken_and_one_more_is_not():
    limit = PartitionLimit(10, hosted={1: 4, 2: 4, 3: 4})  # room for 6 + 6 + 6 = 18 replicas
    limit.check_count(BROKERS, 6, 3)
    with pytest.raises(PartitionLimitError, match="room for 18"):
        limit.check_count(BROKERS, 7, 3)


def test_a_broker_already_over_the_limit_gives_no_room_and_takes_none_from_the_others():
    limit = PartitionLimit(10, hosted={1: 25})
    with pytest.raises(PartitionLimitError, match="room for 20"):
        limit.check_count(BROKERS, 7, 3)


def test_an_assignment_that_leaves_one_broker_above_the_limit_is_refused_naming_it():
    limit = PartitionLimit(5, hosted={2: 4})
    limit.check_assignment({0: [1, 3]})
    with pytest.raises(PartitionLimitError, match="broker 2 would host 6"):
        limit.check_assignment({0: [2, 1], 1: [2, 3]})


def test_hosted_replicas_counts_every_replica_of_every_partition():
    assert hosted_replicas([[1, 2, 3], [2, 3], [3]]) == {1: 1, 2: 2, 3: 3}


def test_the_limit_agrees_with_the_assignment_kafka_makes():
    limit = PartitionLimit(100)
    limit.check_count(BROKERS, 100, 3)
    limit.check_assignment(assign_replicas_to_brokers(BROKERS, 100, 3))


def test_added_partitions_past_the_limit_are_a_policy_violation_before_they_are_assigned():
    existing = {0: [1, 2, 3]}
    with pytest.raises(AdminError, match=r"max\.broker\.partitions=50") as refused:
        plan_added_partitions("t", existing, INT32_MAX, None, BROKERS, PartitionLimit(50, {1: 1, 2: 1, 3: 1}))
    assert refused.value.error_code == ErrorCode.policy_violation
    explicit = [[1, 2, 3]] * 2
    with pytest.raises(AdminError, match="broker 1 would host 3") as refused:
        plan_added_partitions("t", existing, 3, explicit, BROKERS, PartitionLimit(2, {1: 1, 2: 1, 3: 1}))
    assert refused.value.error_code == ErrorCode.policy_violation
