"""One round of ``kafkasim bench groups`` on a running cluster: member failover, then coordinator failover.

A producer thread keeps records flowing to every partition so that consuming and committing never pause
for lack of data.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.bench.cluster_run import poll_until
from cluster.bench.groups import MEMBERS, SESSION_TIMEOUT_MS
from cluster.group_consumer import GroupConsumerProcess, owned_exactly_once
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec

TOPIC, GROUP, PARTITIONS = "bench-groups", "bench-group", 6
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
