"""One function per action a step may name. Each takes the run and the step's arguments (``"$name"`` already
replaced by remembered facts) and returns the facts it measured, which predictions may then name."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

from cluster.final_logs import partition_records
from cluster.lifecycle import start_broker
from cluster.net import actions as net_actions
from cluster.scenarios import group_actions, txn_actions
from cluster.scenarios.context import HISTORY_FILE, ScenarioError, ScenarioRun, wait_until
from cluster.scenarios.producers import BackgroundProducer, Sent, send
from cluster.scenarios.raw_client import RETRIABLE_ROUTING, ProduceResult
from cluster.scenarios.raw_client import offset_for_leader_epoch
from cluster.scenarios.raw_client import produce as raw_produce
from traces import events as te
from traces.faults import TOOLS_TRACE_FILE, record_fault
from traces.history import AcknowledgedWrite
from zk.admin import create_topic
from zk.znodes import ControllerEpochZNode, ControllerZNode


Action = Callable[..., dict[str, Any]]


def _broker(run: ScenarioRun, broker: int | None = None, leader_of: str | None = None, controller: bool = False
            ) -> int:
    if broker is not None:
        return int(broker)
    state = run.state()
    if controller:
        if state.controller_id < 0:
            raise ScenarioError("there is no controller to act on")
        return state.controller_id
    view = state.partition(leader_of or run.topics[0], 0)
    if view is None or view.leader < 0:
        raise ScenarioError(f"{leader_of}-0 has no leader to act on")
    return view.leader


def _targets(run: ScenarioRun, broker: int | list[int] | None, leader_of: str | None, controller: bool,
             followers_of: str | None) -> list[int]:
    if followers_of is not None:
        view = run.state().partition(followers_of, 0)
        return [b for b in view.replicas if b != view.leader]
    if isinstance(broker, list):
        return [int(b) for b in broker]
    return [_broker(run, broker, leader_of, controller)]


def remember(run: ScenarioRun, **names: str) -> dict[str, Any]:
    """``remember(old_leader="leader:events")``: keep a fact under a name later steps use as ``"$old_leader"``."""
    missing = [fact for fact in names.values() if fact not in run.facts]
    if missing:
        raise ScenarioError(f"nothing measured yet as {', '.join(missing)}")
    return {name: run.facts[fact] for name, fact in names.items()}


def _record(run: ScenarioRun, topic: str, sent: Sent) -> None:
    run.acknowledged.setdefault(topic, []).extend(sent.acknowledged)
    now = time.time() * 1000
    with open(run.data_dir / HISTORY_FILE, "a", encoding="utf-8") as history:
        for value, offset in zip(sent.acknowledged, sent.offsets, strict=True):
            history.write(AcknowledgedWrite(topic=topic, partition=0, offset=offset, value=value,
                                            ts_ms=now).model_dump_json() + "\n")


def _sent_facts(label: str, sent: Sent) -> dict[str, Any]:
    return {f"{label}.acknowledged": len(sent.acknowledged), f"{label}.failed": len(sent.failed),
            f"{label}.errors": sorted(sent.errors), f"{label}.longest_wait_s": sent.longest_wait_s()}


def produce(run: ScenarioRun, topic: str, count: int, acks: int | str = "all", label: str | None = None,
            retries: bool = True, timeout_s: float = 20.0) -> dict[str, Any]:
    """``count`` values to partition 0, waited for; facts ``LABEL.acknowledged/failed/errors/longest_wait_s``."""
    label = label or f"produce-{topic}"
    start = len(run.acknowledged.get(topic, []))
    values = [f"{label}-{start + i}" for i in range(count)]
    sent = send(run.bootstrap_servers, topic, values, acks, retries, timeout_s)
    _record(run, topic, sent)
    return _sent_facts(label, sent)


def start_producer(run: ScenarioRun, topic: str, label: str, acks: int | str = "all", interval_ms: int = 20,
                   wait_for_acks: int = 10) -> dict[str, Any]:
    """A producer that keeps writing while the next steps act; returns once it has ``wait_for_acks`` acks."""
    producer = BackgroundProducer(run.bootstrap_servers, topic, label, acks, interval_ms / 1000)
    run.producers[label] = producer
    wait_until(lambda: producer.acknowledged_count() >= wait_for_acks, 30, f"{label}'s first acknowledgements")
    return {f"{label}.running": True}


def wait_for_acks(run: ScenarioRun, label: str, more: int = 10, timeout_s: float = 30) -> dict[str, Any]:
    """Until the background producer ``label`` has ``more`` acknowledgements than now (writes flow again)."""
    producer = run.producers[label]
    target = producer.acknowledged_count() + more
    wait_until(lambda: producer.acknowledged_count() >= target, timeout_s, f"{more} more acknowledgements of {label}")
    return {}


def stop_producer(run: ScenarioRun, label: str | list[str]) -> dict[str, Any]:
    """Stops background producers (a label or a list) and waits for their last answers; the ``produce`` facts."""
    facts: dict[str, Any] = {}
    for each in label if isinstance(label, list) else [label]:
        producer = run.producers.pop(each)
        sent = producer.stop()
        _record(run, producer.topic, sent)
        facts |= _sent_facts(each, sent) | {f"{each}.sent": producer.count}
    return facts


def _signal(run: ScenarioRun, victims: list[int], action: str, signum: int) -> dict[int, int]:
    """Signals each broker by its PID file, recorded in the tools' trace first (the feed and the analysis see the
    fault before its effects); returns broker -> PID."""
    pids = {}
    for victim in victims:
        pid = run.layout.broker_pid(victim).read()
        if pid is None:
            raise ScenarioError(f"broker {victim} is not running")
        record_fault(run.data_dir / TOOLS_TRACE_FILE, action, f"broker {victim} (pid {pid})", broker_id=victim)
        os.kill(pid, signum)
        pids[victim] = pid
    return pids


def kill9(run: ScenarioRun, broker: int | list[int] | None = None, leader_of: str | None = None,
          controller: bool = False, followers_of: str | None = None) -> dict[str, Any]:
    """SIGKILL: the broker gets no chance to hand anything over; ZooKeeper notices when its session expires."""
    victims = _targets(run, broker, leader_of, controller, followers_of)
    _signal(run, victims, "sigkill", signal.SIGKILL)
    for victim in victims:
        wait_until(lambda v=victim: not run.running(v), 10, f"broker {victim} to die")
    return {"killed": victims[0] if len(victims) == 1 else victims}


def freeze(run: ScenarioRun, broker: int | list[int] | None = None, leader_of: str | None = None,
           followers_of: str | None = None, controller: bool = False) -> dict[str, Any]:
    """SIGSTOP: the broker is alive but silent (a long GC pause, a frozen VM); past its session timeout ZooKeeper
    expires its session. Fact ``frozen`` (the broker). ``thaw`` resumes it; the runner does if a step fails."""
    victims = _targets(run, broker, leader_of, controller, followers_of)
    run.frozen.update(_signal(run, victims, "sigstop", signal.SIGSTOP))
    return {"frozen": victims[0] if len(victims) == 1 else victims}


def thaw(run: ScenarioRun, broker: int | list[int]) -> dict[str, Any]:
    """SIGCONT to brokers ``freeze`` stopped: they go on from where they were, believing what they believed."""
    for victim in broker if isinstance(broker, list) else [broker]:
        pid = run.frozen.pop(int(victim))
        record_fault(run.data_dir / TOOLS_TRACE_FILE, "sigcont", f"broker {victim} (pid {pid})", broker_id=victim)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    return {}


def isolate(run: ScenarioRun, broker: int | None = None, leader_of: str | None = None, peers: str = "zookeeper"
            ) -> dict[str, Any]:
    """Cuts the broker off from ``peers`` (zookeeper, brokers, clients or all), as `kafkasim net isolate` does:
    its namespace drops their packets both ways, everyone else still reaches everyone. Fact ``isolated``.
    ``heal`` restores every link; the runner does if a later step fails."""
    victim = _broker(run, broker, leader_of)
    run.cut = True
    net_actions.isolate(run.data_dir, victim, peers, say=lambda _: None)
    return {"isolated": victim}


def heal(run: ScenarioRun) -> dict[str, Any]:
    """Every cut link of the cluster restored (`kafkasim net heal`)."""
    net_actions.heal(run.data_dir, say=lambda _: None)
    run.cut = False
    return {}


def _last_role(run: ScenarioRun, broker: int, topic: str, partition: int = 0) -> te.ReplicaRoleChanged | None:
    """What the broker last applied for ``topic``-``partition`` (from a LeaderAndIsr): the broker's own belief."""
    return next((e for e in reversed(run.traces(broker))
                 if isinstance(e, te.ReplicaRoleChanged) and e.topic == topic and e.partition == partition), None)


def ask_role(run: ScenarioRun, broker: int, topic: str, label: str, partition: int = 0) -> dict[str, Any]:
    """What ``broker`` believes about ``topic``-``partition`` (0), whatever ZooKeeper says: ``LABEL.role`` (leader,
    follower, stopped), ``LABEL.leader`` and ``LABEL.leader_epoch``, from the last role change it traced."""
    role = _last_role(run, int(broker), topic, int(partition))
    if role is None:
        raise ScenarioError(f"broker {broker} never applied a role for {topic}-{partition}")
    return {f"{label}.role": role.role, f"{label}.leader": role.leader, f"{label}.leader_epoch": role.leader_epoch}


def wait_for_leader_and_isr(run: ScenarioRun, topic: str, without: int | list[int] | None = None,
                            timeout_s: float = 15, partition: int = 0) -> dict[str, Any]:
    """Until every replica of ``topic``-``partition`` (0) but ``without`` has applied the leader and leader epoch
    ZooKeeper names (the controller's LeaderAndIsr reached it: the leader takes writes, the followers fetch from
    it); fact ``applied_s:T``."""
    excluded = set(without if isinstance(without, list) else [] if without is None else [without])
    partition = int(partition)

    def applied() -> bool:
        view = run.state([topic]).partition(topic, partition)
        if view is None or view.leader < 0:
            return False
        roles = [_last_role(run, b, topic, partition) for b in view.replicas if b not in excluded]
        return all(r is not None and (r.leader, r.leader_epoch) == (view.leader, view.leader_epoch) for r in roles)

    started = time.monotonic()
    wait_until(applied, timeout_s, f"the replicas of {topic}-{partition} to apply the leader ZooKeeper names")
    return {f"applied_s:{topic}": round(time.monotonic() - started, 2)}


def produce_to(run: ScenarioRun, broker: int, topic: str, value: str, acks: int | str = "all",
               timeout_ms: int = 3000, label: str = "produce-to") -> dict[str, Any]:
    """One value straight to ``broker``, once, as a client whose metadata still names it the leader of
    ``topic``-0: ``LABEL.error`` (Kafka's error name, NONE, or NO ANSWER when the connection gave none) and
    ``LABEL.acknowledged`` (0 or 1). ``timeout_ms`` is the request's own, how long acks=all may wait."""
    target = run.spec.broker(int(broker))
    try:
        result = raw_produce(target.host, target.client_port, topic, [value.encode()],
                             -1 if acks == "all" else int(acks), int(timeout_ms))
    except OSError:
        return {f"{label}.error": "NO ANSWER", f"{label}.acknowledged": 0}
    if result.error_code == 0:
        _record(run, topic, Sent(acknowledged=[value], offsets=[result.base_offset]))
    return {f"{label}.error": result.error_name, f"{label}.acknowledged": int(result.error_code == 0)}


def wait_for_fenced(run: ScenarioRun, broker: int, timeout_s: float = 20) -> dict[str, Any]:
    """Until the follower ``broker`` logs that its leader refused a fetch as FENCED_LEADER_EPOCH (KIP-320).
    Facts ``fenced_by`` (the leader) and ``fenced_epoch`` (the old epoch the follower still believed in)."""
    pattern = re.compile(r"fenced by leader (\d+) \(our epoch (\d+) is old\)")

    def fenced() -> re.Match | None:
        path = run.layout.broker_log(int(broker))
        return next((m for m in map(pattern.search, path.read_text(errors="replace").splitlines()) if m), None)

    found = wait_until(fenced, timeout_s, f"broker {broker} to be fenced by its leader's epoch")
    return {"fenced_by": int(found.group(1)), "fenced_epoch": int(found.group(2))}


def ask_epoch_end(run: ScenarioRun, topic: str, current_leader_epoch: int, leader_epoch: int, label: str
                  ) -> dict[str, Any]:
    """OffsetForLeaderEpoch to the leader of ``topic``-0, as a client believing in ``current_leader_epoch``:
    facts ``LABEL.error`` (NONE, FENCED_LEADER_EPOCH for an older epoch, UNKNOWN_LEADER_EPOCH for a newer one)
    and ``LABEL.end_offset`` (where ``leader_epoch`` ends)."""
    target = run.spec.broker(_broker(run, leader_of=topic))
    answer = offset_for_leader_epoch(target.host, target.client_port, topic, int(current_leader_epoch),
                                     int(leader_epoch))
    return {f"{label}.error": answer.error_name, f"{label}.end_offset": answer.end_offset}


def kill_leader_while_followers_lag(run: ScenarioRun, topic: str, label: str, acknowledged: int = 20
                                    ) -> dict[str, Any]:
    """The followers of ``topic`` are frozen (SIGSTOP) while the background producer ``label`` gets
    ``acknowledged`` more acknowledgements, then the leader is killed (kill -9) and the followers thawed
    (SIGCONT), all well within the session timeout and replica.lag.time.max.ms, so they are still in the ISR and
    one of them is elected without what was written while they were frozen. One action: the steps between would
    take too long. Facts: ``killed``, ``LABEL.acknowledged_while_frozen``."""
    view = run.state([topic]).partition(topic, 0)
    leader, followers = view.leader, [b for b in view.replicas if b != view.leader]
    producer = run.producers[label]
    frozen = []
    try:
        for follower in followers:
            pid = run.layout.broker_pid(follower).read()
            record_fault(run.data_dir / TOOLS_TRACE_FILE, "sigstop", f"broker {follower} (pid {pid})",
                         broker_id=follower)
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)
        before = producer.acknowledged_count()
        wait_until(lambda: producer.acknowledged_count() >= before + acknowledged, 1.5,
                   f"{acknowledged} acknowledgements of {label} while the followers are frozen")
        pid = run.layout.broker_pid(leader).read()
        record_fault(run.data_dir / TOOLS_TRACE_FILE, "sigkill", f"broker {leader} (pid {pid})", broker_id=leader)
        os.kill(pid, signal.SIGKILL)
    finally:
        for follower, pid in zip(followers, frozen, strict=False):
            record_fault(run.data_dir / TOOLS_TRACE_FILE, "sigcont", f"broker {follower} (pid {pid})",
                         broker_id=follower)
            os.kill(pid, signal.SIGCONT)
    wait_until(lambda: not run.running(leader), 10, f"broker {leader} to die")
    return {"killed": leader, f"{label}.acknowledged_while_frozen": producer.acknowledged_count() - before}


def controlled_shutdown(run: ScenarioRun, broker: int | None = None, leader_of: str | None = None,
                        controller: bool = False) -> dict[str, Any]:
    """SIGTERM: the broker asks the controller to move its leaderships away first (ControlledShutdown), up to
    controlled.shutdown.max.retries times while some partition has no other live ISR member, then stops anyway.
    Facts: ``stopped``, ``shutdown_s``, ``shutdown_attempts`` and ``shutdown_remaining`` (the partitions the last
    attempt was answered with, from the broker's trace), and per topic ``leaders_while_stopping:T``: every leader
    ZooKeeper named for partition 0 while the broker was still registered (its controlled shutdown under way)."""
    victim = _broker(run, broker, leader_of, controller)
    pid = run.layout.broker_pid(victim).read()
    if pid is None:
        raise ScenarioError(f"broker {victim} is not running")
    record_fault(run.data_dir / TOOLS_TRACE_FILE, "sigterm", f"broker {victim} (pid {pid})", broker_id=victim)
    started, started_ms = time.monotonic(), time.time() * 1000
    os.kill(pid, signal.SIGTERM)
    seen: dict[str, set[int]] = {topic: set() for topic in run.topics}

    def stopped() -> bool:
        if not run.running(victim):
            return True
        partitions = run.state().partitions
        # Kept only if the broker was still registered after the read: once its ZooKeeper session closes (its
        # shutdown goes on flushing logs) the controller handles it as a failed broker and may write leader -1.
        if victim in {b.broker_id for b in run.state([]).brokers}:
            for view in partitions:
                if view.partition == 0 and view.topic in seen:
                    seen[view.topic].add(view.leader)
        return False

    wait_until(stopped, 60, f"broker {victim} to finish its controlled shutdown")
    shutdown_s = round(time.monotonic() - started, 2)
    # the trace file outlives restarts: this shutdown's attempts are those after the signal
    attempts = [e for e in run.traces(victim) if isinstance(e, te.ControlledShutdownAttempt) and e.ts_ms >= started_ms]
    return {"stopped": victim, "shutdown_s": shutdown_s, "shutdown_attempts": len(attempts),
            "shutdown_remaining": attempts[-1].remaining if attempts else [],
            **{f"leaders_while_stopping:{topic}": sorted(leaders) for topic, leaders in seen.items()}}


def start(run: ScenarioRun, broker: int | list[int]) -> dict[str, Any]:
    """Starts stopped brokers again (once a controlled shutdown under way has ended) and waits until each is
    registered in ZooKeeper."""
    for broker_id in broker if isinstance(broker, list) else [broker]:
        wait_until(lambda b=int(broker_id): not run.running(b), 60, f"broker {broker_id} to have stopped")
        try:
            start_broker(run.data_dir, int(broker_id), say=lambda _: None)
        except Exception as exc:
            raise ScenarioError(f"broker {broker_id} did not come back: {exc}") from exc
    return {}


def acknowledged_then_crash(run: ScenarioRun, topic: str) -> dict[str, Any]:
    """KIP-101's scenario 1, steered: m1 and m2 to the leader L with acks=all, each acknowledged once both
    followers fetched past it; the instant m2 is acknowledged, kill -9 of L (the controller's follower F still has
    HW = 1: the fetch that would bring it HW = 2 is parked at L for replica.fetch.wait.max.ms) and a controlled
    shutdown of the third broker X, whose removal from the ISR sends F a LeaderAndIsr in a new epoch, so F
    truncates by its rule before L's session expires and F is elected. Facts: ``killed`` (L), ``stopped`` (X),
    ``m2.error``, ``m2.offset``."""
    state = run.state()
    leader = state.partition(topic, 0).leader
    other = next(b for b in run.broker_ids() if b not in (leader, state.controller_id))
    target = run.spec.broker(leader)

    def accepted(value: bytes) -> ProduceResult | None:
        result = raw_produce(target.host, target.client_port, topic, [value], acks=-1)
        return None if result.error_code in RETRIABLE_ROUTING else result

    first = wait_until(lambda: accepted(b"m1"), 15, f"broker {leader} to accept m1")
    second = raw_produce(target.host, target.client_port, topic, [b"m2"], acks=-1)
    for signum, victim, action in ((signal.SIGKILL, leader, "sigkill"), (signal.SIGTERM, other, "sigterm")):
        pid = run.layout.broker_pid(victim).read()
        record_fault(run.data_dir / TOOLS_TRACE_FILE, action, f"broker {victim} (pid {pid})", broker_id=victim)
        os.kill(pid, signum)
    wait_until(lambda: not run.running(leader), 10, f"broker {leader} to die")
    sent = Sent()
    for result, value in ((first, "m1"), (second, "m2")):
        if result.error_code == 0:
            sent.acknowledged.append(value)
            sent.offsets.append(result.base_offset)
    _record(run, topic, sent)
    return {"killed": leader, "stopped": other, "m1.error": first.error_name, "m2.error": second.error_name,
            "m2.offset": second.base_offset}


def _accepted(run: ScenarioRun, broker: int, topic: str, value: str, acks: int, timeout_s: float = 15
              ) -> ProduceResult:
    """One value, one batch, to ``broker``, retried while it does not know yet that it leads."""
    target = run.spec.broker(broker)

    def attempt() -> ProduceResult | None:
        result = raw_produce(target.host, target.client_port, topic, [value.encode()], acks=acks)
        return None if result.error_code in RETRIABLE_ROUTING else result

    return wait_until(attempt, timeout_s, f"broker {broker} to accept a write to {topic}-0")


def produce_each(run: ScenarioRun, topic: str, values: list[str], acks: int | str = 1, label: str | None = None
                 ) -> dict[str, Any]:
    """Each value in a batch of its own to the leader of ``topic``-0 (as Kafka's acceptance tests send them):
    facts ``LABEL.acknowledged``, ``LABEL.offsets``."""
    label = label or f"produce-{topic}"
    leader = _broker(run, leader_of=topic)
    sent = Sent()
    for value in values:
        result = _accepted(run, leader, topic, value, -1 if acks == "all" else int(acks))
        if result.error_code == 0:
            sent.acknowledged.append(value)
            sent.offsets.append(result.base_offset)
        else:
            sent.failed.append(value)
    _record(run, topic, sent)
    return {f"{label}.acknowledged": len(sent.acknowledged), f"{label}.offsets": sent.offsets}


def _high_watermark_checkpoint(run: ScenarioRun, broker: int, topic: str) -> int | None:
    """The broker's replication-offset-checkpoint entry for ``topic``-0 (written every 5 s and at shutdown)."""
    path = run.layout.broker_dir(broker) / "logs" / "replication-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        name, partition, offset = line.split()
        if (name, int(partition)) == (topic, 0):
            return int(offset)
    return None


def crash_both_with_unflushed_tails(run: ScenarioRun, topic: str) -> dict[str, Any]:
    """KIP-101's scenario 2, steered (the brokers lose what was never fsynced on kill -9, and each segment holds
    one batch, so an append rolls and flushes the one before): m1 and m2 with acks=all to the leader A, until A
    checkpointed HW 2 and the follower B holds m2; B frozen (SIGSTOP), one more value to A with acks=1 (its roll
    flushes A's m2, B's m2 stays unflushed); then kill -9 of both. Facts ``a``, ``b``, ``m2.offset``."""
    view = run.state([topic]).partition(topic, 0)
    a, b = view.leader, next(r for r in view.replicas if r != view.leader)
    first = _accepted(run, a, topic, "m1", -1)
    second = _accepted(run, a, topic, "m2", -1)
    wait_until(lambda: _high_watermark_checkpoint(run, a, topic) == 2, 15, f"broker {a} to checkpoint HW 2")
    wait_until(lambda: len(replica_values(run, b, topic)) == 2, 5, f"broker {b} to hold m2")
    freeze(run, b)
    third = _accepted(run, a, topic, "flushed-only-on-A", 1)
    sent = Sent()
    for result, value in ((first, "m1"), (second, "m2"), (third, "flushed-only-on-A")):
        if result.error_code == 0:
            sent.acknowledged.append(value)
            sent.offsets.append(result.base_offset)
    _record(run, topic, sent)
    run.frozen.pop(b)  # killed frozen: SIGKILL needs no SIGCONT
    for victim in (a, b):
        pid = run.layout.broker_pid(victim).read()
        record_fault(run.data_dir / TOOLS_TRACE_FILE, "sigkill", f"broker {victim} (pid {pid})", broker_id=victim)
        os.kill(pid, signal.SIGKILL)
    for victim in (a, b):
        wait_until(lambda v=victim: not run.running(v), 10, f"broker {victim} to die")
    return {"a": a, "b": b, "m2.offset": second.base_offset}


def wait_for_leader_change(run: ScenarioRun, topic: str, old: int, timeout_s: float = 30) -> dict[str, Any]:
    """Until ZooKeeper names a leader of partition 0 other than ``old``; fact ``failover_s:TOPIC``."""
    started = time.monotonic()
    wait_until(lambda: (v := run.state([topic]).partition(topic, 0)) and v.leader not in (old, -1), timeout_s,
               f"a new leader of {topic}-0")
    return {f"failover_s:{topic}": round(time.monotonic() - started, 2)}


def wait_for_leader(run: ScenarioRun, topic: str, leader: int, timeout_s: float = 30) -> dict[str, Any]:
    """Until ZooKeeper names ``leader`` the leader of partition 0 (-1: until it is offline, without a leader)."""
    wait_until(lambda: (v := run.state([topic]).partition(topic, 0)) is not None and v.leader == int(leader),
               timeout_s, f"{topic}-0 to be led by {leader}" if int(leader) >= 0 else f"{topic}-0 to be offline")
    return {}


def wait_for_isr(run: ScenarioRun, topic: str, size: int | None = None, without: int | list[int] | None = None,
                 timeout_s: float = 30) -> dict[str, Any]:
    """Until the ISR of ``topic``-0 has ``size`` members and none of ``without``; fact ``isr_wait_s:TOPIC``."""
    excluded = set(without if isinstance(without, list) else [] if without is None else [without])

    def matches() -> bool:
        view = run.state([topic]).partition(topic, 0)
        return view is not None and (size is None or len(view.isr) == size) and not excluded & set(view.isr)

    started = time.monotonic()
    wait_until(matches, timeout_s, f"the ISR of {topic}-0 to have {size} members without {sorted(excluded)}")
    return {f"isr_wait_s:{topic}": round(time.monotonic() - started, 2)}


def wait_for_controller_change(run: ScenarioRun, old: int, timeout_s: float = 30) -> dict[str, Any]:
    started = time.monotonic()
    wait_until(lambda: run.state([]).controller_id not in (old, -1), timeout_s, "a new controller")
    return {"controller_failover_s": round(time.monotonic() - started, 2)}


def _traced(run: ScenarioRun, broker_id: int, event_type: type[te.TraceEvent]) -> list:
    """The broker's events of one type, parsing only their lines (a waiting loop reads the files often)."""
    path = run.layout.trace_file(broker_id)
    if not path.exists():
        return []
    name = f'"event":"{event_type.model_fields["event"].default}"'
    found = []
    for line in path.read_text(errors="replace").splitlines():
        if name in line.replace(" ", ""):
            try:
                found.append(te.parse_line(line))
            except ValueError:
                continue  # a line being written right now
    return found


def _registered(run: ScenarioRun) -> set[int]:
    return {b.broker_id for b in run.state([]).brokers}


def move_controller_while_paused(run: ScenarioRun, topic: str, like: str, thaw_broker: int,
                                 timeout_s: float = 4.0) -> dict[str, Any]:
    """Kafka's own test of the controller fence (ControllerIntegrationTest.testControllerMove: the event thread held,
    /controller deleted and a new controller registered, the thread released) on real processes, as one action: it
    must fit in the paused controller's session timeout, or its session would expire and the story would be another.

    The controller P is paused (SIGSTOP) while things happen that it must act on, each a ZooKeeper watch it holds
    unread: ``thaw_broker`` (frozen past its session earlier) resumes and registers again (P owes the brokers an
    UpdateMetadata), and topic ``topic`` is created on the replicas of ``like`` (P owes it a partition state znode).
    Then /controller is deleted, as an operator forces a controller move; another broker wins it and bumps
    /controller_epoch, initializes ``topic`` and tells every broker but P in the new epoch. P stays paused and
    registered; then it is resumed (SIGCONT), believing what it believed. Facts: ``paused``, ``paused_epoch``,
    ``paused_epoch_zk_version``, ``new_controller``, ``paused_for_s``."""
    state = run.state([])
    paused, paused_epoch = state.controller_id, state.controller_epoch
    epoch_zk_version = run.zk(lambda zk: zk.get(ControllerEpochZNode.path))[1].version
    started = time.monotonic()
    freeze(run, paused)
    thaw(run, thaw_broker)
    wait_until(lambda: thaw_broker in _registered(run), timeout_s, f"broker {thaw_broker} to register again")
    replicas = run.state([like]).partition(like, 0).replicas
    replicas = [b for b in replicas if b != paused] + [b for b in replicas if b == paused]
    run.zk(lambda zk: create_topic(zk, topic, 1, len(replicas), assignment={0: replicas}))
    run.topics.append(topic)
    record_fault(run.data_dir / TOOLS_TRACE_FILE, "delete /controller", f"broker {paused}'s /controller znode",
                 broker_id=paused, detail="forcing a controller move while the controller is paused")
    run.zk(lambda zk: zk.delete(ControllerZNode.path))
    new_epoch = paused_epoch + 1
    moved = wait_until(lambda: (s := run.state([])).controller_id not in (paused, -1)
                       and s.controller_epoch == new_epoch and s, timeout_s, "another controller, epoch + 1")
    others = [b for b in run.broker_ids() if b != paused and run.running(b)]

    def told(broker: int) -> bool:
        applied = {e.request for e in _traced(run, broker, te.ControlRequestApplied)
                   if e.request_controller_epoch == new_epoch and e.error_code == 0}
        return {"UpdateMetadata", "LeaderAndIsr"} <= applied

    for broker in others:
        wait_until(lambda b=broker: told(b), timeout_s, f"broker {broker} to apply requests of controller epoch "
                                                        f"{new_epoch}")
    wait_until(lambda: (v := run.state([topic]).partition(topic, 0)) is not None and v.leader >= 0, timeout_s,
               f"the new controller to initialize {topic}-0")
    if paused not in _registered(run):
        raise ScenarioError(f"broker {paused}'s session expired while it was paused: this story needs "
                            f"zookeeper.session.timeout.ms above {time.monotonic() - started:.1f} s")
    paused_for_s = round(time.monotonic() - started, 2)
    thaw(run, paused)
    return {"paused": paused, "paused_epoch": paused_epoch, "paused_epoch_zk_version": epoch_zk_version,
            "new_controller": moved.controller_id, "paused_for_s": paused_for_s}


def wait_for_controller_fenced(run: ScenarioRun, broker: int, epoch: int, timeout_s: float = 20) -> dict[str, Any]:
    """Until the deposed controller ``broker`` (of controller epoch ``epoch``) traced a write ZooKeeper refused on its
    /controller_epoch check, a broker traced a request of it refused as STALE_CONTROLLER_EPOCH, and it resigned.
    Facts: ``fenced.operation`` (the event it was handling), ``fenced.write``, ``fenced.controller_epoch``,
    ``fenced.expected_zk_version`` (the zkVersion of /controller_epoch it expected), ``epoch_zk_version`` (the one
    ZooKeeper holds), ``ignored_by`` (the brokers that refused its requests), ``ignored_requests`` (their kinds),
    ``ignored.epoch_seen`` (the newest controller epoch those brokers had seen), ``resigned``, and per topic
    ``state_controller_epoch:T``: the controller epoch in the state znode of ``T``-0 (who wrote it)."""
    broker = int(broker)
    fenced = wait_until(lambda: next((e for e in _traced(run, broker, te.ControllerWriteFenced)
                                      if e.controller_epoch == int(epoch)), None), timeout_s,
                        f"controller {broker}'s write to be refused by the /controller_epoch check")

    def ignored() -> list:
        return [e for b in run.broker_ids() if b != broker for e in _traced(run, b, te.ControlRequestFenced)
                if e.from_controller == broker and e.request_controller_epoch == int(epoch)]

    refusals = wait_until(ignored, timeout_s, f"a broker to refuse a request of controller {broker} as stale")
    wait_until(lambda: any(e.controller_epoch == int(epoch) for e in _traced(run, broker, te.ControllerResigned)),
               timeout_s, f"broker {broker} to resign as controller")
    state = run.state()
    return {"fenced.operation": fenced.operation, "fenced.write": fenced.write,
            "fenced.controller_epoch": fenced.controller_epoch,
            "fenced.expected_zk_version": fenced.expected_epoch_zk_version,
            "epoch_zk_version": run.zk(lambda zk: zk.get(ControllerEpochZNode.path))[1].version,
            "ignored_by": sorted({e.broker_id for e in refusals}),
            "ignored_requests": sorted({e.request for e in refusals}),
            "ignored.epoch_seen": max(e.highest_controller_epoch_seen for e in refusals), "resigned": True,
            **{f"state_controller_epoch:{v.topic}": v.controller_epoch for v in state.partitions if v.partition == 0}}


def replica_values(run: ScenarioRun, broker_id: int, topic: str) -> list[str | None]:
    directory = run.layout.broker_dir(broker_id) / "logs" / f"{topic}-0"
    if not directory.is_dir():
        return []
    return [record.value for record in partition_records(broker_id, topic, 0, directory)]


def read_all(run: ScenarioRun, topics: list[str] | None = None, timeout_s: float = 20) -> dict[str, Any]:
    """Reads every replica's log from its segment files, once the live replicas hold the same records (or the
    deadline passed), and counts the acknowledged values missing from the leader's log:
    ``acknowledged:T``, ``lost:T`` (how many), ``lost_values:T`` (the first few), ``replicas_agree:T`` and
    ``divergent_offsets:T`` (the offsets where live replicas hold different values, or one has none)."""
    facts: dict[str, Any] = {}
    for topic in topics or run.topics:
        def agreed(t: str = topic) -> list | None:
            view = run.state([t]).partition(t, 0)
            live = [b for b in view.replicas if run.running(b)]
            logs = [replica_values(run, b, t) for b in live]
            return logs if view.leader >= 0 and all(log == logs[0] for log in logs) else None

        try:
            wait_until(agreed, timeout_s, f"the live replicas of {topic}-0 to agree")
            facts[f"replicas_agree:{topic}"] = True
        except ScenarioError:
            facts[f"replicas_agree:{topic}"] = False
        view = run.state([topic]).partition(topic, 0)
        leader = view.leader
        logs = [replica_values(run, b, topic) for b in view.replicas if run.running(b)]
        facts[f"divergent_offsets:{topic}"] = [offset for offset in range(max(map(len, logs), default=0))
                                               if len({tuple(log[offset:offset + 1]) for log in logs}) > 1]
        present = set(replica_values(run, leader, topic)) if leader >= 0 else set()
        lost = [v for v in run.acknowledged.get(topic, []) if v not in present]
        facts |= {f"acknowledged:{topic}": len(run.acknowledged.get(topic, [])), f"lost:{topic}": len(lost),
                  f"lost_values:{topic}": lost[:5]}
    (run.data_dir / "scenario-reads.json").write_text(json.dumps(facts, indent=2) + "\n")
    return facts


def pause(run: ScenarioRun, seconds: float) -> dict[str, Any]:
    """Lets time pass on purpose (a story that needs the cluster to notice something, not a wait for it)."""
    time.sleep(seconds)
    return {}


ACTIONS: dict[str, Action] = {
    "remember": remember,
    "produce": produce,
    "start_producer": start_producer,
    "wait_for_acks": wait_for_acks,
    "stop_producer": stop_producer,
    "kill9": kill9,
    "freeze": freeze,
    "thaw": thaw,
    "isolate": isolate,
    "heal": heal,
    "ask_role": ask_role,
    "wait_for_leader_and_isr": wait_for_leader_and_isr,
    "produce_to": produce_to,
    "wait_for_fenced": wait_for_fenced,
    "ask_epoch_end": ask_epoch_end,
    "kill_leader_while_followers_lag": kill_leader_while_followers_lag,
    "controlled_shutdown": controlled_shutdown,
    "start": start,
    "acknowledged_then_crash": acknowledged_then_crash,
    "produce_each": produce_each,
    "crash_both_with_unflushed_tails": crash_both_with_unflushed_tails,
    "wait_for_leader_change": wait_for_leader_change,
    "wait_for_leader": wait_for_leader,
    "wait_for_isr": wait_for_isr,
    "wait_for_controller_change": wait_for_controller_change,
    "move_controller_while_paused": move_controller_while_paused,
    "wait_for_controller_fenced": wait_for_controller_fenced,
    "read_all": read_all,
    "pause": pause,
    "produce_partitions": group_actions.produce_partitions,
    "start_consumers": group_actions.start_consumers,
    "wait_consumed": group_actions.wait_consumed,
    "kill9_consumer": group_actions.kill9_consumer,
    "wait_for_takeover": group_actions.wait_for_takeover,
    "start_transformer": txn_actions.start_transformer,
    "transaction": txn_actions.transaction,
    "fetch_offsets": txn_actions.fetch_offsets,
    "commit_offset": txn_actions.commit_offset,
    "wait_for_coordinator_move": txn_actions.wait_for_coordinator_move,
    "read_output": txn_actions.read_output,
    "finish_transformer": txn_actions.finish_transformer,
}
