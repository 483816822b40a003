"""The duplicate an idempotent librdkafka producer makes by itself, reproduced on purpose.

Idempotence only holds within one producer epoch. librdkafka bumps its epoch for the whole producer when a message
times out in flight (or a request gets OUT_OF_ORDER_SEQUENCE_NUMBER behind a failed one), and then sends again,
under the new epoch, every message it has no acknowledgement for, on every partition, including one whose first
send was written but not yet acknowledged (confluentinc/librdkafka#4953). No broker can tell that second copy from
a new message. Here: m0 waits on a frozen leader until it times out; m1, sent later to another partition, is
written by its leader while that partition's follower is frozen (acks=all cannot be answered). The timeout bumps
the epoch, m1 is sent again and written again. The chaos checker must call that a client re-send, not a broker
duplicate, by the producer epochs stored in the log.
"""

from __future__ import annotations

import logging
import signal
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.chaos.checker import check
from cluster.chaos.history import FinalReads, Operation, Recorder
from cluster.final_logs import partition_records
from tests.harness import start_cluster, wait_until

MESSAGE_TIMEOUT_MS = 30_000
M1_AFTER_S = 15  # m1 is this much younger than m0, so it is still being retried when m0 times out


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.chaos
def test_a_timeout_that_bumps_the_producer_epoch_writes_another_partitions_unacknowledged_value_twice(
        tmp_path, zk_server):
    cluster = start_cluster(tmp_path, zk_server)
    log = logging.getLogger("kafkasim.test.librdkafka")
    lines = _Lines()
    log.addHandler(lines)
    log.setLevel(logging.DEBUG)
    paused: set[int] = set()
    try:
        bootstrap = cluster.spec.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        placed = {"num_partitions": 1, "replication_factor": -1}
        created = admin.create_topics([NewTopic("stalled", replica_assignment=[[1]], **placed),
                                       NewTopic("written", replica_assignment=[[2, 3]], **placed,
                                                config={"min.insync.replicas": "2"})])
        for future in created.values():
            future.result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                             "message.timeout.ms": MESSAGE_TIMEOUT_MS, "request.timeout.ms": 2000,
                             "retry.backoff.ms": 100, "linger.ms": 0, "debug": "eos"}, logger=log)
        reports: dict[str, tuple[str | None, int]] = {}

        def report(error, message) -> None:
            reports[message.value().decode()] = (error.name() if error else None, message.offset())

        for topic in ("stalled", "written"):
            producer.produce(topic, b"warm-" + topic.encode(), on_delivery=report)
        assert producer.flush(60) == 0 and all(error is None for error, _ in reports.values()), reports

        def freeze(broker: int) -> None:
            cluster.signal(broker, signal.SIGSTOP)
            paused.add(broker)

        freeze(1)  # the leader of "stalled": m0 goes out and is never answered
        producer.produce("stalled", b"m0", on_delivery=report)
        sent_m0 = time.monotonic()
        # the scenario is two message ages, so this wait is time itself, not a condition
        while time.monotonic() - sent_m0 < M1_AFTER_S:
            producer.poll(0.2)
        freeze(3)  # the follower of "written": its leader writes m1 but acks=all cannot be answered
        producer.produce("written", b"m1", on_delivery=report)
        leader_dir = cluster.layout.broker_dir(2) / "logs" / "written-0"

        def m1_copies() -> list:
            return [r for r in partition_records(2, "written", 0, leader_dir) if r.value == "m1"]

        wait_until(lambda: producer.poll(0.1) is not None and m1_copies(), 10, "m1 written by broker 2")
        wait_until(lambda: producer.poll(0.2) is not None and "m0" in reports, MESSAGE_TIMEOUT_MS / 1000 + 30,
                   "m0 to time out")
        assert reports["m0"][0] == "_MSG_TIMED_OUT", reports
        wait_until(lambda: producer.poll(0.2) is not None and any("bumped epoch" in line for line in lines.lines),
                   30, "librdkafka to bump its epoch")
        for broker in sorted(paused):
            cluster.signal(broker, signal.SIGCONT)
        paused.clear()
        wait_until(lambda: producer.poll(0.2) is not None and "m1" in reports, 60, "m1's delivery report")
        assert reports["m1"][0] is None, reports
        producer.flush(30)

        copies = wait_until(lambda: found if len(found := m1_copies()) == 2 else None, 30, "the second copy of m1")
        assert copies[1].offset > copies[0].offset
        writers = {(c.producer_id, c.producer_epoch) for c in copies}
        assert len(writers) == 2, f"both copies under one producer epoch would be the broker's fault: {copies}"

        operations: list[Operation] = []
        recorder = Recorder(operations.append, lambda _: None, lambda: time.time() * 1000, time.monotonic_ns)
        for value in ("warm-written", "m1"):
            invoke = recorder.invoke("producer-0", "send", topic="written", value=value)
            recorder.complete(invoke, "ok", partition=0, offset=reports[value][1])
        stored = [r for b in (2, 3) for r in partition_records(
            b, "written", 0, cluster.layout.broker_dir(b) / "logs" / "written-0")]
        result = check(operations, FinalReads.from_stored_records(stored, leaders={("written", 0): 2}))
        assert result.counts["duplicate"] == 0 and result.counts["client-resend"] == 1, result.anomalies
        assert result.verdict == "valid"
    finally:
        for broker in paused:
            cluster.signal(broker, signal.SIGCONT)
        log.removeHandler(lines)
        cluster.stop_all()
