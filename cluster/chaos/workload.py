"""The chaos workload: producers that send unique values and readers that poll, every operation recorded as an
invoke and its completion (Jepsen's history), with confluent-kafka, so what is checked is what an unmodified
client saw.

The last ``compacted`` topics are compacted (cleanup.policy=compact, with settings that make the cleaner run every
few seconds): their sends are keyed, over a small key space, and now and then a tombstone (a null value) deletes a
key, so the checker can hold the cleaner to compaction's promise (docs/compaction.md).

Each client runs in its own thread: librdkafka calls back on the thread that polls it, and a slow or
blocked client (a partitioned leader) must not hold the others up.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from cluster.chaos.history import Operation, PolledRecord, Recorder, TopicPartition, send_completion


# How long a client's goodbye may take. librdkafka's destroy has been seen to wait for ever (rd_kafka_destroy_app
# joining a broker thread that never ends, after a broker was bounced five times in a row); a run needs the brokers'
# logs for its verdict, not the client's goodbye, so a client still closing after this is left behind and named.
CLOSE_TIMEOUT_S = 30.0


def release(name: str, client: Producer | Consumer, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
    """Close a consumer or destroy a producer (its last reference dropped) on a daemon thread, waiting at most
    ``timeout_s``; False when it did not finish. The caller must hold no other reference to ``client``."""
    held = [client]
    del client

    def close() -> None:
        client = held.pop()
        if isinstance(client, Consumer):
            client.close()
        del client   # a producer is destroyed (flushed already) when its last reference goes

    closer = threading.Thread(target=close, name=f"{name}-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    return not closer.is_alive()


# `chaos run` and `campaign` compact the last of the workload's topics (chaos-b) unless told otherwise, so every run
# exercises the log cleaner under faults; chaos-a stays a queue, where every acknowledged value must survive
DEFAULT_COMPACTED_TOPICS = 1


@dataclass(frozen=True)
class WorkloadSettings:
    topics: tuple[str, ...] = ("chaos-a", "chaos-b")
    partitions: int = 3
    producers: int = 2
    readers: int = 1          # assign-mode readers, one per topic each
    group_members: int = 2    # subscribe-mode consumers of one group, on the first topic
    rate: float = 200.0       # sends per second, all producers together
    acks: str = "all"
    idempotent: bool = True
    message_timeout_ms: int = 30000
    # the last N topics are compacted topics; none unless asked for, so a workload of one topic (the txn workload's
    # input, the replication matrix) stays a queue: `kafkasim chaos run` and ChaosSettings ask for
    # DEFAULT_COMPACTED_TOPICS
    compacted: int = 0
    keys: int = 30            # each compacted partition's key space
    tombstone_share: float = 0.1   # of a compacted topic's sends, the share that deletes a key
    # a compacted topic's delete.retention.ms: its tombstones may go this long after a cleaning first sees them
    delete_retention_ms: int = 5000

    @property
    def compacted_topics(self) -> tuple[str, ...]:
        return self.topics[len(self.topics) - self.compacted:] if self.compacted > 0 else ()

    def topic_config(self, topic: str) -> dict[str, str]:
        """Topic configs at creation: a compacted topic's make its cleaner run within a short run (Kafka's defaults,
        a 1 GiB segment and 7 days before a roll, would leave every record in the active segment, never cleaned)."""
        if topic not in self.compacted_topics:
            return {}
        return {"cleanup.policy": "compact",
                "segment.bytes": "16384", "segment.ms": "2000",  # a roll every few seconds: the active segment is
                "min.cleanable.dirty.ratio": "0.01",              # never cleaned, so many inactive ones
                "min.compaction.lag.ms": "0",
                "delete.retention.ms": str(self.delete_retention_ms)}


@dataclass
class WorkloadCounters:
    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    polled: int = 0
    unclosed: list[str] = field(default_factory=list)   # clients whose close did not end in CLOSE_TIMEOUT_S
    ack_latencies_ms: list[tuple[float, float]] = field(default_factory=list)  # (wall ms at ack, latency ms)


# librdkafka's idempotence log ("debug": "eos": epoch bumps, drains, sequence errors) goes to this logger; the run
# writes it to its folder, where it names what made a producer bump its epoch (a re-send, see the checker)
CLIENT_LOGGER = "kafkasim.chaos.librdkafka"


def _error_name(error: KafkaError) -> str:
    return error.name() or str(error.code())


class ChaosProducer:
    """Sends ``<process>-<n>`` values to every partition in turn, at its share of the rate; to a compacted topic
    ``<process>-<n>:<key>`` with that key, or a tombstone of the key (``tombstone_share`` of them)."""

    def __init__(self, process: str, bootstrap: str, settings: WorkloadSettings, recorder: Recorder,
                 counters: WorkloadCounters, stop: threading.Event) -> None:
        self.process = process
        self.settings = settings
        self.recorder = recorder
        self.counters = counters
        self.stop = stop
        self.retries = True  # librdkafka retries unless told otherwise; only rejections without retries are fails
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": settings.acks, "enable.idempotence": settings.idempotent,
            "linger.ms": 5, "message.timeout.ms": settings.message_timeout_ms, "retry.backoff.ms": 100,
            "socket.timeout.ms": 10000, "client.id": process, "debug": "eos"},
            logger=logging.getLogger(CLIENT_LOGGER))
        self.thread = threading.Thread(target=self._run, name=process, daemon=True)
        self._lock = threading.Lock()
        self._random = random.Random(process)   # the keys and tombstones of a process: the same in every run

    def _on_delivery(self, invoke: Operation, sent_ns: int, error: KafkaError | None, message) -> None:
        if error is None:
            offset = message.offset()
            self.recorder.complete(invoke, "ok", partition=message.partition(),
                                   offset=offset if offset is not None and offset >= 0 else None)
            with self._lock:
                self.counters.acknowledged += 1
                self.counters.ack_latencies_ms.append((time.time() * 1000, (time.monotonic_ns() - sent_ns) / 1e6))
        else:
            name = _error_name(error)
            self.recorder.complete(invoke, send_completion(name, self.retries), error=name)
            with self._lock:
                self.counters.failed += 1

    def _run(self) -> None:
        interval = self.settings.producers / self.settings.rate
        targets = [(topic, p) for p in range(self.settings.partitions) for topic in self.settings.topics]
        compacted = set(self.settings.compacted_topics)
        n = 0
        next_at = time.monotonic()
        while not self.stop.is_set():
            topic, partition = targets[n % len(targets)]
            value: str | None = f"{self.process}-{n}"
            key = None
            if topic in compacted:
                key = f"key-{self._random.randrange(self.settings.keys):02d}"
                value = None if self._random.random() < self.settings.tombstone_share else f"{value}:{key}"
            invoke = self.recorder.invoke(self.process, "send", topic=topic, partition=partition, value=value, key=key)
            sent_ns = time.monotonic_ns()
            try:
                self.producer.produce(topic, value=None if value is None else value.encode(),
                                      key=None if key is None else key.encode(), partition=partition,
                                      on_delivery=lambda err, msg, i=invoke, s=sent_ns: self._on_delivery(i, s, err,
                                                                                                             msg))
                self.counters.sent += 1
            except BufferError:
                self.recorder.complete(invoke, "fail", error="_QUEUE_FULL")
            except Exception as exc:
                self.recorder.complete(invoke, "fail", error=type(exc).__name__)
            n += 1
            next_at += interval
            self.producer.poll(max(0.0, next_at - time.monotonic()))

    def start(self) -> None:
        self.thread.start()

    def finish(self, timeout_s: float) -> int:
        """Stop sending and wait for outstanding deliveries; returns how many are still unknown (left ``info``:
        the checker treats an invoke without completion as indeterminate)."""
        self.stop.set()
        self.thread.join(10)
        unknown = self.producer.flush(timeout_s)
        # Destroyed now, not when collected: librdkafka would keep reconnecting to brokers whose addresses
        # (a --netns cluster's) stop existing at `down`, and those connections would leave the machine.
        producer, self.producer = self.producer, None
        if not release(self.process, producer):
            self.counters.unclosed.append(self.process)
        return unknown


class ChaosReader:
    """Polls from offset 0 of every partition it reads, recording every non-empty poll with its records.

    ``group`` None: assign mode, one assign at start. Otherwise a member of that group; every new assignment
    is recorded as an assign, since the consumer may restart from a committed offset behind what it read."""

    def __init__(self, process: str, bootstrap: str, topics: Sequence[str], partitions: int, recorder: Recorder,
                 counters: WorkloadCounters, stop: threading.Event, group: str | None = None) -> None:
        self.process = process
        self.topics = list(topics)
        self.partitions = partitions
        self.recorder = recorder
        self.counters = counters
        self.stop = stop
        self.group = group
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group or f"kafkasim-chaos-{process}",
            "enable.auto.commit": group is not None, "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "client.id": process, "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000})
        self.thread = threading.Thread(target=self._run, name=process, daemon=True)

    def _record_assign(self, partitions: list) -> None:
        invoke = self.recorder.invoke(self.process, "assign", partitions=tuple(
            TopicPartition(topic=p.topic, partition=p.partition) for p in partitions))
        self.recorder.complete(invoke, "ok", partitions=invoke.partitions)

    def _run(self) -> None:
        if self.group is None:
            assignment = [KafkaTopicPartition(t, p, 0) for t in self.topics for p in range(self.partitions)]
            self._record_assign(assignment)
            self.consumer.assign(assignment)
        else:
            invoke = self.recorder.invoke(self.process, "subscribe", topics=tuple(self.topics))
            self.consumer.subscribe(self.topics, on_assign=lambda _c, parts: self._record_assign(parts))
            self.recorder.complete(invoke, "ok", topics=tuple(self.topics))
        while not self.stop.is_set():
            messages = self.consumer.consume(num_messages=200, timeout=0.2)
            records = tuple(PolledRecord(topic=m.topic(), partition=m.partition(), offset=m.offset(),
                                         value=None if m.value() is None else m.value().decode("utf-8", "replace"))
                            for m in messages if m.error() is None)
            if records:
                invoke = self.recorder.invoke(self.process, "poll")
                self.recorder.complete(invoke, "ok", records=records)
                self.counters.polled += len(records)

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)
        consumer, self.consumer = self.consumer, None
        if not release(self.process, consumer):
            self.counters.unclosed.append(self.process)


class Workload:
    def __init__(self, bootstrap: str, settings: WorkloadSettings, recorder: Recorder) -> None:
        self.settings = settings
        self.counters = WorkloadCounters()
        self._producers_stop = threading.Event()
        self._readers_stop = threading.Event()
        self.producers = [ChaosProducer(f"producer-{i}", bootstrap, settings, recorder, self.counters,
                                        self._producers_stop) for i in range(settings.producers)]
        self.readers = [ChaosReader(f"reader-{topic}-{i}", bootstrap, [topic], settings.partitions, recorder,
                                    self.counters, self._readers_stop)
                        for topic in settings.topics for i in range(settings.readers)]
        self.readers += [ChaosReader(f"member-{i}", bootstrap, settings.topics[:1], settings.partitions, recorder,
                                     self.counters, self._readers_stop, group="kafkasim-chaos-group")
                         for i in range(settings.group_members)]

    def start(self) -> None:
        for client in [*self.readers, *self.producers]:
            client.start()

    def stop_producers(self, timeout_s: float) -> int:
        self._producers_stop.set()
        return sum(producer.finish(timeout_s) for producer in self.producers)

    def stop_readers(self) -> None:
        for reader in self.readers:
            reader.finish()
