"""The actions of consumer-group stories: values spread over a topic's partitions, group members as processes of
their own (cluster.group_consumer: confluent-kafka, a synchronous commit after every poll, a JSON report of what
each was assigned, consumed and committed), a member's kill -9 and the survivors' takeover."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from confluent_kafka import Producer

from cluster.group_consumer import GroupConsumerProcess, owned_exactly_once
from cluster.scenarios.context import HISTORY_FILE, ScenarioError, ScenarioRun, wait_until
from traces.faults import TOOLS_TRACE_FILE, record_fault
from traces.history import AcknowledgedWrite


def produce_partitions(run: ScenarioRun, topic: str, partitions: int, count: int, label: str) -> dict[str, Any]:
    """``count`` values to each of ``partitions`` partitions with acks=all; fact ``LABEL.acknowledged``."""
    producer = Producer({"bootstrap.servers": run.bootstrap_servers, "acks": "all", "linger.ms": 5})
    acknowledged: list[AcknowledgedWrite] = []

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            acknowledged.append(AcknowledgedWrite(topic=topic, partition=message.partition(),
                                                  offset=message.offset(), value=message.value().decode(),
                                                  ts_ms=time.time() * 1000))

    for partition in range(partitions):
        for i in range(count):
            producer.produce(topic, value=f"{label}-{partition}-{i}".encode(), partition=partition,
                             on_delivery=delivered)
    if producer.flush(30) != 0:
        raise ScenarioError(f"{label}: the producer did not finish within 30 s")
    with open(run.data_dir / HISTORY_FILE, "a", encoding="utf-8") as history:  # for the missing-writes job
        history.writelines(write.model_dump_json() + "\n" for write in acknowledged)
    return {f"{label}.acknowledged": len(acknowledged)}


def _members(run: ScenarioRun, group: str) -> list[tuple[str, GroupConsumerProcess]]:
    return [(name, c) for name, c in run.consumers.items() if name.startswith(f"{group}/")]


def _live(run: ScenarioRun, group: str) -> list[GroupConsumerProcess]:
    return [c for _, c in _members(run, group) if c.process.poll() is None]


def _assignments(run: ScenarioRun, group: str) -> dict[str, Any]:
    return {f"assignment:{name}": sorted(c.assignment() or []) for name, c in _members(run, group)
            if c.process.poll() is None}


def start_consumers(run: ScenarioRun, topic: str, group: str, count: int, partitions: int,
                    session_timeout_ms: int = 6000) -> dict[str, Any]:
    """``count`` members of ``group`` subscribed to ``topic``, named GROUP/0, GROUP/1...; waits until every
    partition is owned by exactly one member. Facts ``assignment:GROUP/N``."""
    for _ in range(count):
        name = f"{group}/{len(_members(run, group))}"
        run.consumers[name] = GroupConsumerProcess(
            "confluent", run.bootstrap_servers, group, topic, run.data_dir / f"consumer-{name.replace('/', '-')}.jsonl",
            session_timeout_ms=session_timeout_ms, max_seconds=600)
    wait_until(lambda: owned_exactly_once(_live(run, group), partitions), 60,
               f"each partition of {topic} owned by one member of {group}")
    return _assignments(run, group)


def _consumed(consumers: list[GroupConsumerProcess]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for consumer in consumers:
        for partition, offset, _ in consumer.consumed():
            found.setdefault(partition, []).append(offset)
    return found


def _group_committed(members: list[GroupConsumerProcess]) -> dict[int, int]:
    """The group's committed offset of each partition, whoever committed it: offsets here only move forward, and a
    member that joins after another consumed everything has nothing to commit itself."""
    committed: dict[int, int] = {}
    for member in members:
        for event in member.events():
            if event["event"] == "committed":
                for partition, offset in event["offsets"].items():
                    committed[int(partition)] = max(committed.get(int(partition), 0), offset)
    return committed


def wait_consumed(run: ScenarioRun, group: str, partitions: int, per_partition: int, timeout_s: float = 60
                  ) -> dict[str, Any]:
    """Until the members of ``group`` (dead ones included) consumed and committed offsets 0..per_partition-1 of
    every partition. Facts ``consumed:GROUP`` (distinct offsets), ``read_twice:GROUP`` (offsets consumed more than
    once, by anyone), ``skipped:GROUP`` (offsets below the end nobody consumed), ``committed:GROUP``."""
    members = [c for _, c in _members(run, group)]

    def done() -> bool:
        consumed, committed = _consumed(members), _group_committed(members)
        return all(set(consumed.get(p, [])) >= set(range(per_partition)) and committed.get(p) == per_partition
                   for p in range(partitions))

    try:
        wait_until(done, timeout_s, f"{group} to consume and commit {per_partition} values of each partition")
    except ScenarioError:
        pass  # the facts below say what is missing
    consumed = _consumed(members)
    committed = _group_committed(members)
    return {f"consumed:{group}": sum(len(set(offsets)) for offsets in consumed.values()),
            f"read_twice:{group}": sum(len(offsets) - len(set(offsets)) for offsets in consumed.values()),
            f"skipped:{group}": sum(len(set(range(per_partition)) - set(consumed.get(p, [])))
                                    for p in range(partitions)),
            f"committed:{group}": dict(sorted(committed.items()))} | _assignments(run, group)


def kill9_consumer(run: ScenarioRun, member: str) -> dict[str, Any]:
    """kill -9 of the member ``member`` (GROUP/N): no LeaveGroup; the coordinator notices when its session times
    out. Facts ``orphaned`` (its partitions) and ``committed_at_kill`` (the group's committed offset of each: the
    member that joined first may have read and committed them before the rebalance gave them to this one)."""
    consumer = run.consumers[member]
    orphaned = sorted(consumer.assignment() or [])
    group = member.rsplit("/", 1)[0]
    committed = _group_committed([c for _, c in _members(run, group)])
    record_fault(run.data_dir / TOOLS_TRACE_FILE, "sigkill", f"consumer {member} (pid {consumer.process.pid})")
    os.killpg(consumer.process.pid, signal.SIGKILL)
    consumer.process.wait(10)
    run.facts["_consumer_killed_at"] = time.time()
    return {"killed_member": member, "orphaned": orphaned,
            "committed_at_kill": {p: committed.get(p, 0) for p in orphaned}}


def wait_for_takeover(run: ScenarioRun, group: str, partitions: int, timeout_s: float = 60) -> dict[str, Any]:
    """Until the live members own every partition again and one of them consumed from each orphaned partition.
    Facts ``takeover_s`` (from the kill to the first value consumed from an orphaned partition) and
    ``resumed_at`` (the first offset a survivor read from each orphaned partition)."""
    orphaned, killed_at = run.facts["orphaned"], run.facts["_consumer_killed_at"]

    def first_reads() -> dict[int, tuple[int, float]] | None:
        survivors = _live(run, group)
        if not owned_exactly_once(survivors, partitions):
            return None
        found: dict[int, tuple[int, float]] = {}
        for survivor in survivors:
            for partition, offset, t in survivor.consumed():
                if partition in orphaned and t > killed_at and (partition not in found or t < found[partition][1]):
                    found[partition] = (offset, t)
        return found if set(found) == set(orphaned) else None

    found = wait_until(first_reads, timeout_s, f"the survivors of {group} to take over {orphaned}")
    return {"takeover_s": round(min(t for _, t in found.values()) - killed_at, 2),
            "resumed_at": {p: offset for p, (offset, _) in sorted(found.items())}} | _assignments(run, group)
