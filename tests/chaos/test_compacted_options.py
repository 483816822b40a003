"""`kafkasim chaos run --compacted-topics N`: the queue workload's last N topics are compacted, created with settings
that make the cleaner run within a short run, and written with keys and tombstones."""

from __future__ import annotations

import pytest

from cluster.chaos.command import _settings
from cluster.chaos.runner import ChaosSettings, compacted_topics
from cluster.chaos.txn_workload import TxnWorkloadSettings
from cluster.chaos.workload import WorkloadSettings
from cluster.cli import _parser
from cluster.processes import ClusterError


def settings(*options: str):
    return _settings(_parser().parse_args(["chaos", "run", "--nemesis", "kill", *options]), seed=3)


def test_a_chaos_run_compacts_the_last_of_its_topics_by_default():
    assert settings().workload.compacted_topics == ("chaos-b",)
    assert ChaosSettings(seed=1).workload.compacted_topics == ("chaos-b",)
    assert compacted_topics(settings().workload) == {"chaos-b": 5000}


def test_the_option_sets_how_many_topics_are_compacted():
    assert settings("--compacted-topics", "0").workload.compacted_topics == ()
    assert settings("--compacted-topics", "2").workload.compacted_topics == ("chaos-a", "chaos-b")


@pytest.mark.parametrize("count", ["-1", "3"])
def test_more_compacted_topics_than_the_workload_has_are_refused(count):
    with pytest.raises(ClusterError, match="--compacted-topics takes 0 to 2"):
        settings("--compacted-topics", count)


def test_the_txn_workload_refuses_compacted_topics_and_has_none():
    with pytest.raises(ClusterError, match="the queue workload's"):
        settings("--workload", "txn", "--compacted-topics", "1")
    workload = settings("--workload", "txn").workload
    assert compacted_topics(workload) == {}
    assert TxnWorkloadSettings().input_settings().compacted_topics == ()


def test_a_workload_built_in_code_compacts_nothing_unless_asked():
    assert WorkloadSettings(topics=("replication-test",)).compacted_topics == ()


def test_a_compacted_topic_is_created_so_that_its_cleaner_runs_within_a_short_run():
    workload = WorkloadSettings(compacted=1)
    config = workload.topic_config("chaos-b")
    assert config["cleanup.policy"] == "compact"
    assert int(config["segment.ms"]) <= 5000 and float(config["min.cleanable.dirty.ratio"]) < 0.5
    assert config["min.compaction.lag.ms"] == "0" and config["delete.retention.ms"] == "5000"
    assert workload.topic_config("chaos-a") == {}
