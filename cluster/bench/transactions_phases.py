"""The phases of ``kafkasim bench transactions`` on a running cluster: (a) an idempotent producer, (b) the same
producer with a ``transactional.id``, committing every ``records`` records."""

from __future__ import annotations

import time

from confluent_kafka import KafkaException, Producer

from cluster.bench.client_kit import (
    THROUGHPUT_PRODUCER,
    ClientBench,
    Deadline,
    Deliveries,
    PhaseError,
    Stopwatch,
    run_phases,
)
from cluster.bench.report import Phase
from cluster.bench.transactions import TransactionsBenchSettings, idempotent_phase, transactional_phase
from cluster.bench.transactions_timeline import committed_cycles, timeline_phase
from cluster.processes import ClusterLayout, ClusterSpec
from traces.events import TraceEvent, parse_line
from traces.writer import rotated_files

TRACE_FLUSH_S = 10.0  # the brokers' trace writers write in batches from a thread: their last events may lag

# THROUGHPUT_PRODUCER's batching; idempotence implies acks=all (librdkafka refuses anything else with it)
IDEMPOTENT_PRODUCER = {**THROUGHPUT_PRODUCER, "acks": "all", "enable.idempotence": True}
TRANSACTIONAL_PRODUCER = {**IDEMPOTENT_PRODUCER, "transactional.id": "kafkasim-bench-txn",
                          "transaction.timeout.ms": 60_000}
IDEMPOTENT_TOPIC, TRANSACTIONAL_TOPIC = "bench-idempotent", "bench-transactional"


class TransactionsRun:
    def __init__(self, bench: ClientBench, layout: ClusterLayout, spec: ClusterSpec) -> None:
        self.bench = bench
        self.layout = layout
        self.spec = spec
        self.committed = 0
        self.settings: TransactionsBenchSettings = bench.settings  # type: ignore[assignment]
        self.idempotent_mib_s: float | None = None

    def _ready(self, producer: Producer, topic: str, deadline: Deadline) -> None:
        try:
            producer.list_topics(topic, timeout=max(0.1, deadline.remaining()))  # connected before the clock
        except KafkaException as exc:
            raise PhaseError(f"the producer got no metadata for {topic}: {exc.args[0]}") from None

    def idempotent(self) -> Phase:
        settings = self.settings
        deadline = Deadline("idempotent", settings.phase_timeout_s)
        self.bench.create_topic(IDEMPOTENT_TOPIC, deadline, settings.replication_factor)
        producer = Producer(self.bench.config(IDEMPOTENT_PRODUCER, "idempotent"))
        self._ready(producer, IDEMPOTENT_TOPIC, deadline)
        watch = self.bench.produce(producer, IDEMPOTENT_TOPIC, settings.total_records, deadline, "idempotent")
        phase = idempotent_phase(settings, watch.elapsed_s, {"producer": IDEMPOTENT_PRODUCER}, watch.cpu_s)
        self.idempotent_mib_s = phase.figures[0].value
        return phase

    def transactional(self) -> Phase:
        settings = self.settings
        deadline = Deadline("transactional", settings.phase_timeout_s)
        self.bench.create_topic(TRANSACTIONAL_TOPIC, deadline, settings.replication_factor)
        producer = Producer(self.bench.config(TRANSACTIONAL_PRODUCER, "transactional"))
        self._ready(producer, TRANSACTIONAL_TOPIC, deadline)
        try:
            # InitProducerId with the transactional id: finds the coordinator, which creates __transaction_state
            producer.init_transactions(max(1.0, deadline.remaining()))
        except KafkaException as exc:
            raise PhaseError(f"init_transactions() failed: {exc.args[0]}; is the transaction coordinator "
                             "running on the brokers?") from None
        payload = self.bench.payload
        deliveries = Deliveries()
        commits: list[float] = []
        progress = lambda: f"{len(commits):,} of {settings.transactions:,} transactions committed"  # noqa: E731
        watch = Stopwatch(self.bench.meter)
        try:
            for _ in range(settings.transactions):
                producer.begin_transaction()
                for _ in range(settings.records):
                    while True:
                        try:
                            producer.produce(TRANSACTIONAL_TOPIC, payload, on_delivery=deliveries)
                            break
                        except BufferError:
                            producer.poll(0.005)
                            deadline.check(progress)
                # the records first, so that the commit's time is the EndTxn round trip with its markers
                while producer.flush(min(0.5, deadline.remaining())):
                    deadline.check(progress)
                started = time.perf_counter()
                producer.commit_transaction(max(1.0, deadline.remaining()))
                commits.append(time.perf_counter() - started)
                deadline.check(progress)
        except KafkaException as exc:
            raise PhaseError(f"transaction {len(commits) + 1} failed: {exc.args[0]} ({progress()})") from None
        watch.stop()
        self.committed = len(commits)
        deliveries.raise_if_failed("transactional")
        return transactional_phase(settings, watch.elapsed_s, commits, self.idempotent_mib_s,
                                   {"producer": TRANSACTIONAL_PRODUCER, "delivered": deliveries.delivered},
                                   watch.cpu_s)


    def timeline(self) -> Phase:
        """Where (b)'s time went, step by step, from the coordinator's and the leaders' trace events."""
        deadline = time.monotonic() + TRACE_FLUSH_S
        while True:
            cycles = committed_cycles(self._trace_events(), TRANSACTIONAL_PRODUCER["transactional.id"])
            if len(cycles) >= self.committed - 1 or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if not cycles:
            raise PhaseError("the brokers' traces hold no committed transaction of the transactional phase")
        return timeline_phase(cycles)

    def _trace_events(self) -> list[TraceEvent]:
        events = []
        for broker in self.spec.brokers:
            for path in rotated_files(self.layout.trace_file(broker.broker_id)):
                with path.open("rb") as lines:
                    events += [parse_line(line) for line in lines if b"transaction_state_changed" in line
                               or b"txn_marker_written" in line]
        return events


def run_both(bench: ClientBench, layout: ClusterLayout, spec: ClusterSpec) -> tuple[list[Phase], str | None]:
    phases = [("idempotent", TransactionsRun.idempotent), ("transactional", TransactionsRun.transactional),
              ("timeline", TransactionsRun.timeline)]
    return run_phases(phases, TransactionsRun(bench, layout, spec), layout, spec, bench.say)
