"""`kafkasim chaos matrix`: Kafka's replication test (tests/kafkatest/tests/core/replication_test.py) on kafkasim,
one chaos run per cell of the matrix, each checked like any chaos run and shown as one row."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from cluster.chaos.checker import CheckResult
from cluster.chaos.history import Recorder
from cluster.chaos.matrix import REPLICATION_MATRIX, ReplicationCell
from cluster.chaos.nemesis import Nemesis
from cluster.chaos.runner import ChaosSettings, run_chaos
from cluster.chaos.workload import WorkloadSettings
from cluster.processes import ClusterError

TOPIC = "replication-test"
SESSION_S = 2.0  # the classroom profile's session timeout


def cell_settings(cell: ReplicationCell, duration_s: float, seed: int) -> ChaosSettings:
    return ChaosSettings(
        seed=seed, duration_s=duration_s, nemesis=(),
        overrides={"min.insync.replicas": str(cell.min_insync_replicas), "unclean.leader.election.enable": "false"},
        # Kafka's VerifiableProducer sends 1000 messages/s; one producer and one reader, as in the test, on a topic
        # that is not compacted (every acknowledged value must survive)
        workload=WorkloadSettings(topics=(TOPIC,), partitions=cell.partitions, producers=1, readers=1,
                                  group_members=0, rate=500.0, acks=cell.acks, compacted=0))


def cell_script(cell: ReplicationCell) -> Callable[[Nemesis, Recorder], None]:
    kind = "kill" if cell.signal == "SIGKILL" else "bounce"

    def script(nemesis: Nemesis, recorder: Recorder) -> None:
        for blow in range(cell.blows):
            target = nemesis.controller() if cell.broker_type == "controller" else nemesis.leader(TOPIC, 0)
            if target < 0:
                raise ClusterError(f"{cell.cell_id}: no {cell.broker_type} to hit at blow {blow + 1}")
            recorder.nemesis("start", kind, [target], f"{cell.cell_id} blow {blow + 1}", blow)
            if cell.signal == "SIGKILL":
                nemesis.kill9(target)
            else:
                nemesis.shut_down(target)
            if cell.wait_for_deregistration:
                deadline = time.monotonic() + SESSION_S + 5
                while target in nemesis.registered() and time.monotonic() < deadline:
                    time.sleep(0.1)
            if cell.restart:
                nemesis.start_broker(target)
            recorder.nemesis("stop", kind, [target], f"{cell.cell_id} blow {blow + 1}", blow)
    return script


def run_matrix(out: Path, duration_s: float = 30.0, cells: tuple[ReplicationCell, ...] = REPLICATION_MATRIX,
               seed: int = 0, say: Callable[[str], None] = print) -> dict[str, CheckResult]:
    results = {}
    for cell in cells:
        say(f"{cell.cell_id} ...")
        run = run_chaos(cell_settings(cell, duration_s, seed), out / cell.cell_id.replace("/", "-"),
                        say=lambda _: None, script=cell_script(cell))
        results[cell.cell_id] = run.result
    return results
