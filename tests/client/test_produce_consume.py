"""Producing and consuming with unmodified clients: every value comes back once, in order, at the offsets
the producer was told, whatever the acks, the idempotence or the compression codec."""

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.codec import has_lz4, has_snappy, has_zstd

from tests.client.support import (
    bootstrap,
    confluent_consume,
    create_topic,
    fetch_batches,
    kafka_python_consume,
    retrying,
)

pytestmark = [pytest.mark.processes, pytest.mark.slow]

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # the batch attribute of each codec
# kafka-python compresses with optional libraries; without them its producer and consumer refuse the codec.
KAFKA_PYTHON_CODEC_PACKAGE = {"snappy": ("python-snappy", has_snappy), "lz4": ("lz4", has_lz4),
                              "zstd": ("zstandard", has_zstd)}


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


def produce_confluent(cluster, topic: str, values_by_partition: dict[int, list[bytes]], **config) -> list:
    """Produce with confluent-kafka; returns the delivery reports (error, partition, offset) in callback order."""
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "linger.ms": 5, **config})
    reports = []
    for partition, values in values_by_partition.items():
        for value in values:
            producer.produce(topic, value=value, partition=partition,
                             on_delivery=lambda err, msg: reports.append((err, msg.partition(), msg.offset())))
    assert producer.flush(30) == 0, "messages still queued after 30 s"
    assert len(reports) == sum(map(len, values_by_partition.values()))
    assert [r for r in reports if r[0] is not None] == []
    return reports


def require_kafka_python_codec(codec: str) -> None:
    if codec in KAFKA_PYTHON_CODEC_PACKAGE:
        package, available = KAFKA_PYTHON_CODEC_PACKAGE[codec]
        if not available():
            pytest.fail(f"kafka-python needs the pip package {package} for {codec}: add it to the dev extra")


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_every_value_comes_back_in_order_per_partition_whatever_the_acks(cluster, acks):
    topic = f"acks-{acks}"
    create_topic(cluster, topic, 3)
    sent = {p: [f"{acks}/{p}/{i}".encode() for i in range(40)] for p in range(3)}
    reports = produce_confluent(cluster, topic, sent, acks=acks)
    if acks != "0":  # with acks=0 the producer is never told an offset
        for p in range(3):
            assert [offset for _, partition, offset in reports if partition == p] == list(range(40))
    got = confluent_consume(cluster, topic, [0, 1, 2], 120)
    for p in range(3):
        assert [value for _, value in got[p]] == sent[p]
        assert [offset for offset, _ in got[p]] == list(range(40))


def test_delivery_reports_carry_consecutive_offsets_across_many_batches(cluster):
    create_topic(cluster, "consecutive", 1)
    # small batches: the offsets must continue from one batch to the next
    reports = produce_confluent(cluster, "consecutive", {0: [b"x%d" % i for i in range(300)]}, acks="all",
                                **{"batch.num.messages": 7, "linger.ms": 0})
    assert [offset for _, _, offset in reports] == list(range(300))
    assert len(fetch_batches(cluster, "consecutive")) > 1


def test_kafka_python_producer_with_its_defaults_is_idempotent_and_every_value_arrives(cluster):
    create_topic(cluster, "kp-default", 2)
    producer = KafkaProducer(bootstrap_servers=bootstrap(cluster).split(","), request_timeout_ms=20000)
    try:
        futures = [producer.send("kp-default", value=b"kp%d" % i, partition=i % 2) for i in range(100)]
        producer.flush(30)
        offsets = [future.get(timeout=10).offset for future in futures]
    finally:
        producer.close(10)
    assert offsets[0::2] == list(range(50)) and offsets[1::2] == list(range(50))
    got = kafka_python_consume(cluster, "kp-default", [0, 1], 100)
    assert [v for _, v in got[0]] == [b"kp%d" % i for i in range(0, 100, 2)]
    assert [v for _, v in got[1]] == [b"kp%d" % i for i in range(1, 100, 2)]
    # acks=all and idempotence by default: every batch carries the producer id the broker handed out
    for partition in (0, 1):
        batches = fetch_batches(cluster, "kp-default", partition)
        assert {(b.producer_id >= 0, b.producer_epoch) for b in batches} == {(True, 0)}
        assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]


def test_confluent_idempotent_producer_gets_a_producer_id_and_every_value_arrives_exactly_once(cluster):
    create_topic(cluster, "idempotent", 3)
    sent = {p: [f"i/{p}/{i}".encode() for i in range(200)] for p in range(3)}
    reports = produce_confluent(cluster, "idempotent", sent, **{"enable.idempotence": True, "linger.ms": 2,
                                                               "batch.num.messages": 25})
    for p in range(3):
        assert sorted(offset for _, partition, offset in reports if partition == p) == list(range(200))
    got = confluent_consume(cluster, "idempotent", [0, 1, 2], 600)
    for p in range(3):
        assert [value for _, value in got[p]] == sent[p]
    producer_ids = set()
    for p in range(3):
        batches = fetch_batches(cluster, "idempotent", p)
        producer_ids |= {(b.producer_id, b.producer_epoch) for b in batches}
        # the sequence of each batch is the offset of its first record: nothing was written twice or skipped
        assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]
    (producer_id, epoch), = producer_ids
    assert producer_id >= 0 and epoch == 0


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_writes_a_codec_and_kafka_python_reads_it(cluster, codec):
    require_kafka_python_codec(codec)
    topic = f"ck-to-kp-{codec}"
    create_topic(cluster, topic, 1)
    values = [f"{codec} value {i} ".encode() * 20 for i in range(60)]
    produce_confluent(cluster, topic, {0: values}, **{"compression.type": codec, "linger.ms": 50})
    assert {b.compression_type for b in fetch_batches(cluster, topic)} == {CODECS[codec]}
    got = kafka_python_consume(cluster, topic, [0], 60)
    assert got[0] == list(enumerate(values))


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_writes_a_codec_and_confluent_kafka_reads_it(cluster, codec):
    require_kafka_python_codec(codec)
    topic = f"kp-to-ck-{codec}"
    create_topic(cluster, topic, 1)
    values = [f"{codec} value {i} ".encode() * 20 for i in range(60)]
    producer = KafkaProducer(bootstrap_servers=bootstrap(cluster).split(","), compression_type=codec, linger_ms=50,
                             request_timeout_ms=20000)
    try:
        futures = [producer.send(topic, value=v, partition=0) for v in values]
        producer.flush(30)
        assert [f.get(timeout=10).offset for f in futures] == list(range(60))
    finally:
        producer.close(10)
    assert {b.compression_type for b in fetch_batches(cluster, topic)} == {CODECS[codec]}
    got = confluent_consume(cluster, topic, [0], 60)
    assert got[0] == list(enumerate(values))


def test_list_offsets_gives_watermarks_and_the_first_offset_at_or_after_a_timestamp(cluster):
    create_topic(cluster, "timed", 1)
    # recent timestamps: time-based retention (7 days) must not delete the segment under the test
    base = (int(time.time()) - 3600) * 1000
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "linger.ms": 0, "acks": "all"})
    for i in range(10):
        producer.produce("timed", value=b"t%d" % i, partition=0, timestamp=base + i * 1000)
        producer.flush(30)  # one batch per record: a lookup by time has to look inside the log's time index
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "client-tests",
                         "enable.auto.commit": False})
    try:
        watermarks = retrying(lambda: consumer.get_watermark_offsets(TopicPartition("timed", 0), timeout=15),
                              "the watermarks")
        # one lookup per call: librdkafka keeps only the last of several asks for the same partition
        found = {ts: retrying(lambda ts=ts: consumer.offsets_for_times([TopicPartition("timed", 0, ts)],
                                                                       timeout=15)[0], f"the offset for {ts}")
                 for ts in (base - 5000, base, base + 3500, base + 9000, base + 60_000)}
    finally:
        consumer.close()
    assert watermarks == (0, 10)
    assert all(tp.error is None for tp in found.values())
    # the earliest record with timestamp >= the one asked for; none after the last record (OFFSET_END)
    assert [tp.offset for tp in found.values()] == [0, 0, 4, 9, -1]

    kp = KafkaConsumer(bootstrap_servers=bootstrap(cluster).split(","), enable_auto_commit=False,
                       request_timeout_ms=20000)
    try:
        tp = KafkaTopicPartition("timed", 0)
        assert kp.beginning_offsets([tp], timeout_ms=15000) == {tp: 0}
        assert kp.end_offsets([tp], timeout_ms=15000) == {tp: 10}
        by_time = kp.offsets_for_times({tp: base + 3500}, timeout_ms=15000)[tp]
        assert (by_time.offset, by_time.timestamp) == (4, base + 4000)
        assert kp.offsets_for_times({tp: base + 60_000}, timeout_ms=15000)[tp] is None
    finally:
        kp.close()
