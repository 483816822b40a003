"""`kafkasim chaos run --workload txn`'s options become the txn workload's settings; combinations that mean the queue
workload are refused with the reason."""

from __future__ import annotations

import pytest

from cluster.chaos.command import _settings
from cluster.chaos.txn_workload import TxnWorkloadSettings
from cluster.chaos.workload import WorkloadSettings
from cluster.cli import _parser
from cluster.processes import ClusterError


def settings(*options: str):
    return _settings(_parser().parse_args(["chaos", "run", "--nemesis", "kill", *options]), seed=3)


def test_the_txn_workloads_options_reach_its_settings():
    workload = settings("--workload", "txn", "--transformers", "4", "--transaction-size", "7", "--rate", "50",
                        "--no-random-aborts").workload
    assert isinstance(workload, TxnWorkloadSettings)
    assert (workload.transformers, workload.transaction_size, workload.rate, workload.abort_share) == (4, 7, 50, 0)
    assert workload.topics == ("chaos-txn-input", "chaos-txn-output")
    assert settings("--workload", "txn").workload.abort_share == 0.1


def test_the_queue_workload_stays_the_default():
    assert isinstance(settings().workload, WorkloadSettings)


@pytest.mark.parametrize(("options", "message"), [
    (("--acks", "1"), "idempotent acks=all"),
    (("--no-idempotent",), "idempotent acks=all"),
    (("--transformers", "0"), "at least 1"),
])
def test_options_that_do_not_fit_the_txn_workload_are_refused(options, message):
    with pytest.raises(ClusterError, match=message):
        settings("--workload", "txn", *options)


def test_a_run_against_a_cluster_kafkasim_did_not_start_refuses_the_txn_workload(tmp_path):
    from cluster.chaos.external import run_against

    with pytest.raises(ClusterError, match="only the queue workload"):
        run_against(_settings(_parser().parse_args(["chaos", "run", "--workload", "txn", "--nemesis", "none"]), 1),
                    "127.0.0.1:1", tmp_path / "run")
    assert not (tmp_path / "run").exists()
