"""The txn workload of `kafkasim chaos run --workload txn`: consume-transform-produce with exactly-once, as Kafka's
transactions system test runs its TransactionalMessageCopier, with unmodified confluent-kafka clients.

An idempotent producer fills the input topic with unique values (recorded as sends). Each transformer is a
read_committed group member without auto-commit plus a transactional producer of its own ``transactional.id``; it
loops: consume a batch, begin a transaction, produce ``t:<input>@<transformer>.<n>`` for each input record to the
same partition number of the output topic, send the consumer's positions to the transaction with the group's
metadata, commit. A fenced or fatal producer is recreated (init_transactions fences the old one); an abortable
error aborts and rewinds the consumer to the group's committed offsets. Every transaction is recorded as one ``txn``
operation: ok committed, fail aborted, info unknown (see history.Operation). A share of transactions is aborted on
purpose (the copier's --enable-random-aborts), so that read_committed has something to hide in every run.

After the faults the runner drains (waits until the group's committed offsets reach the end of the input), stops
the transformers, and reads the output back with read_committed and read_uncommitted consumers.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from cluster.chaos.history import GroupOffset, IsolatedRead, Operation, PolledRecord, Recorder
from cluster.chaos.workload import CLIENT_LOGGER, ChaosProducer, WorkloadCounters, WorkloadSettings, release

RANDOM_ABORT = "RANDOM_ABORT"   # the error of a transaction the transformer aborted on purpose
# librdkafka's calls that wait on the coordinator; a fault may hold one up for a session timeout or two
TXN_CALL_TIMEOUT_S = 30.0
# send_offsets_to_transaction waits for the group coordinator it has cached, if that one is down, until some broker
# connection goes up or down, whatever its timeout (confluentinc/librdkafka#5456); once the dead coordinator has left
# the metadata, none may ever do so (#5511). Connections closed when idle make such changes happen.
IDLE_CONNECTION_CLOSE_MS = 3000


@dataclass(frozen=True)
class TxnWorkloadSettings:
    input_topic: str = "chaos-txn-input"
    output_topic: str = "chaos-txn-output"
    partitions: int = 3
    producers: int = 1
    transformers: int = 2
    transaction_size: int = 20        # input records per transaction at most (the copier's --transaction-size)
    rate: float = 200.0               # input sends per second, all producers together
    abort_share: float = 0.1          # transactions aborted on purpose
    transaction_timeout_ms: int = 20000   # the coordinator aborts a transaction a dead transformer left open
    message_timeout_ms: int = 30000
    group: str = "kafkasim-chaos-txn"
    session_timeout_ms: int = 10000   # the transformers' consumers' session.timeout.ms
    drain_s: float = 90.0             # how long the transformers may take to catch up once the input stops

    @property
    def topics(self) -> tuple[str, ...]:
        """Every topic of the run (created, settled and read back by the runner)."""
        return (self.input_topic, self.output_topic)

    def input_settings(self) -> WorkloadSettings:
        return WorkloadSettings(topics=(self.input_topic,), partitions=self.partitions, producers=self.producers,
                                readers=0, group_members=0, rate=self.rate, acks="all", idempotent=True,
                                message_timeout_ms=self.message_timeout_ms)


def producer_config(bootstrap: str, transactional_id: str, client_id: str, settings: TxnWorkloadSettings) -> dict:
    """A transformer's transactional producer."""
    return {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "client.id": client_id,
            "transaction.timeout.ms": settings.transaction_timeout_ms,
            "message.timeout.ms": min(settings.message_timeout_ms, settings.transaction_timeout_ms),
            "linger.ms": 5, "socket.timeout.ms": 10000, "retry.backoff.ms": 100, "debug": "eos",
            "connections.max.idle.ms": IDLE_CONNECTION_CLOSE_MS}


def _error(exc: BaseException) -> KafkaError | None:
    return exc.args[0] if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError) \
        else None


def _name(exc: BaseException) -> str:
    error = _error(exc)
    return (error.name() or str(error.code())) if error is not None else type(exc).__name__


class Transformer:
    """One consume-transform-produce loop on its own thread (librdkafka calls back on the polling thread)."""

    def __init__(self, process: str, bootstrap: str, settings: TxnWorkloadSettings, recorder: Recorder,
                 counters: WorkloadCounters, stop: threading.Event) -> None:
        self.process = process
        self.bootstrap = bootstrap
        self.settings = settings
        self.recorder = recorder
        self.counters = counters
        self.stop = stop
        self.transactional_id = f"kafkasim-chaos-{process}"
        self.random = random.Random(process)   # which transactions abort on purpose: the same in every run
        self.transactions = 0
        self.recreated = 0
        self.outcomes = {"ok": 0, "fail": 0, "info": 0}
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None
        self.thread = threading.Thread(target=self._run, name=process, daemon=True)

    def _new_consumer(self) -> Consumer:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.settings.group, "client.id": self.process,
            "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "session.timeout.ms": self.settings.session_timeout_ms,
            "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 120000})
        consumer.subscribe([self.settings.input_topic])
        return consumer

    def _new_producer(self) -> Producer | None:
        """A producer whose init_transactions went through (fencing any earlier one of this transactional id), or
        None when the stop came first. Retriable failures (a coordinator away) are retried on the same producer, a
        fatal one on a new producer after a pause."""
        while not self.stop.is_set():
            producer = Producer(producer_config(self.bootstrap, self.transactional_id, self.process, self.settings),
                                logger=logging.getLogger(CLIENT_LOGGER))
            while not self.stop.is_set():
                try:
                    producer.init_transactions(TXN_CALL_TIMEOUT_S)
                    return producer
                except KafkaException as exc:
                    error = _error(exc)
                    if error is None or error.fatal() or not error.retriable():
                        break
            self._drop(producer)
            self.stop.wait(1.0)
        return None

    def _drop(self, client: Producer | Consumer | None) -> None:
        if client is not None and not release(self.process, client):
            self.counters.unclosed.append(self.process)

    def _run(self) -> None:
        self.consumer = self._new_consumer()
        while not self.stop.is_set():
            if self.producer is None:
                self.producer = self._new_producer()
                if self.producer is None:
                    break
            messages = self.consumer.consume(num_messages=self.settings.transaction_size, timeout=0.5)
            records = tuple(PolledRecord(topic=m.topic(), partition=m.partition(), offset=m.offset(),
                                         value=None if m.value() is None else m.value().decode("utf-8", "replace"))
                            for m in messages if m.error() is None)
            if records:
                self._transaction(records)
        producer, self.producer = self.producer, None
        self._drop(producer)
        consumer, self.consumer = self.consumer, None
        self._drop(consumer)

    def _transaction(self, records: tuple[PolledRecord, ...]) -> None:
        assert self.producer is not None and self.consumer is not None
        self.transactions += 1
        values = tuple(f"t:{r.value}@{self.process}.{self.transactions}" for r in records)
        invoke = self.recorder.invoke(self.process, "txn", topic=self.settings.output_topic, records=records,
                                      values=values)
        committing = False
        # the coordinator aborts the transaction once transaction.timeout.ms has passed since it began
        expires = time.monotonic() + self.settings.transaction_timeout_ms / 1000
        try:
            self.producer.begin_transaction()
            for record, value in zip(records, values, strict=True):
                self.producer.produce(self.settings.output_topic, value=value.encode(), partition=record.partition)
            positions = [tp for tp in self.consumer.position(self.consumer.assignment()) if tp.offset >= 0]
            self.producer.send_offsets_to_transaction(positions, self.consumer.consumer_group_metadata(),
                                                      TXN_CALL_TIMEOUT_S)
            if self.random.random() < self.settings.abort_share:
                self.producer.abort_transaction(TXN_CALL_TIMEOUT_S)
                self._complete(invoke, "fail", RANDOM_ABORT)
                self._rewind()
                return
            committing = True
            self._commit(expires)
            self._complete(invoke, "ok")
        except (KafkaException, BufferError) as exc:
            self._failed(invoke, exc, committing)

    def _commit(self, expires: float) -> None:
        """commit_transaction, again after a retriable error (librdkafka's documented way: the commit may be
        retried until it succeeds or says otherwise), until the transaction's timeout: past it the coordinator has
        aborted the transaction, and a flush that waits on undelivered records would only hold the transformer
        (and its partitions) longer. librdkafka has been seen to keep records of a transaction undelivered through
        every retry after a kill of their partition's leader."""
        assert self.producer is not None
        while True:
            try:
                self.producer.commit_transaction(max(1.0, min(TXN_CALL_TIMEOUT_S, expires - time.monotonic())))
                return
            except KafkaException as exc:
                error = _error(exc)
                if error is None or not error.retriable() or error.txn_requires_abort() or error.fatal() \
                        or self.stop.is_set() or time.monotonic() >= expires:
                    raise
            self.stop.wait(0.1)   # an error answered at once is not asked again in a tight loop

    def _failed(self, invoke: Operation, exc: BaseException, committing: bool) -> None:
        """An abort the coordinator accepted makes the transaction a fail. Without one it is a fail too as long as
        the commit was never asked for (it cannot commit then), else unknown: a commit whose answer was lost may
        have been made durable (PrepareCommit) and be completed by the coordinator."""
        error = _error(exc)
        aborted = False
        if error is None or not error.fatal():
            try:
                self.producer.abort_transaction(TXN_CALL_TIMEOUT_S)   # type: ignore[union-attr]
                aborted = True
            except KafkaException:
                pass
        if not aborted:
            # fenced, fatal, or a transaction this producer cannot end: a new producer's init_transactions fences
            # this one, and the coordinator aborts (or completes the commit of) what it left
            producer, self.producer = self.producer, None
            self._drop(producer)
            self.recreated += 1
        self._complete(invoke, "info" if committing and not aborted else "fail", _name(exc))
        self._rewind()

    def _complete(self, invoke: Operation, outcome: str, error: str | None = None) -> None:
        self.outcomes[outcome] += 1
        if outcome == "ok":
            self.recorder.complete(invoke, "ok")
        else:
            self.recorder.complete(invoke, outcome, error=error)  # type: ignore[arg-type]

    def _rewind(self) -> None:
        """Back to the group's committed offsets, so the records of a transaction that did not commit are consumed
        again; a consumer that cannot seek (an assignment changing under it) is replaced, which rejoins the group
        from the committed offsets too. The offsets the coordinator answered are recorded (a ``rewind``): the
        checker compares them with what committed transactions had already committed."""
        assert self.consumer is not None
        invoke, answered = None, False
        try:
            assignment = self.consumer.assignment()
            if assignment:
                invoke = self.recorder.invoke(self.process, "rewind")
                committed = self.consumer.committed(assignment, timeout=TXN_CALL_TIMEOUT_S)
                answered = True
                self.recorder.complete(invoke, "ok", offsets=tuple(
                    GroupOffset(group=self.settings.group, topic=tp.topic, partition=tp.partition,
                                offset=tp.offset if tp.offset >= 0 else -1) for tp in committed))
                for tp in committed:
                    self.consumer.seek(KafkaTopicPartition(tp.topic, tp.partition,
                                                           tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        except KafkaException as exc:
            if invoke is not None and not answered:
                self.recorder.complete(invoke, "fail", error=_name(exc))
            consumer, self.consumer = self.consumer, None
            self._drop(consumer)
            self.consumer = self._new_consumer()

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(TXN_CALL_TIMEOUT_S * 3)
        if self.thread.is_alive():
            self.counters.unclosed.append(self.process)


class TxnWorkload:
    """The same face as workload.Workload for the runner: start, stop_producers, stop_readers (here: drain, then
    stop the transformers), counters; and read_back for the final reads."""

    def __init__(self, bootstrap: str, settings: TxnWorkloadSettings, recorder: Recorder) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self.counters = WorkloadCounters()
        self._producers_stop = threading.Event()
        self._transformers_stop = threading.Event()
        self.producers = [ChaosProducer(f"producer-{i}", bootstrap, settings.input_settings(), recorder,
                                        self.counters, self._producers_stop) for i in range(settings.producers)]
        self.transformers = [Transformer(f"transformer-{i}", bootstrap, settings, recorder, self.counters,
                                         self._transformers_stop) for i in range(settings.transformers)]
        self.drained: bool | None = None
        self._offsets: Offsets | None = None
        # the output's last stable offsets reached its high watermarks before the read-back (None: not asked yet);
        # False: a transaction stayed open, and read_committed's read ends at it
        self.stable: bool | None = None

    def outcomes(self) -> str:
        """For the run's progress line: the transactions' outcomes and the producers recreated."""
        total = {k: sum(t.outcomes[k] for t in self.transformers) for k in ("ok", "fail", "info")}
        return (f"{total['ok']} transactions committed, {total['fail']} aborted, {total['info']} unknown; "
                f"{sum(t.recreated for t in self.transformers)} transactional producers recreated")

    def start(self) -> None:
        for client in [*self.transformers, *self.producers]:
            client.start()

    def stop_producers(self, timeout_s: float) -> int:
        self._producers_stop.set()
        return sum(producer.finish(timeout_s) for producer in self.producers)

    def stop_readers(self) -> None:
        """Lets the transformers catch up with the whole input (the group's committed offsets at its end), at most
        ``drain_s``, then stops them: what they did not get to is reported as unprocessed, not lost."""
        self._offsets = self._offsets or Offsets(self.bootstrap, self.settings)
        self.drained = _wait(self._offsets.caught_up, time.monotonic() + self.settings.drain_s)
        self.stop_transformers()

    def stop_transformers(self) -> None:
        self._transformers_stop.set()
        for transformer in self.transformers:
            transformer.finish()

    def read_back(self, timeout_s: float = 120.0) -> tuple[tuple[IsolatedRead, ...], tuple[GroupOffset, ...]]:
        """The output topic from offset 0, read_uncommitted and then read_committed (once no transaction is open
        on it, so that read_committed's end is the log's end), and the group's committed offsets."""
        deadline = time.monotonic() + timeout_s
        offsets, self._offsets = self._offsets or Offsets(self.bootstrap, self.settings), None
        try:
            self.stable = _wait(offsets.no_open_transactions, deadline)
            reads = tuple(read for level in ("read_uncommitted", "read_committed")
                          for read in read_output(self.bootstrap, self.settings, level, deadline))
            return reads, tuple(offsets.group_offsets())
        finally:
            offsets.close()


def _wait(condition: Callable[[], bool], deadline: float) -> bool:
    """Polls ``condition`` until it holds or ``deadline`` (monotonic); a condition that raises (the cluster still
    coming back) is asked again."""
    while True:
        try:
            if condition():
                return True
        except (KafkaException, TimeoutError):
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


T = TypeVar("T")


class Offsets:
    """The offsets the drain and the read-back wait on, through one admin client and one consumer of the group
    (which never joins it) for the whole end of the run."""

    def __init__(self, bootstrap: str, settings: TxnWorkloadSettings) -> None:
        self.settings = settings
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
        # asked as a read_committed member asks, so a transaction's pending offsets are waited for (KIP-447)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": settings.group,
                                  "enable.auto.commit": False, "isolation.level": "read_committed"})

    @classmethod
    def ask_fresh(cls, bootstrap: str, settings: TxnWorkloadSettings, ask: Callable[[Offsets], T]) -> tuple[T] | None:
        """``ask`` of a fresh Offsets (a new consumer, so a new FindCoordinator), once: ``(answer,)``, or None when
        it failed. Right after a coordinator moves, the old one answers NOT_COORDINATOR once, which librdkafka's
        committed() does not retry; the caller asks again."""
        offsets = cls(bootstrap, settings)
        try:
            return (ask(offsets),)
        except (KafkaException, TimeoutError):
            return None
        finally:
            offsets.close()

    def latest(self, topic: str, level: IsolationLevel) -> dict[tuple[str, int], int]:
        futures = self.admin.list_offsets({KafkaTopicPartition(topic, p): OffsetSpec.latest()
                                           for p in range(self.settings.partitions)},
                                          isolation_level=level, request_timeout=10)
        return {(tp.topic, tp.partition): future.result(15).offset for tp, future in futures.items()}

    def caught_up(self) -> bool:
        """The group's committed offsets at the input's end, every partition."""
        committed = {(g.topic, g.partition): g.offset for g in self.group_offsets()}
        return all(committed.get(tp, -1) >= end
                   for tp, end in self.latest(self.settings.input_topic, IsolationLevel.READ_UNCOMMITTED).items()
                   if end > 0)

    def no_open_transactions(self) -> bool:
        """Every output partition's last stable offset at its high watermark."""
        topic = self.settings.output_topic
        return self.latest(topic, IsolationLevel.READ_COMMITTED) == self.latest(topic, IsolationLevel.READ_UNCOMMITTED)

    def group_offsets(self) -> list[GroupOffset]:
        wanted = [KafkaTopicPartition(self.settings.input_topic, p) for p in range(self.settings.partitions)]
        return [GroupOffset(group=self.settings.group, topic=tp.topic, partition=tp.partition,
                            offset=tp.offset if tp.offset >= 0 else -1)
                for tp in self.consumer.committed(wanted, timeout=15)]

    def close(self) -> None:
        release("offsets", self.consumer)
        del self.admin


def read_output(bootstrap: str, settings: TxnWorkloadSettings, level: str, deadline: float) -> list[IsolatedRead]:
    """Every output partition from offset 0 to its end at ``level``, by a consumer of no group (assign mode). The
    end is librdkafka's partition EOF: the fetch position at the high watermark (read_uncommitted) or the last
    stable offset (read_committed), past markers and aborted batches."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kafkasim-chaos-read-back-{level}",
                         "enable.auto.commit": False, "isolation.level": level, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 100})
    records: dict[int, list[tuple[int, str | None]]] = {p: [] for p in range(settings.partitions)}
    at_end: set[int] = set()
    try:
        consumer.assign([KafkaTopicPartition(settings.output_topic, p, 0) for p in range(settings.partitions)])
        while len(at_end) < settings.partitions and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition())
                    continue
                value = message.value()
                records[message.partition()].append(
                    (message.offset(), None if value is None else value.decode("utf-8", "replace")))
    finally:
        release(f"read-back-{level}", consumer)
    if len(at_end) < settings.partitions:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                        f"the {level} read of {settings.output_topic} did not reach the end of "
                                        f"partitions {sorted(set(records) - at_end)} in time"))
    return [IsolatedRead(isolation_level=level, topic=settings.output_topic, partition=p,  # type: ignore[arg-type]
                         records=tuple(rs)) for p, rs in sorted(records.items())]
