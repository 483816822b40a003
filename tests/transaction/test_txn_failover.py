"""Transactions across broker failures on a real 3-broker cluster, with confluent-kafka's transactional producer
and read_committed consumers (issue 20; test_transactions_cluster.py has the kills of an open transaction's
coordinator and partition leader):

- the coordinator is killed right after the commit was acknowledged (PrepareCommit durable) while a data leader
  is frozen, so markers are still owed: the new coordinator finishes them;
- consume-transform-produce with the consumer's offsets committed in the transaction stays exactly-once across a
  kill -9 of the transaction's coordinator;
- an abort leaves Kafka's .txnindex entry on every replica, read here from the bytes, and it survives a kill -9."""

from __future__ import annotations

import logging
import signal
import struct
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from broker.group.coordinator import partition_for
from cluster.chaos.txn_workload import TxnWorkloadSettings, producer_config
from cluster.disk import broker_log_dir
from cluster.leaders import elect
from tests.client.support import bootstrap, leader_of
from tests.cluster.test_controller import make_topic
from tests.harness import RunningCluster, module_cluster, wait_until
from tests.transaction.test_transactions_cluster import coordinator_of, transactional_producer

pytestmark = [pytest.mark.processes, pytest.mark.slow]

cluster = module_cluster("txn-failover")

TXN_STATE = "__transaction_state"
OFFSETS = "__consumer_offsets"


def txn_producer(cluster: RunningCluster, transactional_id: str) -> Producer:
    return transactional_producer(cluster, transactional_id, **{"transaction.timeout.ms": 60_000})


def coordinated_by_none_of(cluster: RunningCluster, avoid: set[int], *, prefix: str = "txn",
                           internal_topic: str = TXN_STATE) -> str:
    """A fresh transactional id (or, with ``__consumer_offsets``, group id) whose coordinator is not in ``avoid``:
    the coordinator leads the internal topic's partition that the id's hash picks."""
    leaders = {p.partition: p.leader for p in cluster.state([internal_topic]).partitions}
    for _ in range(1000):
        candidate = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if leaders[partition_for(candidate, len(leaders))] not in avoid:
            return candidate
    raise AssertionError(f"no {prefix} id is coordinated outside {avoid}: {internal_topic}'s leaders are {leaders}")


@pytest.fixture(scope="module", autouse=True)
def offsets_topic(cluster: RunningCluster) -> None:
    """``__consumer_offsets`` made while the three brokers are up: a reader here may be the first while two are down,
    and the brokers create it with its three replicas only once three are alive again."""
    probe = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": f"probe-{uuid.uuid4().hex[:6]}"})
    try:
        def replicated() -> bool:
            try:
                probe.committed([TopicPartition(OFFSETS, 0)], timeout=5)
            except KafkaException:
                pass   # the topic is being created or its coordinator is loading: asked again
            partitions = cluster.state([OFFSETS]).partitions
            return bool(partitions) and all(p.leader >= 0 and len(p.isr) == 3 for p in partitions)
        wait_until(replicated, 60, f"{OFFSETS} with three in sync replicas for each partition", interval_s=0.5)
    finally:
        probe.close()


def preferred_leaders(cluster: RunningCluster, topics: list[str]) -> None:
    """Each partition of ``topics`` led by its preferred replica again: the kills of an earlier test leave the
    leaders on the brokers that stayed up, where every coordinator may be the same broker."""
    wait_until(lambda: all(len(p.isr) == len(p.replicas) for p in cluster.state(topics).partitions), 60,
               f"every replica of {topics} in sync")
    for topic in topics:   # what `kafkasim leaders elect --topic T` runs
        assert elect(bootstrap(cluster), topic, None, unclean=False) == 0
    wait_until(lambda: all(p.leader == p.replicas[0] for p in cluster.state(topics).partitions), 60,
               f"{topics} led by their preferred replicas")


def read_committed(cluster: RunningCluster, topic: str, partitions: list[int], *, isolation: str = "read_committed",
                   settle_s: float = 3.0, timeout_s: float = 60) -> dict[int, list[bytes]]:
    """Every value a consumer with ``isolation`` reads from offset 0, read until it has seen each partition's end
    (the LSO for read_committed) and nothing new came for ``settle_s``."""
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 100})
    got: dict[int, list[bytes]] = {p: [] for p in partitions}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + timeout_s
        at_end: set[int] = set()
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                if len(at_end) == len(partitions) and time.monotonic() - quiet_since > settle_s:
                    break
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            quiet_since = time.monotonic()
            got[message.partition()].append(message.value())
    finally:
        consumer.close()
    return got


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def test_markers_owed_when_the_coordinator_dies_are_written_by_the_next_one(cluster):
    topic = "txn-markers-owed"
    make_topic(cluster, topic, 1, 3)
    data_leader = leader_of(cluster, topic, 0)
    warmup = txn_producer(cluster, "txn-warmup-2")
    warmup.begin_transaction()
    warmup.commit_transaction(30)
    transactional_id = coordinated_by_none_of(cluster, {data_leader})
    producer = txn_producer(cluster, transactional_id)
    coordinator = coordinator_of(cluster, transactional_id)
    producer.begin_transaction()
    sent = values("owed", 20)
    for value in sent:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0
    cluster.signal(data_leader, signal.SIGSTOP)  # the marker for this partition cannot be written now
    try:
        producer.commit_transaction(90)  # answered once PrepareCommit is durable
        cluster.kill9(coordinator)
    finally:
        cluster.signal(data_leader, signal.SIGCONT)
    try:
        assert read_committed(cluster, topic, [0], timeout_s=90) == {0: sent}
    finally:
        cluster.start(coordinator)
        wait_until(lambda: all(p.leader >= 0 and len(p.isr) == 3 for p in cluster.state([topic]).partitions),
                   60, f"{topic} to have its replicas back")


def committed_everything(consumer: Consumer, source: str, ends: dict[int, int]) -> bool:
    try:
        committed = consumer.committed([TopicPartition(source, p) for p in ends], timeout=10)
    except KafkaException:
        return False  # the group's coordinator is moving
    return all(tp.offset == ends[tp.partition] for tp in committed)


def transform(cluster: RunningCluster, source: str, sink: str, group: str, transactional_id: str, total: int,
              ends: dict[int, int], kill_after_transactions: int, victims: list[int]) -> int:
    """Consume ``source`` and produce each value as "t:<value>" to ``sink``, committing the consumer's offsets in
    each transaction, until ``total`` inputs are committed; kill -9 ``victims`` after a number of transactions.
    A fatal error (fenced) makes a new producer; an abortable one aborts and rewinds to the committed offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "session.timeout.ms": 10_000})
    consumer.subscribe([source])
    producer = txn_producer(cluster, transactional_id)
    committed_inputs = 0
    transactions = 0
    deadline = time.monotonic() + 240
    try:
        while committed_inputs < total and time.monotonic() < deadline:
            messages = [m for m in consumer.consume(20, timeout=1.0) if m.error() is None]
            if not messages:
                if committed_everything(consumer, source, ends):
                    break  # a commit whose answer was lost still counts: the group's offsets say what is done
                continue
            try:
                producer.begin_transaction()
                for message in messages:
                    producer.produce(sink, value=b"t:" + message.value(), partition=message.partition())
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), 60)
                producer.commit_transaction(90)
            except KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort():
                    producer.abort_transaction(60)
                elif error.fatal():
                    producer = txn_producer(cluster, transactional_id)
                elif not error.retriable():
                    raise
                rewind(consumer)
                continue
            committed_inputs += len(messages)
            transactions += 1
            if transactions == kill_after_transactions:
                for victim in victims:
                    cluster.kill9(victim)
    finally:
        consumer.close()
    return committed_inputs


def rewind(consumer: Consumer) -> None:
    assignment = consumer.assignment()
    for tp in consumer.committed(assignment, timeout=30):
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def test_consume_transform_produce_is_exactly_once_across_a_coordinator_kill9(cluster):
    source, sink = "ctp-in", "ctp-out"
    make_topic(cluster, source, 2, 3)
    make_topic(cluster, sink, 2, 3)
    inputs = {p: values(f"in{p}", 150) for p in (0, 1)}
    feeder = Producer({"bootstrap.servers": bootstrap(cluster), "enable.idempotence": True, "acks": "all"})
    for partition, batch in inputs.items():
        for value in batch:
            feeder.produce(source, value=value, partition=partition)
    assert feeder.flush(30) == 0
    warmup = txn_producer(cluster, "txn-warmup-4")
    warmup.begin_transaction()
    warmup.commit_transaction(30)
    preferred_leaders(cluster, [TXN_STATE, OFFSETS])
    transactional_id = coordinated_by_none_of(cluster, set())
    victim = coordinator_of(cluster, transactional_id)
    # the group's coordinator stays up: librdkafka's send_offsets_to_transaction can outwait its timeout when the
    # group coordinator is the broker that died (confluentinc/librdkafka#5456); the kill is of the transaction's
    group = coordinated_by_none_of(cluster, {victim}, prefix="ctp-group", internal_topic=OFFSETS)
    try:
        transform(cluster, source, sink, group, transactional_id, total=300, ends={0: 150, 1: 150},
                  kill_after_transactions=3, victims=[victim])
        output = read_committed(cluster, sink, [0, 1])
        for partition in (0, 1):
            expected = [b"t:" + v for v in inputs[partition]]
            assert output[partition] == expected, (
                f"partition {partition}: {len(output[partition])} outputs for {len(expected)} inputs, "
                f"missing {sorted(set(expected) - set(output[partition]))[:5]}, duplicated "
                f"{[v for v in set(output[partition]) if output[partition].count(v) > 1][:5]}")
    finally:
        if cluster.pid(victim) is None:
            cluster.start(victim)


def test_a_chaos_transformers_send_offsets_returns_after_its_group_coordinator_dies(cluster):
    """The producer of `kafkasim chaos run --workload txn`'s transformers: its send_offsets_to_transaction returns
    after the group's coordinator died, left the producer's metadata and came back. librdkafka waits for the dead
    coordinator by waiting for some broker connection to change state, and once it has let go of that broker none
    may (confluentinc/librdkafka#5456, #5511): the transformer sat there until the run ended. The workload closes idle
    connections so that one does."""
    topic = "ctp-offsets"
    make_topic(cluster, topic, 1, 3)
    txn_producer(cluster, "txn-warmup-6")   # __transaction_state exists
    preferred_leaders(cluster, [TXN_STATE, OFFSETS])
    group = f"ctp-coordinator-{uuid.uuid4().hex[:8]}"
    group_partition = partition_for(group, len(cluster.state([OFFSETS]).partitions))
    victim = cluster.state([OFFSETS]).partition(OFFSETS, group_partition).leader
    config = producer_config(bootstrap(cluster), coordinated_by_none_of(cluster, {victim}), "transformer-t",
                             TxnWorkloadSettings())
    producer = Producer(config, logger=logging.getLogger("librdkafka"))
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group})
    group_metadata = consumer.consumer_group_metadata()

    def commit(offset: int) -> None:
        producer.begin_transaction()
        producer.produce(topic, value=b"v%d" % offset, partition=0)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], group_metadata, 10)
        producer.commit_transaction(30)

    try:
        producer.init_transactions(30)
        commit(1)   # the producer now knows the victim as the group's coordinator
        cluster.kill9(victim)
        wait_until(lambda: cluster.state([OFFSETS]).partition(OFFSETS, group_partition).leader not in (victim, -1),
                   60, f"a new coordinator of {group}")
        wait_until(lambda: victim not in producer.list_topics(timeout=10).brokers, 30,
                   f"the producer's metadata without broker {victim}")
        cluster.start(victim)
        outcome: list[BaseException | None] = []

        def second_commit() -> None:
            try:
                commit(2)
                outcome.append(None)
            except BaseException as exc:   # handed to the test's thread
                outcome.append(exc)
        caller = threading.Thread(target=second_commit, daemon=True)
        caller.start()
        caller.join(90)   # a hung call cannot be cancelled: the thread is left behind and the test fails
        assert not caller.is_alive(), "send_offsets_to_transaction (timeout 10 s) or the commit still waits after 90 s"
        assert outcome == [None], outcome
        assert [tp.offset for tp in consumer.committed([TopicPartition(topic, 0)], timeout=30)] == [2]
    finally:
        if cluster.pid(victim) is None:
            cluster.start(victim)
        consumer.close()
    wait_until(lambda: all(len(p.isr) == len(p.replicas) for p in cluster.state([OFFSETS, topic]).partitions), 60,
               f"broker {victim} back in sync")


TXN_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset: 34 bytes


def txn_index_entries(cluster: RunningCluster, broker_id: int, topic: str, partition: int) -> list[tuple]:
    """Kafka's .txnindex entries of one replica, parsed here from the bytes (not through kafkasim's reader)."""
    directory = broker_log_dir(cluster.spec, broker_id, cluster.layout) / f"{topic}-{partition}"
    entries = []
    for path in sorted(directory.glob("*.txnindex")):
        data = path.read_bytes()
        assert len(data) % TXN_ENTRY.size == 0, f"{path} is {len(data)} bytes, not whole 34-byte entries"
        entries += [TXN_ENTRY.unpack_from(data, at) for at in range(0, len(data), TXN_ENTRY.size)]
    return entries


def test_an_abort_leaves_kafkas_txnindex_entry_on_every_replica_and_it_survives_a_kill9(cluster):
    topic = "txn-index"
    make_topic(cluster, topic, 1, 3)
    producer = txn_producer(cluster, "txn-index-writer")
    producer.begin_transaction()
    for value in values("gone", 10):
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0
    producer.abort_transaction(30)
    producer.begin_transaction()
    for value in values("kept", 5):
        producer.produce(topic, value=value, partition=0)
    producer.commit_transaction(30)

    def on_every_replica() -> dict[int, list[tuple]] | None:
        found = {b: txn_index_entries(cluster, b, topic, 0) for b in (1, 2, 3)}
        return found if all(found.values()) else None

    entries = wait_until(on_every_replica, 30, "every replica's .txnindex")
    [(version, producer_id, first, last, last_stable)] = entries[1]
    # the ten aborted values at offsets 0-9, their ABORT marker at 10, no other transaction open: LSO = marker + 1
    assert (version, first, last, last_stable) == (0, 0, 10, 11) and producer_id >= 0
    assert entries[2] == entries[3] == entries[1]

    leader = leader_of(cluster, topic, 0)
    cluster.kill9(leader)
    try:
        wait_until(lambda: leader_of(cluster, topic, 0) not in (-1, leader), 30, "a new leader")
        assert read_committed(cluster, topic, [0]) == {0: values("kept", 5)}
    finally:
        cluster.start(leader)
    wait_until(lambda: len(cluster.state([topic]).partition(topic, 0).isr) == 3, 60, "the restarted replica in the ISR")
    assert txn_index_entries(cluster, leader, topic, 0) == entries[1]
