"""One group consumer as its own OS process, so a test or benchmark can kill -9 it. It subscribes,
consumes, commits synchronously after every poll, and reports as JSON lines on stdout: ``assigned`` (its
partitions after each rebalance) and ``consumed`` (partition, offset of every record, with the wall-clock
time). It stops by itself after ``--max-seconds``. ``GroupConsumerProcess`` starts one and reads its report.

    python -m cluster.group_consumer confluent|kafka-python BOOTSTRAP GROUP TOPIC [--assignor range]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class GroupConsumerProcess:
    def __init__(self, client: str, bootstrap: str, group: str, topic: str, log_path: Path, *,
                 assignor: str = "range", session_timeout_ms: int = 6000, max_seconds: float = 150) -> None:
        self.log_path = log_path
        self._out = log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cluster.group_consumer", client, bootstrap, group, topic,
             "--assignor", assignor, "--session-timeout-ms", str(session_timeout_ms),
             "--max-seconds", str(max_seconds)],
            cwd=REPO, stdout=self._out, stderr=subprocess.DEVNULL, start_new_session=True)

    def events(self) -> list[dict]:
        events = []
        for line in self.log_path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line being written right now
        return events

    def assignment(self) -> set[int] | None:
        assigned = [e for e in self.events() if e["event"] == "assigned"]
        return set(assigned[-1]["partitions"]) if assigned else None

    def consumed(self) -> list[tuple[int, int, float]]:
        return [(e["partition"], e["offset"], e["t"]) for e in self.events() if e["event"] == "consumed"]

    def kill9(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill9()
        self._out.close()


def owned_exactly_once(consumers: list[GroupConsumerProcess], partitions: int) -> bool:
    assignments = [c.assignment() or set() for c in consumers]
    return (all(assignments) and sum(len(a) for a in assignments) == partitions
            and set().union(*assignments) == set(range(partitions)))


def say(event: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": 500,
                         "partition.assignment.strategy": args.assignor})
    owned: set[int] = set()

    def on_assign(c, partitions):
        owned.update(p.partition for p in partitions)
        if args.assignor == "cooperative-sticky":
            c.incremental_assign(partitions)
        say("assigned", partitions=sorted(owned))

    def on_revoke(c, partitions):
        owned.difference_update(p.partition for p in partitions)
        if args.assignor == "cooperative-sticky":
            c.incremental_unassign(partitions)
        say("assigned", partitions=sorted(owned))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    deadline = time.monotonic() + args.max_seconds
    try:
        while time.monotonic() < deadline:
            messages = consumer.consume(100, timeout=0.5)
            good = [m for m in messages if m.error() is None]
            for message in good:
                say("consumed", partition=message.partition(), offset=message.offset())
            if good:
                consumer.commit(asynchronous=False)
                say("committed", offsets={m.partition(): m.offset() + 1 for m in good})
    finally:
        consumer.close()


def run_kafka_python(args: argparse.Namespace) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned):
            say("assigned", partitions=sorted(p.partition for p in consumer.assignment()))

        def on_partitions_revoked(self, revoked):
            pass

    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=500)
    consumer.subscribe([args.topic], listener=Listener())
    deadline = time.monotonic() + args.max_seconds
    try:
        while time.monotonic() < deadline:
            batches = consumer.poll(timeout_ms=500)
            count = 0
            for tp, records in batches.items():
                for record in records:
                    say("consumed", partition=tp.partition, offset=record.offset)
                    count += 1
            if count:
                consumer.commit()
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=["confluent", "kafka-python"])
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--assignor", default="range")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--max-seconds", type=float, default=120)
    args = parser.parse_args()
    (run_confluent if args.client == "confluent" else run_kafka_python)(args)


if __name__ == "__main__":
    main()
