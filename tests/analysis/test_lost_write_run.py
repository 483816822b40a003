"""A run that loses acknowledged writes on purpose (scenario 5, unclean leader election), and the analysis
that must say which: m5..m9 were acknowledged by A with ISR [A], then B, never in sync for them, was
elected uncleanly and took x at offset 5; A came back and truncated its m5..m9 away."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from analysis.report import analyze_run
from tests.analysis.runs import Producer, settle_and_collect
from tests.harness import start_cluster
from tests.replication.support import (
    SESSION_S,
    make_topic,
    partition_state,
    wait_for_identical_replicas,
    wait_for_isr,
    wait_for_leader,
)

pytestmark = [pytest.mark.spark, pytest.mark.processes, pytest.mark.slow]
A, B = 1, 2
TOPIC = "gamble"


@pytest.fixture(scope="module")
def lost_write_run(tmp_path_factory: pytest.TempPathFactory, zk_server: str) -> Iterator:
    base = tmp_path_factory.mktemp("unclean")
    cluster = start_cluster(base, zk_server, brokers=2)
    try:
        make_topic(cluster, TOPIC, [A, B], {"unclean.leader.election.enable": "true"})
        producer = Producer(cluster, TOPIC)
        producer.produce(A, [b"m%d" % i for i in range(5)])
        wait_for_identical_replicas(cluster, TOPIC, [A, B], 10)
        cluster.kill9(B)
        wait_for_isr(cluster, TOPIC, [A], SESSION_S + 15)
        assert producer.produce(A, [b"m%d" % i for i in range(5, 10)]) == 5   # acknowledged, ISR [A]
        cluster.kill9(A)
        cluster.start(B)
        wait_for_leader(cluster, TOPIC, B, SESSION_S + 15)
        assert producer.produce(B, [b"x"]) == 5
        cluster.start(A)
        wait_for_isr(cluster, TOPIC, [A, B], 20)
        wait_for_identical_replicas(cluster, TOPIC, [A, B], 10)
        assert partition_state(cluster, TOPIC).leader == B
        producer.history.close()
        settle_and_collect(cluster, TOPIC, base / "run")
        yield base / "run"
    finally:
        cluster.stop_all()


def test_the_acknowledged_writes_the_unclean_election_lost_are_flagged_with_their_values(spark, lost_write_run):
    result = analyze_run(spark, lost_write_run)
    assert result.acknowledged_writes == 11
    missing = result.missing_writes.sort_values("acknowledged_offset")
    assert list(missing.value) == ["m5", "m6", "m7", "m8", "m9"]
    assert list(missing.acknowledged_offset) == [5, 6, 7, 8, 9]
    assert list(missing.now_at_offset.fillna("-")) == ["x", "-", "-", "-", "-"]
    assert set(missing.final_replica.dropna()) == {B}

    elections = result.timeline[result.timeline.change == "unclean"]
    assert list(elections.leader) == [B]
    truncated = result.truncations
    assert list(zip(truncated.replica, truncated.from_offset, truncated.to_offset, strict=True)) == [(A, 10, 5)]
    assert truncated.bytes_dropped.iloc[0] > 5 * len(b"m5")   # the five records and their batch header
