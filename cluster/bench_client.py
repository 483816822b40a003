"""``kafkasim bench client``: what an unmodified Kafka client gets from a fresh 3-broker cluster, measured
with confluent-kafka (librdkafka) on the same machine as the brokers:

(a) produce throughput: 1 KiB messages to 3 partitions, acks=1, batched as a throughput-minded user would;
(b) consume throughput: a topic of ``--size-mib`` MiB (1 GiB by default) read from the beginning;
(c) produce latency: send -> delivery callback at a fixed rate, linger.ms=0, p50 and p99.

Every topic has replication factor 1 (written while followers did not fetch yet), so acks=1 is acks=all. The
consumer takes its partitions with assign() at explicit offsets and never commits: confluent-kafka insists
on a group.id, and librdkafka then keeps looking for the group coordinator in the background, which this
kafkasim answers by closing the connection (counted in the consume phase) — but fetching never waits on it.

Each phase has a deadline; one that cannot finish stops the run with what it got that far.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.bench import temporary_cluster
from cluster.bench_figures import (
    MIB,
    CpuSample,
    Figure,
    PhaseReport,
    percentile,
    render_table,
    report_dict,
    throughput_mib_s,
)
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec

CLIENT_VERSION = getattr(confluent_kafka, "__version__", None) or str(confluent_kafka.version())
LIBRDKAFKA_VERSION = confluent_kafka.libversion()[0]
PRODUCE_TARGET_MIB_S = 60.0
CONSUME_TARGET_MIB_S = 150.0
PROFILE = "classroom"

# Batching as a user tuning for throughput sets it: a short linger so batches fill, batches of about 1 MB
# (librdkafka's own default, which also stays under the brokers' message.max.bytes), no compression.
THROUGHPUT_PRODUCER = {"acks": 1, "linger.ms": 10, "batch.size": 1_000_000, "compression.type": "none"}
# Latency: nothing waits for company. Nagle off, as the Java client always has it.
LATENCY_PRODUCER = {"acks": 1, "linger.ms": 0, "compression.type": "none", "socket.nagle.disable": True}
CONSUMER = {
    "group.id": "kafkasim-bench",        # required by confluent-kafka; only assign() is used, nothing committed
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # librdkafka postpones a partition's next fetch by fetch.queue.backoff.ms (default 1000) whenever its
    # local queue holds more than queued.min.messages (100,000); a broker that fills that faster than
    # Python drains it turns the default into one-second stalls (measured here: ~116 MiB/s against ~320).
    "fetch.queue.backoff.ms": 10,
}


class PhaseError(ClusterError):
    """A phase could not finish within its bounds; the message says how far it got and what to try."""


@dataclass(frozen=True)
class ClientBenchSettings:
    messages: int = 300_000          # (a) messages produced
    size_mib: int = 1024             # (b) size of the topic read from the beginning
    latency_messages: int = 5_000    # (c) messages sent at latency_rate
    latency_rate: int = 500          # (c) messages per second
    phase_timeout_s: float = 120.0
    message_bytes: int = 1024
    partitions: int = 3
    brokers: int = 3

    def check(self, free_bytes: int) -> None:
        for name in ("messages", "size_mib", "latency_messages", "latency_rate", "phase_timeout_s"):
            if getattr(self, name) <= 0:
                raise ClusterError(f"--{name.replace('_', '-').removesuffix('-s')} must be positive")
        paced_s = self.latency_messages / self.latency_rate
        if paced_s + 10 > self.phase_timeout_s:
            raise ClusterError(f"the latency phase needs {paced_s:.0f} s at {self.latency_rate} msg/s plus set-up, "
                               f"more than --phase-timeout {self.phase_timeout_s:g} s: lower --latency-messages "
                               "or raise --phase-timeout")
        needed = int(1.2 * (self.size_mib * MIB + (self.messages + self.latency_messages) * self.message_bytes))
        if free_bytes < needed:
            raise ClusterError(f"the run writes about {needed / MIB:,.0f} MiB but {tempfile.gettempdir()} has "
                               f"{free_bytes / MIB:,.0f} MiB free: lower --size-mib / --messages, or point "
                               "TMPDIR at a roomier disk")


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


class CpuMeter:
    def __init__(self, spec: ClusterSpec, layout: ClusterLayout) -> None:
        self.broker_pids = {b.broker_id: layout.broker_pid(b.broker_id).read() for b in spec.brokers}
        self.zookeeper_pid = layout.zookeeper_pid().read()
        self.ticks = os.sysconf("SC_CLK_TCK")

    def _process(self, pid: int | None) -> float:
        if pid is None:
            return 0.0
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / self.ticks  # utime + stime, every thread

    def sample(self) -> CpuSample:
        cpu = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        busy = sum(cpu) - cpu[3] - cpu[4]  # all but idle and iowait
        me = os.times()
        return CpuSample({b: self._process(pid) for b, pid in self.broker_pids.items()},
                         self._process(self.zookeeper_pid), me.user + me.system, busy / self.ticks)


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
class Bench:
    """One run's cluster, settings and shared pieces."""

    spec: ClusterSpec
    settings: ClientBenchSettings
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


def produce_phase(bench: Bench) -> PhaseReport:
    settings = bench.settings
    deadline = Deadline("produce", settings.phase_timeout_s)
    bench.create_topic("bench-produce", deadline)
    producer = Producer(bench.config(THROUGHPUT_PRODUCER, "producer"))
    try:
        producer.list_topics("bench-produce", timeout=max(0.1, deadline.remaining()))  # connected before the clock
    except KafkaException as exc:
        raise PhaseError(f"the producer got no metadata for bench-produce: {exc.args[0]}") from None
    watch = bench.produce(producer, "bench-produce", settings.messages, deadline, "produced")
    elapsed = watch.elapsed_s
    rate = throughput_mib_s(settings.messages * settings.message_bytes, elapsed)
    figure = Figure("produce_throughput", f"(a) produce, 1 KiB msgs, {settings.partitions} partitions, RF1, acks=1",
                    rate, "MiB/s", PRODUCE_TARGET_MIB_S)
    return PhaseReport("produce", f"{settings.messages:,} x {settings.message_bytes} B in {elapsed:.2f} s "
                       f"({settings.messages / elapsed:,.0f} msg/s)", elapsed, [figure],
                       {"messages": settings.messages, "producer": THROUGHPUT_PRODUCER}, watch.cpu_s)


def consume_phase(bench: Bench) -> PhaseReport:
    """Fill a topic (its own deadline), then time an assign()-ed consumer reading all of it."""
    settings = bench.settings
    count = settings.size_mib * MIB // settings.message_bytes
    deadline = Deadline("consume phase's fill", settings.phase_timeout_s)
    bench.create_topic("bench-consume", deadline)
    bench.say(f"filling bench-consume with {settings.size_mib:,} MiB ...")
    producer = Producer(bench.config(THROUGHPUT_PRODUCER, "filler"))
    fill = bench.produce(producer, "bench-consume", count, deadline, "filler")
    fill_s = fill.elapsed_s

    deadline = Deadline("consume", settings.phase_timeout_s)
    closed_before = bench.client_log.broker_closed_connections()
    consumer = confluent_kafka.Consumer(bench.config(CONSUMER, "consumer"))
    try:
        partitions = [TopicPartition("bench-consume", p) for p in range(settings.partitions)]
        try:
            bounds = {tp.partition: consumer.get_watermark_offsets(tp, timeout=max(0.1, deadline.remaining()))
                      for tp in partitions}
        except KafkaException as exc:
            raise PhaseError(f"ListOffsets for bench-consume failed: {exc.args[0]}") from None
        expected = sum(high - low for low, high in bounds.values())
        if expected != count:
            raise PhaseError(f"bench-consume holds {expected:,} messages, {count:,} were acknowledged")
        received = value_bytes = 0
        progress = lambda: f"{received:,} of {expected:,} messages consumed"  # noqa: E731
        watch = Stopwatch(bench.meter)
        consumer.assign([TopicPartition("bench-consume", p, low) for p, (low, _) in bounds.items()])
        while received < expected:
            deadline.check(progress)
            # consume(n, timeout) waits until n messages are there or the timeout passes: take what is
            # queued without waiting, and wait only for the first message of the next batch.
            batch = consumer.consume(10_000, timeout=0) or consumer.consume(1, timeout=min(0.5, deadline.remaining()))
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise PhaseError(f"the consumer got {error} after {progress()}")
                received += 1
                value_bytes += len(message.value())
        elapsed = watch.stop()
    finally:
        consumer.close()
    closed = bench.client_log.broker_closed_connections() - closed_before
    figure = Figure("consume_throughput", f"(b) consume {settings.size_mib:,} MiB from the beginning, assign()",
                    throughput_mib_s(value_bytes, elapsed), "MiB/s", CONSUME_TARGET_MIB_S)
    return PhaseReport(
        "consume", f"{received:,} msgs in {elapsed:.2f} s after a fill at "
                   f"{throughput_mib_s(count * settings.message_bytes, fill_s):,.1f} MiB/s ({fill_s:.1f} s); "
                   f"brokers closed {closed} consumer connection(s)",
        elapsed, [figure],
        {"messages": received, "value_bytes": value_bytes, "fill_s": round(fill_s, 3),
         "fill_mib_s": round(throughput_mib_s(count * settings.message_bytes, fill_s), 1),
         "fill_cpu_s": fill.cpu_s, "connections_closed_by_brokers": closed, "consumer": CONSUMER}, watch.cpu_s)


@dataclass
class LatencySample:
    """Send -> delivery callback times of one paced run, and librdkafka's own produce() -> ack times."""

    latencies_ms: list[float]
    client_latencies_ms: list[float]
    achieved_rate: float
    watch: Stopwatch

    def librdkafka_percentiles(self) -> dict:
        return {f"p{q}": round(percentile(self.client_latencies_ms, q), 3) for q in (50, 99)} \
            if self.client_latencies_ms else {}


def measure_latency(bench: Bench, topic: str, producer_config: dict, name: str, count: int, rate: int,
                    deadline: Deadline) -> LatencySample:
    """Warm up every partition, then send ``count`` messages at ``rate`` per second and time each ack."""
    producer = Producer(bench.config(producer_config, name))
    payload = bench.payload
    warm_up = Deliveries()
    for partition in range(bench.settings.partitions):  # connections and metadata up before the clock
        for _ in range(10):
            producer.produce(topic, payload, partition=partition, on_delivery=warm_up)
    while warm_up.reported < 10 * bench.settings.partitions:
        producer.flush(min(0.5, deadline.remaining()))
        deadline.check(lambda: "warm-up messages not acknowledged")
    warm_up.raise_if_failed("warm-up")

    latencies_ms: list[float] = []
    client_latencies_ms: list[float] = []
    deliveries = Deliveries()

    def on_delivery(error, message, sent: float) -> None:
        deliveries(error, message)
        if error is None:
            latencies_ms.append((time.perf_counter() - sent) * 1000)
            measured = message.latency()  # librdkafka's own produce() -> ack, without the callback dispatch
            if measured is not None:
                client_latencies_ms.append(measured * 1000)

    interval = 1 / rate
    progress = lambda: f"{deliveries.reported:,} of {count:,} latency messages acknowledged"  # noqa: E731
    watch = Stopwatch(bench.meter)
    started = last_send = watch.started
    for i in range(count):
        due = started + i * interval
        while (wait := due - time.perf_counter()) > 0:
            if wait < 0.001:  # librdkafka counts in whole milliseconds: poll(0) here would spin a core
                time.sleep(wait)
            else:
                producer.poll(wait)  # serves delivery callbacks as acks arrive, so their times are fresh
        last_send = time.perf_counter()
        producer.produce(topic, payload,
                         on_delivery=lambda error, message, sent=last_send: on_delivery(error, message, sent))
        producer.poll(0)
        deadline.check(progress)
    while deliveries.reported < count:
        producer.poll(min(0.1, deadline.remaining()))
        deadline.check(progress)
    watch.stop()
    deliveries.raise_if_failed("latency")
    achieved = (count - 1) / (last_send - started) if count > 1 else float(rate)
    return LatencySample(latencies_ms, client_latencies_ms, achieved, watch)


def latency_phase(bench: Bench) -> PhaseReport:
    settings = bench.settings
    deadline = Deadline("latency", settings.phase_timeout_s)
    bench.create_topic("bench-latency", deadline)
    count = settings.latency_messages
    sample = measure_latency(bench, "bench-latency", LATENCY_PRODUCER, "latency", count, settings.latency_rate,
                             deadline)
    latencies_ms = sample.latencies_ms
    label = f"(c) produce latency at {settings.latency_rate} msg/s, acks=1, linger.ms=0"
    figures = [Figure("produce_latency_p50", f"{label}, p50", percentile(latencies_ms, 50), "ms", None, False),
               Figure("produce_latency_p99", f"{label}, p99", percentile(latencies_ms, 99), "ms", None, False)]
    librdkafka = sample.librdkafka_percentiles()
    return PhaseReport(
        "latency", f"{count:,} msgs sent at {sample.achieved_rate:,.0f} msg/s; max {max(latencies_ms):.1f} ms; "
                   f"librdkafka's own p50/p99 (no callback dispatch) "
                   f"{librdkafka.get('p50', float('nan')):.2f}/{librdkafka.get('p99', float('nan')):.2f} ms",
        sample.watch.elapsed_s, figures,
        {"messages": count, "achieved_rate": round(sample.achieved_rate, 1), "max_ms": round(max(latencies_ms), 3),
         "librdkafka_latency_ms": librdkafka, "producer": LATENCY_PRODUCER}, sample.watch.cpu_s)


PHASES = (("produce", produce_phase), ("consume", consume_phase), ("latency", latency_phase))


def _broker_log_tails(layout: ClusterLayout, spec: ClusterSpec, lines: int = 5) -> str:
    tails = []
    for broker in spec.brokers:
        try:
            text = layout.broker_log(broker.broker_id).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            text = ["(no log)"]
        tails.append(f"broker {broker.broker_id} ({layout.broker_log(broker.broker_id)}):\n  " + "\n  ".join(text))
    return "\n".join(tails)


def say(message: str) -> None:
    """Progress goes to stderr, so stdout holds only the table or the JSON."""
    print(message, file=sys.stderr, flush=True)


def run_phases(phases, target, layout: ClusterLayout, spec: ClusterSpec) -> tuple[list[PhaseReport], str | None]:
    """Each (name, phase) on ``target`` in order; the first PhaseError stops the run and is returned."""
    reports: list[PhaseReport] = []
    for name, phase in phases:
        say(f"phase {name} ...")
        try:
            reports.append(phase(target))
        except PhaseError as exc:
            say(f"the end of each broker's log:\n{_broker_log_tails(layout, spec)}")
            return reports, str(exc)
    return reports, None


def print_report(title: str, setup: dict, phases: list[PhaseReport], error: str | None, *, as_json: bool,
                 strict: bool) -> int:
    """Prints the figures; returns 0, or 1 if a phase could not finish (or, with ``strict``, a target was missed)."""
    if as_json:
        print(json.dumps(report_dict(title, setup, phases, error), indent=2))
    else:
        print(render_table(title, phases, error))
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        return 1
    missed = [f.label for p in phases for f in p.figures if f.passed is False]
    return 1 if strict and missed else 0


def run_client_bench(settings: ClientBenchSettings, *, as_json: bool = False, strict: bool = False) -> int:
    """Returns 0, or 1 if a phase could not finish (or, with ``strict``, a target was missed)."""
    settings.check(shutil.disk_usage(tempfile.gettempdir()).free)
    say(f"starting a {settings.brokers}-broker cluster ({PROFILE} profile) in a temporary directory ...")
    with temporary_cluster(settings.brokers, PROFILE) as (spec, layout):
        title = (f"kafkasim client benchmark: {settings.brokers} brokers ({PROFILE} profile) in {layout.data_dir}, "
                 f"confluent-kafka {CLIENT_VERSION} / librdkafka {LIBRDKAFKA_VERSION}, "
                 f"{os.cpu_count()} CPUs shared by clients and brokers")
        bench = Bench(spec, settings, CpuMeter(spec, layout), ClientLog(), say)
        phases, error = run_phases(PHASES, bench, layout, spec)
    setup = {"brokers": settings.brokers, "profile": PROFILE, "cpus": os.cpu_count(),
             "confluent_kafka": CLIENT_VERSION, "librdkafka": LIBRDKAFKA_VERSION,
             "settings": asdict(settings)}
    return print_report(title, setup, phases, error, as_json=as_json, strict=strict)
