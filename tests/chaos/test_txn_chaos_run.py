"""`kafkasim chaos run --workload txn` on real brokers: consume-transform-produce with confluent-kafka's transactional
producer and read_committed consumers stays exactly-once while the transaction coordinator of a transformer, the
leader of an output partition and the transformers' group coordinator are killed with -9 and a transformer is fenced,
and the checker's verdict says so."""

import json
import math
import os
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker.group.coordinator import partition_for
from cluster.chaos.history import Operation, Recorder, read_nemesis, read_operations
from cluster.chaos.nemesis import Nemesis
from cluster.chaos.runner import RESULTS_FILE, ChaosSettings, run_chaos
from cluster.chaos.txn_workload import TxnWorkloadSettings
from tests.harness import wait_until

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos, pytest.mark.timeout(900)]

TRANSACTION_STATE_PARTITIONS = 10   # the classroom profile's transaction.state.log.num.partitions
OFFSETS_PARTITIONS = 10             # and its offsets.topic.num.partitions


def _committed_transactions(history: Path, process: str | None = None) -> int:
    if not history.exists():
        return 0
    return sum(1 for op in read_operations(history)
               if op.f == "txn" and op.type == "ok" and process in (None, op.process))


class _TransactionBegins:
    """Follows history.jsonl from its current end: true once a transformer records the invoke of a transaction.
    A kill right after that meets the transaction in flight (its produces, offsets and EndTxn lie ahead), which a
    kill at a random moment does not: a transformer spends most of its time waiting on consume()."""

    def __init__(self, history: Path) -> None:
        self._file = open(history, encoding="utf-8")
        self._file.seek(0, os.SEEK_END)
        self._pending = ""

    def __call__(self) -> bool:
        self._pending += self._file.read()
        *lines, self._pending = self._pending.split("\n")
        return any(op.f == "txn" and op.type == "invoke"
                   for op in (Operation.model_validate_json(line) for line in lines if '"txn"' in line))

    def close(self) -> None:
        self._file.close()


def kill_the_coordinators_and_an_output_leader(run_dir: Path):
    """Once transactions commit: kill -9 the coordinator of transformer-0's transactional id until another broker
    leads its __transaction_state partition, restart it; then the same for the leader of chaos-txn-output-0, and for
    the transformers' group coordinator (which their producers' send_offsets_to_transaction talks to); then fence
    transformer-0 with a producer of its transactional.id."""
    settings = TxnWorkloadSettings()
    coordinator_partition = partition_for("kafkasim-chaos-transformer-0", TRANSACTION_STATE_PARTITIONS)
    group_partition = partition_for(settings.group, OFFSETS_PARTITIONS)

    def script(nemesis: Nemesis, recorder: Recorder) -> None:
        history = run_dir / "history.jsonl"
        wait_until(lambda: _committed_transactions(history) >= 10, 120, "ten committed transactions")
        victims = [("__transaction_state", coordinator_partition, "the transaction coordinator of transformer-0"),
                   (settings.output_topic, 0, f"the leader of {settings.output_topic}-0"),
                   ("__consumer_offsets", group_partition, "the group coordinator of the transformers")]
        for step, (topic, partition, detail) in enumerate(victims):
            victim = nemesis.leader(topic, partition)
            before = _committed_transactions(history)
            begins = _TransactionBegins(history)
            try:
                wait_until(begins, 60, "a transaction to begin", interval_s=0.002)
            finally:
                begins.close()
            recorder.nemesis("start", "kill", [victim], detail, step)
            nemesis.kill9(victim)
            wait_until(lambda t=topic, p=partition, v=victim: nemesis.leader(t, p) not in (v, -1), 60,
                       f"a new leader of {topic}-{partition}")
            nemesis.start_broker(victim)
            recorder.nemesis("stop", "kill", [victim], detail, step)
            # the transformers get going again before the next fault
            wait_until(lambda b=before: _committed_transactions(history) >= b + 5, 120,
                       "five more committed transactions after the kill")
        # a zombie's successor: a producer of transformer-0's transactional.id fences it (InitProducerId bumps the
        # epoch and aborts its open transaction); transformer-0 must start a producer of its own again
        committed_before = _committed_transactions(history, "transformer-0")
        rogue = Producer({"bootstrap.servers": nemesis.spec.bootstrap_servers,
                          "transactional.id": "kafkasim-chaos-transformer-0"})
        rogue.init_transactions(60)
        rogue.flush(10)
        del rogue   # destroyed: transformer-0's next producer fences it in turn
        wait_until(lambda: _committed_transactions(history, "transformer-0") >= committed_before + 5, 120,
                   "transformer-0 to commit again after it was fenced")
    return script


def test_consume_transform_produce_stays_exactly_once_across_coordinator_and_leader_kills(tmp_path):
    out = tmp_path / "run"
    settings = ChaosSettings(seed=0, duration_s=45, nemesis=(),
                             workload=TxnWorkloadSettings(rate=100, transaction_size=10))
    run = run_chaos(settings, out, say=print, script=kill_the_coordinators_and_an_output_leader(out))
    assert run.result.verdict == "valid", run.result.anomalies
    bad = {name: n for name, n in run.result.counts.items() if n and name != "client-resend"}
    assert not bad, run.result.anomalies
    txns = run.result.transactions
    assert txns is not None
    assert txns.committed >= 20 and txns.aborted >= 1   # the random aborts
    # every acknowledged input made it through exactly once: the drain caught up, nothing is left unprocessed
    assert txns.inputs_acknowledged >= 1000
    assert txns.inputs_exactly_once == txns.inputs_acknowledged
    # the aborted transactions' values reached the log and read_committed hid them: the check had work to do
    assert txns.aborted_values_in_log > 0
    assert txns.outputs_in_log > txns.outputs_committed >= txns.inputs_acknowledged
    kills = [e for e in read_nemesis(out / "nemesis.jsonl") if e.type == "start" and e.kind == "kill"]
    assert [e.detail for e in kills] == ["the transaction coordinator of transformer-0",
                                         "the leader of chaos-txn-output-0",
                                         "the group coordinator of the transformers"]
    # each kill met transactions in flight: begun before it, ended (whatever the outcome) after it or never
    operations = read_operations(out / "history.jsonl")
    begun = {op.index: op.mono_ns for op in operations if op.f == "txn" and op.type == "invoke"}
    ended = {op.index: op.mono_ns for op in operations if op.f == "txn" and op.type != "invoke"}
    for kill in kills:
        assert any(start < kill.mono_ns < ended.get(index, math.inf) for index, start in begun.items()), kill.detail
    # transformer-0 was fenced: a transaction of its failed on the fence, and it committed again afterwards
    fence_errors = {op.error for op in operations if op.f == "txn" and op.process == "transformer-0"
                    and op.type in ("fail", "info")} - {"RANDOM_ABORT"}
    assert fence_errors & {"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"}, fence_errors
    results = json.loads((out / RESULTS_FILE).read_text())
    assert results["workload"] == "txn" and results["verdict"] == "valid"
    assert results["transactions"]["committed"] == txns.committed
    assert results["counts"]["txn-duplicate"] == 0 and results["counts"]["txn-aborted-read"] == 0

