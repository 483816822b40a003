import random
from collections import Counter

import pytest

from zk.assignment import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
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
