"""A zombie group coordinator breaks exactly-once, as in Apache Kafka 2.8 (issue 32, docs/zombie-coordinator.md).

A fixed schedule on real processes in network namespaces: broker X coordinates a consume-transform-produce group
(it leads the group's __consumer_offsets partition) and nothing else of the run (not the controller, not the
transaction coordinator, no input or output replica). One transaction commits through X; then X is cut off from
ZooKeeper (not from the brokers) and the controller elects another leader of the offsets partition. X never hears
of it (the controller sends nothing to a broker whose session is gone), so, as Kafka 2.8's GroupCoordinator does, it
still answers OffsetFetch from memory while it can acknowledge no acks=all append (its followers left it and the
ISR it cannot change holds its high watermark). The transformer's producer commits the next transaction's offsets
at the new coordinator; its consumer, still a member at X, rewinds after an abort to the offsets X answers — older —
and copies inputs a second time in a committed transaction. The chaos checker names those duplicates
txn-zombie-coordinator and the run kafka-known: Kafka's own behaviour, neither valid nor a kafkasim bug.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
import warnings

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from broker.group.coordinator import partition_for
from broker.group.manager import OFFSETS_TOPIC
from cluster.chaos.checker import check
from cluster.chaos.history import FinalReads, NemesisEvent, Operation, PolledRecord, Recorder
from cluster.chaos.txn_workload import Offsets, Transformer, TxnWorkloadSettings, read_output
from cluster.chaos.workload import WorkloadCounters
from cluster.final_logs import broker_records
from cluster.net import actions
from tests.harness import RunningCluster, wait_until
from tests.replication.support import connect, controller_and_others, make_topic, wait_for_leader
from traces import events as te

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import (
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
    )

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.netns]

TRANSACTION_STATE = "__transaction_state"
INPUTS = 40
BATCH = 10
REQUEST_TIMED_OUT, NOT_COORDINATOR = 7, 16


def leaders(cluster: RunningCluster, topic: str) -> dict[int, int]:
    return {p.partition: p.leader for p in cluster.state([topic]).partitions}


def name_led_by(prefix: str, partitions: dict[int, int], wanted) -> str:
    """The first ``prefix-N`` whose partition (Kafka's hash of the name) has a leader ``wanted`` accepts."""
    for n in itertools.count():
        name = f"{prefix}-{n}"
        if wanted(partitions[partition_for(name, len(partitions))]):
            return name
    raise AssertionError("unreachable")


def fetch_offset(cluster: RunningCluster, broker: int, group: str, topic: str) -> tuple[int, int, int]:
    """OffsetFetch v7 (require_stable, as a read_committed member asks) of ``topic``-0 sent to ``broker``:
    (top-level error, partition error, committed offset)."""
    request = OffsetFetchRequest(group_id=group, require_stable=True, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])
    with connect(cluster, broker, timeout_s=20) as connection:
        answer = connection.call(request, 7, OffsetFetchResponse)
    partitions = [p for t in answer.topics for p in t.partitions]
    return answer.error_code, partitions[0].error_code, partitions[0].committed_offset


def commit_offset(cluster: RunningCluster, broker: int, group: str, topic: str, offset: int) -> tuple[int, float]:
    """OffsetCommit v7 of a group without members (generation -1) sent to ``broker``: (error, seconds to answer)."""
    topic_class = OffsetCommitRequest.OffsetCommitRequestTopic
    partition = topic_class.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                         committed_leader_epoch=-1, committed_metadata="")
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                  group_instance_id=None, topics=[topic_class(name=topic, partitions=[partition])])
    started = time.monotonic()
    with connect(cluster, broker, timeout_s=30) as connection:
        answer = connection.call(request, 7, OffsetCommitResponse)
    return answer.topics[0].partitions[0].error_code, time.monotonic() - started


def internal_topics_exist(cluster: RunningCluster, bootstrap: str) -> None:
    """FindCoordinator creates them: a group's through DescribeConsumerGroups, the other through a transactional
    producer's init_transactions."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wait_until(lambda: admin.describe_consumer_groups(["zombie-probe"])["zombie-probe"].result(10) is not None, 30,
               "__consumer_offsets to exist")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "zombie-probe"})
    producer.init_transactions(30)
    del producer
    for topic in (OFFSETS_TOPIC, TRANSACTION_STATE):
        wait_until(lambda t=topic: (ps := cluster.state([t]).partitions) and all(
            p.leader >= 0 and len(p.isr) == 3 for p in ps), 30, f"{topic} to be led with its full ISR")


class Run:
    """The transformer of the chaos txn workload, driven one step at a time from the test's thread, and its
    history in memory."""

    def __init__(self, cluster: RunningCluster, settings: TxnWorkloadSettings, process: str) -> None:
        self.cluster = cluster
        self.operations: list[Operation] = []
        self.nemesis: list[NemesisEvent] = []
        self.recorder = Recorder(self.operations.append, self.nemesis.append, lambda: time.time() * 1000,
                                 time.monotonic_ns)
        self.settings = settings
        self.bootstrap = cluster.spec.bootstrap_servers
        self.transformer = Transformer(process, self.bootstrap, settings, self.recorder, WorkloadCounters(),
                                       threading.Event())

    def produce_inputs(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(INPUTS):
            value = f"in-{i}"
            invoke = self.recorder.invoke("producer", "send", topic=self.settings.input_topic, value=value,
                                          partition=0)

            def done(error, message, invoke=invoke) -> None:
                assert error is None, error
                self.recorder.complete(invoke, "ok", partition=message.partition(), offset=message.offset())

            producer.produce(self.settings.input_topic, value=value.encode(), partition=0, on_delivery=done)
        assert producer.flush(30) == 0

    def begin(self) -> None:
        self.transformer.consumer = self.transformer._new_consumer()
        self.transformer.producer = self.transformer._new_producer()
        assert self.transformer.producer is not None

    def transaction(self, timeout_s: float = 60.0, abort: bool = False, required: bool = True) -> Operation | None:
        """One transaction over the next records (up to BATCH); its completion. None: nothing to consume within
        ``timeout_s`` and not ``required``."""
        consumer = self.transformer.consumer
        assert consumer is not None
        deadline = time.monotonic() + timeout_s
        records: tuple[PolledRecord, ...] = ()
        while not records:
            if time.monotonic() >= deadline and not required:
                return None
            assert time.monotonic() < deadline, "the transformer consumed nothing"
            messages = consumer.consume(num_messages=BATCH, timeout=0.5)
            records = tuple(PolledRecord(topic=m.topic(), partition=m.partition(), offset=m.offset(),
                                         value=m.value().decode()) for m in messages if m.error() is None)
        if abort:   # the copier's random abort, here on purpose
            self.transformer.settings = dataclasses.replace(self.settings, abort_share=1.0)
        try:
            self.transformer._transaction(records)
        finally:
            self.transformer.settings = self.settings
        if self.transformer.producer is None:   # fenced or fatal: the workload's recreation
            self.transformer.producer = self.transformer._new_producer()
        txn = [op for op in self.operations if op.f == "txn"]
        return txn[-1]

    def close(self) -> None:
        for client in (self.transformer.consumer, self.transformer.producer):
            if client is not None:
                self.transformer._drop(client)
        self.transformer.consumer = self.transformer.producer = None

    def offsets(self, ask, deadline: float):
        """``ask`` of a fresh Offsets, again until it answers (once healed, the zombie answers NOT_COORDINATOR once)."""
        attempt = lambda: Offsets.ask_fresh(self.bootstrap, self.settings, ask)  # noqa: E731
        return wait_until(attempt, max(1.0, deadline - time.monotonic()), "the group's offsets", interval_s=0.5)[0]

    def finish(self, deadline: float) -> FinalReads:
        while not self.offsets(Offsets.caught_up, deadline):
            assert time.monotonic() < deadline, "the transformer did not get through the input"
            self.transaction(timeout_s=5.0, required=False)
        self.close()
        self.offsets(lambda o: wait_until(o.no_open_transactions, 20, "the output's transactions to end"), deadline)
        reads = tuple(read for level in ("read_uncommitted", "read_committed")
                      for read in read_output(self.bootstrap, self.settings, level, deadline))
        # the input as every replica holds it (what the runner reads after `down`), so the sends are checked
        topic = self.settings.input_topic
        stored = [record for broker in self.cluster.spec.brokers
                  for record in broker_records(broker.broker_id,
                                               [self.cluster.layout.broker_dir(broker.broker_id) / "logs"])
                  if record.topic == topic]
        replicas = FinalReads.from_stored_records(stored, {(topic, p): leader
                                                           for p, leader in leaders(self.cluster, topic).items()})
        group_offsets = self.offsets(lambda o: tuple(o.group_offsets()), deadline)
        return replicas.model_copy(update={"isolated": reads, "group_offsets": group_offsets})


def test_a_zombie_group_coordinator_answers_stale_offsets_and_breaks_exactly_once_as_kafka_does(netns_cluster):
    cluster = netns_cluster
    bootstrap = cluster.spec.bootstrap_servers
    controller, (zombie, other) = controller_and_others(cluster)
    internal_topics_exist(cluster, bootstrap)
    offsets_leaders = leaders(cluster, OFFSETS_TOPIC)
    if zombie not in offsets_leaders.values():
        zombie, other = other, zombie
    assert zombie in offsets_leaders.values(), f"no broker but the controller leads {OFFSETS_TOPIC}: {offsets_leaders}"
    successors = [controller, other]
    group = name_led_by("zombie-group", offsets_leaders, lambda leader: leader == zombie)
    probe_group = name_led_by("zombie-probe-group", offsets_leaders, lambda leader: leader == zombie)
    process = name_led_by("kafkasim-chaos-zombie-transformer", leaders(cluster, TRANSACTION_STATE),
                          lambda leader: leader != zombie)
    offsets_partition = partition_for(group, len(offsets_leaders))
    # a session longer than the schedule's steps at the new coordinator, which loads the member from the log and
    # would expire it after a session without heartbeats (those go to the zombie)
    settings = TxnWorkloadSettings(input_topic="zombie-input", output_topic="zombie-output", partitions=1,
                                   transformers=1, transaction_size=BATCH, abort_share=0.0, group=group,
                                   session_timeout_ms=45000)
    for topic in settings.topics:
        make_topic(cluster, topic, successors)
    run = Run(cluster, settings, process.removeprefix("kafkasim-chaos-"))
    assert run.transformer.transactional_id == f"kafkasim-chaos-{run.transformer.process}"
    process_txn_partition = partition_for(run.transformer.transactional_id, len(leaders(cluster, TRANSACTION_STATE)))
    assert leaders(cluster, TRANSACTION_STATE)[process_txn_partition] != zombie
    run.produce_inputs()
    try:
        schedule(cluster, run, zombie, successors, group, probe_group, offsets_partition)
    finally:
        run.close()


def schedule(cluster: RunningCluster, run: Run, zombie: int, successors: list[int], group: str, probe_group: str,
             offsets_partition: int) -> None:
    settings = run.settings
    run.begin()

    # 1. one transaction through the coordinator X, both for the consumer and for the producer's offsets
    assert (txn := run.transaction()) is not None and txn.type == "ok"
    wait_until(lambda: fetch_offset(cluster, zombie, group, settings.input_topic) == (0, 0, BATCH), 20,
               "the first transaction's offsets at the coordinator")

    # 2. X cut off from ZooKeeper, not from the brokers: the controller elects another leader of its partition
    actions.isolate(cluster.data_dir, zombie, "zookeeper", say=lambda _: None)
    run.recorder.nemesis("start", "zk-isolate", [zombie])
    successor = wait_until(lambda: (leader := leaders(cluster, OFFSETS_TOPIC)[offsets_partition]) != zombie
                           and leader, 30, f"a new leader of {OFFSETS_TOPIC}-{offsets_partition}")
    wait_for_leader(cluster, OFFSETS_TOPIC, successor, 20, partition=offsets_partition)
    wait_until(lambda: fetch_offset(cluster, successor, group, settings.input_topic) == (0, 0, BATCH), 20,
               f"broker {successor} to coordinate {group}")

    # Kafka's zombie: it acknowledges no acks=all append (offsets.commit.timeout.ms, then REQUEST_TIMED_OUT, as
    # GroupMetadataManager.storeOffsets passes it on), yet still answers OffsetFetch from memory
    error, took = commit_offset(cluster, zombie, probe_group, settings.input_topic, 7)
    assert error == REQUEST_TIMED_OUT and took >= 4.0, (error, took)
    assert fetch_offset(cluster, zombie, probe_group, settings.input_topic)[2] == -1
    assert not any(isinstance(e, te.ReplicaRoleChanged) and e.topic == OFFSETS_TOPIC
                   and e.partition == offsets_partition and e.role == "follower"
                   for e in cluster.traces(zombie)), "the zombie was told it follows"

    # 3. the next transaction: the producer's TxnOffsetCommit ends at the new coordinator (X times out); the
    # consumer, a member at X all along, still reads X's memory
    assert (txn := run.transaction()) is not None and txn.type == "ok"
    # UNSTABLE_OFFSET_COMMIT until the coordinator's COMMIT marker is written there (KIP-447)
    wait_until(lambda: fetch_offset(cluster, successor, group, settings.input_topic) == (0, 0, 2 * BATCH), 20,
               f"the second transaction's offsets at broker {successor}")
    # X too may hold that TxnOffsetCommit pending (UNSTABLE_OFFSET_COMMIT) until its append times out, when the
    # producer went to X first and on to the new coordinator when its connection there closed
    wait_until(lambda: fetch_offset(cluster, zombie, group, settings.input_topic) == (0, 0, BATCH), 20,
               f"broker {zombie} to answer the first transaction's offsets from its memory")

    # 4. an abort: the transformer rewinds to the offsets its coordinator X answers, older than those committed,
    # and copies the second transaction's inputs again, in a committed transaction
    assert (txn := run.transaction(abort=True)) is not None and txn.type == "fail"
    rewind = [op for op in run.operations if op.f == "rewind" and op.type == "ok"][-1]
    assert [o.offset for o in rewind.offsets] == [BATCH]
    again = run.transaction()
    assert again is not None and again.type == "ok"
    invoke = next(op for op in run.operations if op.index == again.index and op.type == "invoke")
    assert invoke.records[0].offset == BATCH

    # 5. healed: X learns it follows and unloads the group; the transformer finishes the input
    actions.heal(cluster.data_dir, say=lambda _: None)
    run.recorder.nemesis("stop", "heal")
    wait_until(lambda: any(isinstance(e, te.ReplicaRoleChanged) and e.topic == OFFSETS_TOPIC
                           and e.partition == offsets_partition and e.role == "follower"
                           for e in cluster.traces(zombie)), 60, "the healed zombie to follow")
    final = run.finish(time.monotonic() + 120)

    result = check(run.operations, final, run.nemesis)
    assert result.counts["txn-duplicate"] == 0, result.anomalies
    assert result.counts["txn-zombie-coordinator"] >= 1, result.anomalies
    assert {r.name for r in result.anomalies} == {"txn-zombie-coordinator"}, result.anomalies
    assert result.verdict == "kafka-known"
