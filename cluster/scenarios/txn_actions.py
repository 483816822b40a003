"""The actions of the exactly-once story (docs/zombie-coordinator.md): a consume-transform-produce loop stepped one
transaction at a time — the chaos txn workload's own Transformer, a read_committed group member and a transactional
producer — the group's offsets asked of one chosen broker (OffsetFetch, OffsetCommit), a zombie coordinator
included, and the output read back with read_committed; at the end the chaos txn checker judges the history."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from broker.group.coordinator import partition_for
from broker.group.manager import OFFSETS_TOPIC
from broker.transaction.coordinator import TRANSACTION_STATE_TOPIC
from cluster.chaos import txn_workload
from cluster.chaos.checker import check
from cluster.chaos.history import FinalReads, IsolatedRead, NemesisEvent, Operation, PolledRecord, Recorder
from cluster.chaos.txn_workload import Offsets, Transformer, TxnWorkloadSettings
from cluster.chaos.workload import WorkloadCounters, release
from cluster.final_logs import partition_records
from cluster.scenarios.context import HISTORY_FILE, ScenarioError, ScenarioRun, wait_until
from cluster.scenarios.raw_client import offset_commit, offset_fetch
from traces import events as te
from traces.faults import TOOLS_TRACE_FILE
from traces.history import AcknowledgedWrite

PROCESS = "transformer"   # the transformer's name in the history; its transactional.id is kafkasim-chaos-<name>


@dataclass
class TransformerStory:
    """The one transformer of a story, its history in memory (what the chaos checker reads) and the inputs sent."""

    transformer: Transformer
    settings: TxnWorkloadSettings
    offsets_partition: int
    operations: list[Operation] = field(default_factory=list)
    inputs: dict[str, int] = field(default_factory=dict)   # input value -> its offset in the input topic

    def close(self) -> None:
        for client in (self.transformer.consumer, self.transformer.producer):
            self.transformer._drop(client)
        self.transformer.consumer = self.transformer.producer = None


def _story(run: ScenarioRun) -> TransformerStory:
    if run.transformer is None:
        raise ScenarioError("no transformer yet: a step with the action start_transformer must come first")
    return run.transformer


def _leaders(run: ScenarioRun, topic: str) -> dict[int, int]:
    return {v.partition: v.leader for v in run.state([topic]).partitions}


def _named(prefix: str, leaders: dict[int, int], wanted: Callable[[int, int], bool],
           key: Callable[[str], str] = lambda name: name, taken: frozenset[str] = frozenset()) -> str:
    """The first ``prefix-N`` not ``taken`` whose partition (Kafka's hash of ``key(name)``, as FindCoordinator
    picks it) and that partition's leader ``wanted`` accepts."""
    for n in itertools.count():
        name = f"{prefix}-{n}"
        partition = partition_for(key(name), len(leaders))
        if name not in taken and wanted(partition, leaders[partition]):
            return name
    raise AssertionError("unreachable")


def _internal_topics(run: ScenarioRun) -> frozenset[str]:
    """FindCoordinator creates them: __consumer_offsets for a group (an admin's DescribeConsumerGroups),
    __transaction_state for a transactional id (a producer's init_transactions); then every partition is led with
    its full ISR. Returns the groups the cluster knows already (a cluster of --existing may have run the story)."""
    bootstrap = run.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wait_until(lambda: admin.describe_consumer_groups(["kafkasim-probe"])["kafkasim-probe"].result(10) is not None,
               30, f"{OFFSETS_TOPIC} to exist")
    groups = wait_until(lambda: (admin.list_consumer_groups(request_timeout=10).result(15),), 30,
                        "the list of the cluster's groups")[0]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "kafkasim-probe"})
    try:
        producer.init_transactions(30)
    except KafkaException as exc:
        raise ScenarioError(f"{TRANSACTION_STATE_TOPIC} was not created: {exc}") from exc
    finally:
        release("probe", producer)
    for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
        wait_until(lambda t=topic: (views := run.state([t]).partitions) and all(
            v.leader >= 0 and sorted(v.isr) == sorted(v.replicas) for v in views), 30,
            f"every partition of {topic} led with its full ISR")
    return frozenset(g.group_id for g in groups.valid)


def _produce_inputs(run: ScenarioRun, story: TransformerStory, count: int) -> int:
    """``count`` values in-0, in-1... to the input's partition 0 (acks=all, idempotent), recorded as the chaos
    workload's sends, so the checker knows every input; how many were acknowledged."""
    recorder = story.transformer.recorder
    topic = story.settings.input_topic
    producer = Producer({"bootstrap.servers": run.bootstrap_servers, "acks": "all", "enable.idempotence": True})
    written: list[AcknowledgedWrite] = []
    for i in range(count):
        value = f"in-{i}"
        invoke = recorder.invoke("producer", "send", topic=topic, value=value, partition=0)

        def delivered(error: Any, message: Any, invoke: Operation = invoke, value: str = value) -> None:
            if error is None:
                recorder.complete(invoke, "ok", partition=message.partition(), offset=message.offset())
                story.inputs[value] = message.offset()
                written.append(AcknowledgedWrite(topic=topic, partition=0, offset=message.offset(), value=value,
                                                 ts_ms=time.time() * 1000))
            else:
                recorder.complete(invoke, "fail", error=error.name())

        producer.produce(topic, value=value.encode(), partition=0, on_delivery=delivered)
    if producer.flush(30) != 0:
        raise ScenarioError(f"the inputs to {topic} were not all answered within 30 s")
    with open(run.data_dir / HISTORY_FILE, "a", encoding="utf-8") as history:  # for the missing-writes job
        history.writelines(write.model_dump_json() + "\n" for write in written)
    return len(written)


def _new_producer(story: TransformerStory, timeout_s: float = 60) -> None:
    """The transformer's transactional producer (init_transactions), within ``timeout_s``: the workload retries
    until its stop, which here is the deadline."""
    timer = threading.Timer(timeout_s, story.transformer.stop.set)
    timer.start()
    try:
        story.transformer.producer = story.transformer._new_producer()
    finally:
        timer.cancel()
    if story.transformer.producer is None:
        raise ScenarioError(f"the transformer's init_transactions did not succeed within {timeout_s:.0f} s")


def start_transformer(run: ScenarioRun, input: str, output: str, group: str, count: int = 40,
                      transaction_size: int = 10, session_timeout_ms: int = 120000) -> dict[str, Any]:
    """The story's cast and its input. The group coordinator X is the broker that is neither the controller nor a
    replica of ``input`` or ``output``; the group is the first ``GROUP-N`` whose __consumer_offsets partition X
    leads, and the transformer's transactional id one whose __transaction_state partition another broker leads.
    ``count`` inputs are written; then the transformer's consumer subscribes (read_committed, no auto-commit) and
    its producer initializes its transactions. Facts: ``coordinator`` (X), ``group``, ``offsets_partition``,
    ``offsets_leader_epoch``, ``probe_group`` (a group without members in the same partition),
    ``transactional_id``, ``transaction_coordinator``, ``inputs.acknowledged``."""
    taken = _internal_topics(run)
    state = run.state([input, output])
    replicas = {b for view in state.partitions for b in view.replicas}
    offsets_leaders = _leaders(run, OFFSETS_TOPIC)
    candidates = [b for b in run.broker_ids() if b != state.controller_id and b not in replicas]
    leading = [b for b in candidates if b in offsets_leaders.values()]
    if not leading:
        raise ScenarioError(f"no broker but the controller and the replicas of {input} and {output} "
                            f"({sorted(replicas)}) leads a partition of {OFFSETS_TOPIC} ({offsets_leaders}): this "
                            "story needs a broker that coordinates the group and nothing else; run it again")
    coordinator = leading[0]
    group = _named(group, offsets_leaders, lambda _, leader: leader == coordinator, taken=taken)
    offsets_partition = partition_for(group, len(offsets_leaders))
    probe_group = _named(f"{group}-probe", offsets_leaders, lambda partition, _: partition == offsets_partition,
                         taken=taken)
    txn_leaders = _leaders(run, TRANSACTION_STATE_TOPIC)
    process = _named(PROCESS, txn_leaders, lambda _, leader: leader != coordinator,
                     key=lambda name: f"kafkasim-chaos-{name}")
    settings = TxnWorkloadSettings(input_topic=input, output_topic=output, partitions=1, transformers=1,
                                   transaction_size=transaction_size, abort_share=0.0, group=group,
                                   session_timeout_ms=session_timeout_ms)
    operations: list[Operation] = []
    # the faults reach the checker from the tools' trace (_nemesis), not through the recorder
    recorder = Recorder(operations.append, lambda _: None, lambda: time.time() * 1000, time.monotonic_ns)
    transformer = Transformer(process, run.bootstrap_servers, settings, recorder, WorkloadCounters(),
                              threading.Event())
    story = TransformerStory(transformer, settings, offsets_partition, operations)
    run.transformer = story
    acknowledged = _produce_inputs(run, story, count)
    story.transformer.consumer = story.transformer._new_consumer()
    _new_producer(story)
    transactional_id = story.transformer.transactional_id
    return {"coordinator": coordinator, "group": group, "offsets_partition": offsets_partition,
            "offsets_leader_epoch": run.state([OFFSETS_TOPIC]).partition(OFFSETS_TOPIC, offsets_partition).leader_epoch,
            "probe_group": probe_group, "transactional_id": transactional_id,
            "transaction_coordinator": txn_leaders[partition_for(transactional_id, len(txn_leaders))],
            "inputs.acknowledged": acknowledged}


def _consume(story: TransformerStory) -> tuple[PolledRecord, ...]:
    consumer = story.transformer.consumer
    assert consumer is not None
    messages = consumer.consume(num_messages=story.settings.transaction_size, timeout=0.5)
    return tuple(PolledRecord(topic=m.topic(), partition=m.partition(), offset=m.offset(), value=m.value().decode())
                 for m in messages if m.error() is None)


def _transact(story: TransformerStory, records: tuple[PolledRecord, ...], abort: bool = False) -> Operation:
    """The workload's transaction over ``records`` (aborted on purpose with ``abort``); its invoke."""
    transformer = story.transformer
    if transformer.producer is None:
        _new_producer(story)
    if abort:
        transformer.settings = dataclasses.replace(story.settings, abort_share=1.0)
    try:
        transformer._transaction(records)
    finally:
        transformer.settings = story.settings
    if transformer.producer is None:   # fenced or fatal: the workload's recreation
        _new_producer(story)
    return next(op for op in reversed(story.operations) if op.f == "txn" and op.type == "invoke")


def transaction(run: ScenarioRun, label: str, abort: bool = False, timeout_s: float = 60) -> dict[str, Any]:
    """One transaction of the transformer over the next inputs it consumes (up to the transaction size): the
    copies produced, the consumer's positions sent to the transaction (TxnOffsetCommit, at the group coordinator
    the producer finds), commit — or, with ``abort``, abort (the copier's random abort) and rewind the consumer to
    the group's committed offsets, which it asks of *its* coordinator (``committed()``, OffsetFetch). Facts:
    ``LABEL.outcome`` (ok committed, fail aborted, info unknown), ``LABEL.error``, ``LABEL.from`` and ``LABEL.to``
    (the first and last input offsets), ``LABEL.next`` (the offset committed with it), ``LABEL.took_s``, and after a
    rewind ``LABEL.rewound_to`` (the offset the coordinator answered)."""
    story = _story(run)
    records = wait_until(lambda: _consume(story), timeout_s, "the transformer to consume input")
    started = time.monotonic()
    invoke = _transact(story, records, abort)
    done = next(op for op in reversed(story.operations) if op.f == "txn" and op.index == invoke.index
                and op.type != "invoke")
    facts: dict[str, Any] = {f"{label}.outcome": done.type, f"{label}.error": done.error or "NONE",
                             f"{label}.from": records[0].offset, f"{label}.to": records[-1].offset,
                             f"{label}.next": records[-1].offset + 1,
                             f"{label}.took_s": round(time.monotonic() - started, 2)}
    rewind = next((op for op in reversed(story.operations) if op.f == "rewind" and op.type == "ok"
                   and op.index > invoke.index), None)
    if rewind is not None and rewind.offsets:
        facts[f"{label}.rewound_to"] = rewind.offsets[0].offset
    return facts


def _group_as_traced(run: ScenarioRun, broker: int, group: str) -> te.GroupStateChanged | None:
    return next((e for e in reversed(run.traces(broker)) if isinstance(e, te.GroupStateChanged)
                 and e.group_id == group), None)


def fetch_offsets(run: ScenarioRun, group: str, at: dict[str, int], topic: str | None = None, timeout_s: float = 20
                  ) -> dict[str, Any]:
    """What each broker of ``at`` (label -> broker) holds as the coordinator of ``group``: its committed offset of
    ``topic``-0 (the story's input), asked with OffsetFetch as a read_committed member asks (again while it answers
    UNSTABLE_OFFSET_COMMIT: a transaction's offsets pending there, KIP-447), and the group's generation and members
    in its last traced group state. Facts ``LABEL.offset`` (-1: none), ``LABEL.error``, ``LABEL.generation``,
    ``LABEL.members``, ``LABEL.state``."""
    topic = topic or _story(run).settings.input_topic
    facts: dict[str, Any] = {}
    for label, broker in at.items():
        target = run.spec.broker(int(broker))
        answer = wait_until(lambda t=target: (a := offset_fetch(t.host, t.client_port, group, topic)).error_name
                            != "UNSTABLE_OFFSET_COMMIT" and a, timeout_s,
                            f"broker {broker} to answer {group}'s offset without pending transactional offsets")
        traced = _group_as_traced(run, int(broker), group)
        facts |= {f"{label}.offset": answer.offset, f"{label}.error": answer.error_name,
                  f"{label}.generation": traced.generation_id if traced else None,
                  f"{label}.members": traced.members if traced else None,
                  f"{label}.state": traced.new_state if traced else None}
    return facts


def commit_offset(run: ScenarioRun, broker: int, group: str, offset: int, label: str, topic: str | None = None
                  ) -> dict[str, Any]:
    """An admin tool's OffsetCommit of ``offset`` for ``group`` (one without members), sent to ``broker`` whatever
    the metadata says. Facts ``LABEL.error`` (Kafka's error name, NO ANSWER when the connection gave none) and
    ``LABEL.waited_s`` (how long the answer took: a coordinator waits up to offsets.commit.timeout.ms for its
    acks=all append)."""
    topic = topic or _story(run).settings.input_topic
    target = run.spec.broker(int(broker))
    started = time.monotonic()
    try:
        error = ErrorCode(offset_commit(target.host, target.client_port, group, topic, int(offset))).name.upper()
    except OSError:   # a timeout included
        error = "NO ANSWER"
    return {f"{label}.error": error, f"{label}.waited_s": round(time.monotonic() - started, 2)}


def wait_for_coordinator_move(run: ScenarioRun, old: int, timeout_s: float = 30) -> dict[str, Any]:
    """Until ZooKeeper names a leader of the group's __consumer_offsets partition other than ``old``, that broker
    applied its LeaderAndIsr and answers OffsetFetch for the group (it loaded the partition: it coordinates the
    group now). Facts ``new_coordinator``, ``offsets.leader_epoch`` (ZooKeeper's), ``coordinator_moved_s``."""
    story = _story(run)
    partition = story.offsets_partition
    started = time.monotonic()
    view = wait_until(lambda: (v := run.state([OFFSETS_TOPIC]).partition(OFFSETS_TOPIC, partition)) is not None
                      and v.leader not in (int(old), -1) and v, timeout_s,
                      f"a new leader of {OFFSETS_TOPIC}-{partition}")
    target = run.spec.broker(view.leader)
    wait_until(lambda: offset_fetch(target.host, target.client_port, story.settings.group,
                                    story.settings.input_topic).error_name == "NONE", timeout_s,
               f"broker {view.leader} to load {OFFSETS_TOPIC}-{partition} and answer for {story.settings.group}")
    return {"new_coordinator": view.leader, "offsets.leader_epoch": view.leader_epoch,
            "coordinator_moved_s": round(time.monotonic() - started, 2)}


def _copies(story: TransformerStory, reads: list[IsolatedRead], label: str) -> dict[str, Any]:
    """Facts on the output's copies: each is ``t:<input>@<transformer>.<transaction>``."""
    copies = Counter(value[2:].rsplit("@", 1)[0] for read in reads for _, value in read.records
                     if value and value.startswith("t:"))
    twice = sorted(story.inputs[v] for v, n in copies.items() if n > 1 and v in story.inputs)
    return {f"{label}.copies": sum(copies.values()), f"{label}.inputs_copied": len(copies),
            f"{label}.inputs_twice": len(twice), f"{label}.first_twice": twice[0] if twice else None,
            f"{label}.last_twice": twice[-1] if twice else None}


def _read_committed(run: ScenarioRun, story: TransformerStory, deadline: float) -> list[IsolatedRead]:
    """The output as a read_committed consumer sees it, once no transaction is open on it (its end is the log's)."""
    def read() -> list[IsolatedRead]:
        offsets = Offsets(run.bootstrap_servers, story.settings)
        try:
            if not offsets.no_open_transactions():
                return []
        finally:
            offsets.close()
        return txn_workload.read_output(run.bootstrap_servers, story.settings, "read_committed", deadline)

    return wait_until(read, max(1.0, deadline - time.monotonic()),
                      f"no open transaction on {story.settings.output_topic}", interval_s=0.5)


def read_output(run: ScenarioRun, label: str, timeout_s: float = 30) -> dict[str, Any]:
    """The output topic from offset 0 with read_committed, once no transaction is open on it. Facts
    ``LABEL.copies`` (records), ``LABEL.inputs_copied`` (inputs with a copy), ``LABEL.inputs_twice`` (inputs with
    more than one), ``LABEL.first_twice`` and ``LABEL.last_twice`` (the lowest and highest such input offsets)."""
    story = _story(run)
    return _copies(story, _read_committed(run, story, time.monotonic() + timeout_s), label)


def _nemesis(run: ScenarioRun) -> list[NemesisEvent]:
    """The story's faults as the chaos checker knows them, from the tools' trace: an isolation from ZooKeeper is a
    zk-isolate, a heal ends it."""
    path = run.data_dir / TOOLS_TRACE_FILE
    events = []
    for line in path.read_text().splitlines() if path.exists() else []:
        event = te.parse_line(line) if '"fault_injected"' in line else None
        if isinstance(event, te.FaultInjected) and event.action == "isolate" and "from zookeeper" in event.detail:
            events.append(NemesisEvent(type="start", kind="zk-isolate", ts_ms=event.ts_ms, mono_ns=event.mono_ns,
                                       targets=(event.broker_id,)))
        elif isinstance(event, te.FaultInjected) and event.action == "heal":
            events.append(NemesisEvent(type="stop", kind="heal", ts_ms=event.ts_ms, mono_ns=event.mono_ns))
    return events


def _ask(run: ScenarioRun, story: TransformerStory, ask: Callable[[Offsets], Any], deadline: float) -> Any:
    """``ask`` of a fresh Offsets, again until it answers (a healed zombie answers NOT_COORDINATOR for a moment)."""
    attempt = lambda: Offsets.ask_fresh(run.bootstrap_servers, story.settings, ask)  # noqa: E731
    return wait_until(attempt, max(1.0, deadline - time.monotonic()), "the group's offsets", interval_s=0.5)[0]


def finish_transformer(run: ScenarioRun, label: str = "final", timeout_s: float = 120) -> dict[str, Any]:
    """The transformer goes on until the group's committed offsets reach the end of the input, then stops; the
    output is read back (read_committed and read_uncommitted), every replica of the input read from its files, and
    the chaos txn checker judges the whole history (the sends, each transaction and rewind, the zk-isolate and heal
    of the tools' trace). Facts: the ``read_output`` facts under ``LABEL``, ``checker.verdict``,
    ``checker.anomalies`` (the names found), ``checker.zombie_duplicates`` (txn-zombie-coordinator) and
    ``checker.duplicates`` (txn-duplicate: copies nothing in Kafka's rules explains)."""
    story = _story(run)
    deadline = time.monotonic() + timeout_s
    while not _ask(run, story, Offsets.caught_up, deadline):
        if time.monotonic() >= deadline:
            raise ScenarioError(f"the transformer did not get through the input within {timeout_s:.0f} s")
        records = _consume(story)
        if records:
            _transact(story, records)
    story.close()
    committed = _read_committed(run, story, deadline)
    reads = (*txn_workload.read_output(run.bootstrap_servers, story.settings, "read_uncommitted", deadline),
             *committed)
    topic = story.settings.input_topic
    stored = [record for broker in run.broker_ids()
              if (directory := run.layout.broker_dir(broker) / "logs" / f"{topic}-0").is_dir()
              for record in partition_records(broker, topic, 0, directory)]
    leader = run.state([topic]).partition(topic, 0).leader
    group_offsets = _ask(run, story, lambda offsets: tuple(offsets.group_offsets()), deadline)
    final = FinalReads.from_stored_records(stored, {(topic, 0): leader}).model_copy(
        update={"isolated": reads, "group_offsets": group_offsets})
    result = check(story.operations, final, _nemesis(run))
    return _copies(story, committed, label) | {
        "checker.verdict": result.verdict, "checker.anomalies": sorted({a.name for a in result.anomalies}),
        "checker.zombie_duplicates": result.counts.get("txn-zombie-coordinator", 0),
        "checker.duplicates": result.counts.get("txn-duplicate", 0)}
