"""The loss test: a confluent-kafka producer sends unique values with acks=all to a replicated topic
(replication factor 3, min.insync.replicas=2, unclean election off) while leaders are killed with -9,
restarted and paused, over and over. Afterwards every acknowledged value is on every replica exactly
once, in one order per partition: no value is stored twice, not even one the producer re-sent after
bumping its epoch (librdkafka does that after an OUT_OF_ORDER_SEQUENCE_NUMBER)."""

import logging
import os
import random
import signal
from collections import Counter
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka.record.memory_records import MemoryRecords

from tests.cluster.test_controller import make_topic
from tests.harness import RunningCluster, wait_until
from traces.history import HistoryWriter

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos, pytest.mark.timeout(900)]

TOPIC = "ledger"
PARTITIONS = 3
ITERATIONS = int(os.environ.get("KAFKASIM_CHAOS_ITERATIONS", "20"))
SETTLE_S = 90
RESUMED_ACKS = 50  # after each round of faults, at least this many new acknowledgements ...
RESUME_S = 60  # ... within this long, once every broker is back


class AckingProducer:
    """Sends "v<n>" values in a background thread; remembers which were acknowledged, and where."""

    def __init__(self, bootstrap: str, history: HistoryWriter) -> None:
        self.history = history  # for `kafkasim traces collect` and `kafkasim analyze` on the run's folder
        config = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 50}
        if client_log := os.environ.get("KAFKASIM_CHAOS_CLIENT_LOG"):
            # librdkafka's own account of sequences, retries and epoch bumps, to explain a duplicate
            logger = logging.getLogger("chaos.librdkafka")
            logger.addHandler(logging.FileHandler(client_log))
            logger.setLevel(logging.DEBUG)
            config |= {"debug": "eos,msg", "logger": logger}
        self.producer = Producer(config)
        self.acked: dict[str, tuple[int, int | None]] = {}
        self.failed: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked[msg.value().decode()] = (msg.partition(), msg.offset())
            self.history.acknowledged(msg.topic(), msg.partition(), msg.offset(), msg.value())
        else:
            self.failed.append(f"{msg.value().decode()}: {err}")

    def _run(self) -> None:
        while not self._stop.is_set():
            value = f"v{self.sent}"
            try:
                self.producer.produce(TOPIC, value=value.encode(), partition=self.sent % PARTITIONS,
                                      on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.005)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        left = self.producer.flush(130)
        assert left == 0, f"{left} values were neither acknowledged nor failed"


def leadership(cluster: RunningCluster, partition: int) -> tuple[int, list[int]]:
    view = next(p for p in cluster.state([TOPIC]).partitions if p.partition == partition)
    return view.leader, view.isr


def kill_leader_and_restart(cluster: RunningCluster, rng: random.Random) -> None:
    partition = rng.randrange(PARTITIONS)
    victim, isr = wait_until(lambda: (view := leadership(cluster, partition))[0] >= 0 and view, 60,
                             f"{TOPIC}-{partition} to have a leader to kill")
    cluster.kill9(victim)

    def failed_over() -> bool:
        leader, isr_now = leadership(cluster, partition)
        # Either a new leader, or none because the victim was the only in-sync replica left (the ISR may have
        # shrunk to it just before the kill, e.g. when another broker's session expired on a loaded machine):
        # with unclean election off the partition stays offline, nothing acknowledged is lost, until it returns.
        return leader not in (victim, -1) or (leader == -1 and isr_now == [victim])

    wait_until(failed_over, 30, f"a new leader of {TOPIC}-{partition} after killing {victim} (ISR was {isr})")
    time.sleep(rng.uniform(0, 1.0))  # random timing: how long the broker stays dead
    cluster.start(victim)


def pause_one(cluster: RunningCluster, rng: random.Random) -> None:
    broker = rng.choice([b.broker_id for b in cluster.spec.brokers])
    cluster.signal(broker, signal.SIGSTOP)
    try:
        time.sleep(rng.uniform(0.2, 3.0))  # around the 2 s session timeout: sometimes it expires
    finally:
        cluster.signal(broker, signal.SIGCONT)


def replica_records(segment_dir: Path) -> list[tuple[str, str]]:
    """(value, where it came from: producer id, epoch and sequence) for every record of a replica."""
    found = []
    for segment in sorted(segment_dir.glob("*.log")):
        records = MemoryRecords(segment.read_bytes())
        while (batch := records.next_batch()) is not None:
            origin = f"pid {batch.producer_id} epoch {batch.producer_epoch} seq {batch.base_sequence}"
            found.extend((record.value.decode(), f"{origin} offset {record.offset}") for record in batch)
    return found


def logs_identical(cluster: RunningCluster) -> bool:
    for partition in range(PARTITIONS):
        contents = {tuple(seg.read_bytes() for seg in sorted(d.glob("*.log")))
                    for d in cluster.data_dir.glob(f"broker-*/logs/{TOPIC}-{partition}")}
        if len(contents) != 1:
            return False
    return True


def test_no_acknowledged_write_is_lost_while_leaders_are_killed_restarted_and_paused(cluster_factory):
    cluster = cluster_factory(3, overrides={"min.insync.replicas": "2", "unclean.leader.election.enable": "false"})
    make_topic(cluster, TOPIC, PARTITIONS, 3)
    seed = int(os.environ.get("KAFKASIM_CHAOS_SEED", time.time_ns() % 100000))
    print(f"chaos seed {seed}, {ITERATIONS} iterations")
    rng = random.Random(seed)
    history = HistoryWriter(cluster.data_dir / "workload-history.jsonl")
    producer = AckingProducer(cluster.spec.bootstrap_servers, history)
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) >= 100, 30, "the producer to get going")
        for iteration in range(ITERATIONS):
            kill_leader_and_restart(cluster, rng)
            kill_leader_and_restart(cluster, rng)
            pause_one(cluster, rng)
            # liveness: with every broker back, writes must be acknowledged again; a cluster that stops taking
            # writes loses nothing, and must fail this test all the same
            before = len(producer.acked)
            wait_until(lambda b=before: len(producer.acked) >= b + RESUMED_ACKS, RESUME_S,
                       f"{RESUMED_ACKS} new acknowledgements after the faults of iteration {iteration} "
                       f"({before} so far, {len(producer.failed)} failed)")
    finally:
        producer.stop()
        history.close()
    assert producer.acked, "nothing was acknowledged"

    wait_until(lambda: all(sorted(p.isr) == sorted(p.replicas) for p in cluster.state([TOPIC]).partitions),
               SETTLE_S, "every replica back in the ISR")
    wait_until(lambda: logs_identical(cluster), SETTLE_S, "every replica's log to be byte-identical")

    for partition in range(PARTITIONS):
        found = [replica_records(d) for d in sorted(cluster.data_dir.glob(f"broker-*/logs/{TOPIC}-{partition}"))]
        replicas = [[value for value, _ in replica] for replica in found]
        assert len(replicas) == 3
        assert all(r == replicas[0] for r in replicas), f"replicas of {TOPIC}-{partition} disagree"
        stored = replicas[0]
        acked_here = {v: offset for v, (p, offset) in producer.acked.items() if p == partition}
        missing = sorted(set(acked_here) - set(stored), key=lambda v: int(v[1:]))
        assert not missing, f"{len(missing)} acknowledged values lost from {TOPIC}-{partition}: {missing[:10]}"
        counts = Counter(stored)
        twice = {v: [where for value, where in found[0] if value == v] for v, n in counts.items() if n > 1}
        assert not twice, f"{TOPIC}-{partition} stored values more than once: {dict(list(twice.items())[:5])}"
        for value, offset in acked_here.items():
            # None: librdkafka reported the write persisted without its offset; it is stored once, checked above
            assert offset is None or stored[offset] == value, (
                f"{value} was acknowledged at offset {offset} but sits elsewhere")
    unknown = sum(1 for _, offset in producer.acked.values() if offset is None)
    print(f"{len(producer.acked)} values acknowledged of {producer.sent} sent ({unknown} without an offset); "
          f"{len(producer.failed)} failed")
