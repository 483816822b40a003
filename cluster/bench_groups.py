"""``kafkasim bench groups``: how long a consumer group stops consuming when something dies, on a fresh
3-broker cluster (classroom profile), with confluent-kafka consumers running as separate processes:

(a) member failover: kill -9 one of three members of a group on a 6-partition topic; time until one of the
    others consumes a record of the dead member's partitions again. Bounded below by the session timeout
    (the coordinator must first expire the member), then a rebalance;
(b) coordinator failover: kill -9 the broker coordinating the group; time until a commit reaches the new
    coordinator (a committed offset read back from it is higher than before the kill). Bounded below by
    ZooKeeper noticing the dead broker, then a leader election for the __consumer_offsets partition, the
    new leader replaying that partition, and the clients finding it.

A producer thread keeps records flowing to every partition so that consuming and committing never pause
for lack of data. Each round uses a fresh cluster.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.bench import poll_until, temporary_cluster
from cluster.bench_figures import Figure, PhaseReport, render_table
from cluster.group_consumer import GroupConsumerProcess, owned_exactly_once
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec

TOPIC, GROUP, PARTITIONS, MEMBERS = "bench-groups", "bench-group", 6, 3
SESSION_TIMEOUT_MS = 6000  # group.min.session.timeout.ms: the fastest expiry a member may ask for
ZOOKEEPER_SESSION_MS = 2000  # the classroom profile's zookeeper.session.timeout.ms
STEP_TIMEOUT_S = 90
# librdkafka reports every refused connection to a killed broker; expected here, so kept out of the output
QUIET = logging.getLogger("kafkasim.bench.groups.librdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def _wait(condition, what: str, timeout_s: float = STEP_TIMEOUT_S):
    return poll_until(condition, timeout_s, what, interval_s=0.05)


class SteadyProducer:
    """About 200 records per second spread over every partition, until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5},
                                  logger=QUIET)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(0.005):
            self._producer.produce(TOPIC, value=str(i).encode(), partition=i % PARTITIONS)
            self._producer.poll(0)
            i += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(10)


def _committed(reader: Consumer) -> dict[int, int]:
    # a consumer that never subscribes does not join the group: committed() is just OffsetFetch
    try:
        result = reader.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=5)
    except KafkaException:
        return {}  # coordinator moving or loading
    return {tp.partition: tp.offset for tp in result if tp.offset >= 0}


def _kill9_broker(layout: ClusterLayout, broker_id: int) -> None:
    pid = layout.broker_pid(broker_id).read()
    if pid is None:
        raise ClusterError(f"broker {broker_id} is not running")
    os.kill(pid, signal.SIGKILL)


def one_round(spec: ClusterSpec, layout: ClusterLayout, work: Path) -> tuple[float, float]:
    bootstrap = spec.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap}, logger=QUIET)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP}, logger=QUIET)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    producer = SteadyProducer(bootstrap)
    consumers = [GroupConsumerProcess("confluent", bootstrap, GROUP, TOPIC, work / f"member-{i}.jsonl",
                                      session_timeout_ms=SESSION_TIMEOUT_MS, max_seconds=4 * STEP_TIMEOUT_S)
                 for i in range(MEMBERS)]
    try:
        _wait(lambda: owned_exactly_once(consumers, PARTITIONS), "every partition to have one owner")
        _wait(lambda: all(c.consumed() for c in consumers), "every member to consume")
        victim, survivors = consumers[0], consumers[1:]
        orphaned = victim.assignment() or set()
        victim.kill9()
        killed_at = time.time()
        resumed_at = _wait(lambda: min((t for c in survivors for p, _, t in c.consumed()
                                        if p in orphaned and t > killed_at), default=None),
                           "the dead member's partitions to be consumed again")
        member_failover_s = resumed_at - killed_at

        description = admin.describe_consumer_groups([GROUP], request_timeout=10)[GROUP].result(15)
        coordinator = description.coordinator.id
        before = _committed(reader)
        _kill9_broker(layout, coordinator)
        killed = time.monotonic()
        _wait(lambda: (now := _committed(reader)) and any(now.get(p, -1) > before.get(p, -1) for p in now),
              "a commit accepted by the new coordinator")
        coordinator_failover_s = time.monotonic() - killed
        return member_failover_s, coordinator_failover_s
    finally:
        producer.stop()
        reader.close()
        for consumer in consumers:
            consumer.stop()


def run_groups_bench(rounds: int = 3) -> int:
    member, coordinator = [], []
    error = None
    for number in range(1, rounds + 1):
        with temporary_cluster(3, "classroom") as (spec, layout), tempfile.TemporaryDirectory() as work:
            try:
                m, c = one_round(spec, layout, Path(work))
            except ClusterError as exc:
                error = f"round {number}: {exc}"
                break
            member.append(m)
            coordinator.append(c)
            print(f"round {number}: member failover {m:.2f} s, coordinator failover {c:.2f} s", flush=True)
    phases = []
    if member:
        phases.append(PhaseReport(
            "member", f"kill -9 of 1 of {MEMBERS} confluent-kafka members, session.timeout.ms="
                      f"{SESSION_TIMEOUT_MS}: {', '.join(f'{v:.2f}' for v in member)} s",
            sum(member), [
                Figure("member_failover_median_s", "kill -9 member -> its partitions consumed again (median)",
                       statistics.median(member), "s"),
                # negative is possible: the session runs from the member's last heartbeat, which came up to
                # heartbeat.interval.ms (500) before the kill
                Figure("member_failover_over_session_s", "  ... minus the session timeout (from last heartbeat)",
                       statistics.median(member) - SESSION_TIMEOUT_MS / 1000, "s")]))
    if coordinator:
        phases.append(PhaseReport(
            "coord", f"kill -9 of the group coordinator, zookeeper.session.timeout.ms={ZOOKEEPER_SESSION_MS}: "
                     f"{', '.join(f'{v:.2f}' for v in coordinator)} s",
            sum(coordinator), [
                Figure("coordinator_failover_median_s", "kill -9 coordinator -> group commits again (median)",
                       statistics.median(coordinator), "s")]))
    table = render_table(f"kafkasim consumer group benchmark ({len(member)} rounds, 3 brokers, classroom profile)",
                         phases, error)
    print(table.split("\n\nMiB/s")[0])  # the shared renderer's footer is about throughput, not measured here
    print(json.dumps({"member_failover_s": member, "coordinator_failover_s": coordinator}))
    return 1 if error else 0
