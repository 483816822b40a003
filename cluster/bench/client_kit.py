"""What the client benches share: confluent-kafka (librdkafka) producers and admin on a bench's cluster,
phase deadlines, stopwatches with CPU use, delivery counting, and running phases in order."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.bench.process_facts import CpuMeter
from cluster.bench.report import Phase
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec

CLIENT_VERSION = getattr(confluent_kafka, "__version__", None) or str(confluent_kafka.version())
LIBRDKAFKA_VERSION = confluent_kafka.libversion()[0]
PROFILE = "classroom"

# Batching as a user tuning for throughput sets it: a short linger so batches fill, batches of about 1 MB
# (librdkafka's own default, which also stays under the brokers' message.max.bytes), no compression.
THROUGHPUT_PRODUCER = {"acks": 1, "linger.ms": 10, "batch.size": 1_000_000, "compression.type": "none"}
# Latency: nothing waits for company. Nagle off, as the Java client always has it.
LATENCY_PRODUCER = {"acks": 1, "linger.ms": 0, "compression.type": "none", "socket.nagle.disable": True}


class PhaseError(ClusterError):
    """A phase could not finish within its bounds; the message says how far it got and what to try."""


class TopicLayout(Protocol):
    """What ClientBench itself reads of a bench's settings; each bench's phases read its own settings type."""

    partitions: int
    message_bytes: int


class Deadline:
    def __init__(self, phase: str, seconds: float) -> None:
        self.phase, self.seconds = phase, seconds
        self.ends = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.ends - time.monotonic())

    def check(self, progress: Callable[[], str]) -> None:
        if time.monotonic() >= self.ends:
            raise PhaseError(f"the {self.phase} phase did not finish within {self.seconds:g} s ({progress()}); "
                             "raise --phase-timeout or lower the sizes, and check the brokers are serving")


class ClientLog(logging.Handler):
    """librdkafka's log lines, kept instead of printed; a line per connection a broker closed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def broker_closed_connections(self) -> int:
        return sum("connection closed by peer" in line for line in self.lines)


class Stopwatch:
    """Wall time and CPU use of one timed window."""

    def __init__(self, meter: CpuMeter) -> None:
        self.meter = meter
        self.cpu_before = meter.sample()
        self.started = time.perf_counter()
        self.elapsed_s = 0.0
        self.cpu_s: dict = {}

    def stop(self) -> float:
        self.elapsed_s = time.perf_counter() - self.started
        self.cpu_s = self.meter.sample().since(self.cpu_before)
        return self.elapsed_s


class Deliveries:
    """Delivery reports of one producer: counts and the first error."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: KafkaError | None = None

    def __call__(self, error: KafkaError | None, message) -> None:
        if error is None:
            self.delivered += 1
            return
        self.failed += 1
        self.first_error = self.first_error or error

    @property
    def reported(self) -> int:
        return self.delivered + self.failed

    def raise_if_failed(self, what: str) -> None:
        if self.failed:
            raise PhaseError(f"{self.failed:,} {what} messages were not delivered; the first error: "
                             f"{self.first_error}")


@dataclass
class ClientBench:
    """One run's cluster, settings and shared pieces."""

    spec: ClusterSpec
    settings: TopicLayout
    meter: CpuMeter
    client_log: ClientLog
    say: Callable[[str], None]

    @property
    def payload(self) -> bytes:
        return os.urandom(self.settings.message_bytes)  # incompressible, though compression is off anyway

    def config(self, base: dict, name: str) -> dict:
        logger = logging.getLogger(f"kafkasim.bench.rdkafka.{name}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        if self.client_log not in logger.handlers:
            logger.addHandler(self.client_log)
        return {"bootstrap.servers": self.spec.bootstrap_servers, "client.id": f"kafkasim-bench-{name}",
                "logger": logger, **base}

    def create_topic(self, name: str, deadline: Deadline, replication_factor: int = 1,
                     config: dict[str, str] | None = None) -> None:
        """Through the client plane's CreateTopics, then until Metadata shows a leader for every partition
        and every replica in its ISR."""
        admin = AdminClient(self.config({}, "admin"))
        futures = admin.create_topics([NewTopic(name, self.settings.partitions, replication_factor,
                                                config=config or {})],
                                      operation_timeout=min(30.0, deadline.remaining()))
        try:
            futures[name].result(timeout=deadline.remaining())
        except KafkaException as exc:
            raise PhaseError(f"creating topic {name} failed: {exc.args[0]}") from None
        except TimeoutError:
            deadline.check(lambda: f"topic {name} not created yet")
        while True:
            try:
                topic = admin.list_topics(name, timeout=max(0.1, min(5.0, deadline.remaining()))).topics[name]
                if topic.error is None and len(topic.partitions) == self.settings.partitions and all(
                        p.leader >= 0 and p.error is None and len(p.isrs) == replication_factor
                        for p in topic.partitions.values()):
                    return
            except KafkaException:
                pass
            deadline.check(lambda: f"topic {name} has no leader for every partition yet")
            time.sleep(0.05)

    def produce(self, producer: Producer, topic: str, count: int, deadline: Deadline, what: str) -> Stopwatch:
        """``count`` messages as fast as the producer takes them, timed until the last acknowledgement."""
        payload = self.payload
        deliveries = Deliveries()
        progress = lambda: f"{deliveries.delivered:,} of {count:,} {what} messages acknowledged"  # noqa: E731
        watch = Stopwatch(self.meter)
        for sent in range(count):
            while True:
                try:
                    producer.produce(topic, payload, on_delivery=deliveries)
                    break
                except BufferError:  # librdkafka's queue is full: serve delivery reports until it drains
                    producer.poll(0.005)
                    deadline.check(progress)
            if sent % 1024 == 0:
                producer.poll(0)
                deadline.check(progress)
        while deliveries.reported < count:
            producer.flush(min(0.5, deadline.remaining()))
            deadline.check(progress)
        watch.stop()
        deliveries.raise_if_failed(what)
        return watch


def broker_log_tails(layout: ClusterLayout, spec: ClusterSpec, lines: int = 5) -> str:
    tails = []
    for broker in spec.brokers:
        try:
            text = layout.broker_log(broker.broker_id).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            text = ["(no log)"]
        tails.append(f"broker {broker.broker_id} ({layout.broker_log(broker.broker_id)}):\n  " + "\n  ".join(text))
    return "\n".join(tails)


def run_phases(phases: Sequence[tuple[str, Callable]], target, layout: ClusterLayout, spec: ClusterSpec,
               say: Callable[[str], None]) -> tuple[list[Phase], str | None]:
    """Each (name, phase) on ``target`` in order; the first PhaseError stops the run and is returned."""
    reports: list[Phase] = []
    for name, phase in phases:
        say(f"phase {name} ...")
        try:
            reports.append(phase(target))
        except PhaseError as exc:
            say(f"the end of each broker's log:\n{broker_log_tails(layout, spec)}")
            return reports, str(exc)
    return reports, None
