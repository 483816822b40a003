"""Hostile input against a running 3-broker cluster (issue 32, part 7): mutated copies of real clients' requests of
every API the broker serves, 100,000 frames in all, cannot take a broker down.

The frames are recorded first: unmodified confluent-kafka (librdkafka) and kafka-python clients drive a one-broker
cluster through frame_recorder's proxy (producers, a transactional consume-transform-produce step, a consumer group,
both admin clients). WriteTxnMarkers, which no client sends (Kafka's brokers send it to each other), is encoded by
kio from Kafka's own message spec. Each fuzzed frame is one recorded frame with 1-4 mutations (bit flips,
overwritten bytes, truncation, inserted junk, forged int16/int32 length and count fields), or a size prefix that
lies, or junk alone; the frames go out on a dozen connections spread over the three brokers.

Afterwards: every broker is alive and registered, its RSS never passed 300 MB, the controller did not change, no
handler raised (no traceback in any broker's log), and a producer and a consumer still work. The frames per second
and the largest RSS are printed (`pytest -s`)."""

from __future__ import annotations

import asyncio
import io
import json
import random
import struct
import threading
import time
import uuid

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.protocol.consumer.offsets import OffsetForLeaderEpochRequest
from kafka.structs import TopicPartition as KpTopicPartition

from broker.clientplane.protocol.versions import SUPPORTED_VERSIONS, ApiKey
from cluster.lifecycle import up
from cluster.processes import port_is_free
from tests.client.frame_recorder import recording
from tests.harness import RunningCluster, TEST_DEFAULTS, start_cluster, wait_until
from zk.server import free_port

pytestmark = [pytest.mark.processes, pytest.mark.slow]

FRAMES = int(__import__("os").environ.get("KAFKASIM_FUZZ_FRAMES", 100_000))
CONNECTIONS_PER_BROKER = 4
ANSWER_WAIT_S = 0.5        # how long an answer may take before the connection is given up (acks=0, long polls)
RSS_LIMIT = 300 * 2**20
FUZZ_SEED = 32_07
TOPIC, SECOND_TOPIC, GROUP, TRANSACTIONAL_ID = "fuzz-a", "fuzz-b", "fuzz-group", "fuzz-txn"
# the fuzzed cluster's settings: KIP-578's limit low enough that the topics fuzzed CreateTopics and auto-creating
# Metadata requests manage to create stay well inside the memory budget
FUZZED_CLUSTER = {"max.broker.partitions": "400"}
SINGLE_BROKER = {"offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
                 "transaction.state.log.min.isr": "1", "offsets.topic.num.partitions": "3",
                 "transaction.state.log.num.partitions": "3"}


# --- recording real clients ---------------------------------------------------------------------------------------

def free_base_port() -> int:
    """A base port whose client, cluster and metrics ports (base, base+100, base+200) are all free."""
    for _ in range(200):
        base = free_port()
        if base + 200 < 65536 and all(port_is_free("127.0.0.1", base + step) for step in (100, 200)):
            return base
    raise AssertionError("no free base port found")


def drive_real_clients(bootstrap: str) -> None:
    """Every API kafkasim serves, asked by an unmodified client."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wait_futures(admin.create_topics([NewTopic(TOPIC, 3, 1), NewTopic(SECOND_TOPIC, 1, 1),
                                      NewTopic("fuzz-doomed", 1, 1)], operation_timeout=20))
    wait_futures(admin.create_partitions([NewPartitions(SECOND_TOPIC, 2)], operation_timeout=20))

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(30):
        producer.produce(TOPIC, value=b"value-%d" % i, key=b"key-%d" % i)
        producer.produce(SECOND_TOPIC, value=b"value-%d" % i)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    consumer.subscribe([TOPIC])
    consumed = poll_some(consumer, 10)
    consumer.commit(asynchronous=False)

    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for message in consumed:
        transactional.produce(SECOND_TOPIC, value=message.value())
    transactional.send_offsets_to_transaction(
        [TopicPartition(m.topic(), m.partition(), m.offset() + 1) for m in consumed],
        consumer.consumer_group_metadata(), 30)
    transactional.commit_transaction(30)
    consumer.close()  # LeaveGroup

    topic = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    wait_futures(admin.describe_configs([topic, ConfigResource(ConfigResource.Type.BROKER, "1")]))
    wait_futures(admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, SECOND_TOPIC,
                                                     set_config={"retention.ms": "86400000"})]))
    wait_futures(admin.incremental_alter_configs([ConfigResource(
        ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
            ConfigEntry("retention.ms", "604800000", incremental_operation=AlterConfigOpType.SET)])]))
    wait_futures([admin.list_consumer_groups()])
    wait_futures(admin.describe_consumer_groups([GROUP]))
    wait_futures(admin.delete_topics(["fuzz-doomed"], operation_timeout=20))

    kafka_python = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    try:
        for call in (
            lambda: kafka_python.describe_cluster(),
            lambda: kafka_python.describe_groups([GROUP]),
            lambda: kafka_python.list_groups(),
            lambda: kafka_python.delete_records({KpTopicPartition(SECOND_TOPIC, 0): 1}),
            lambda: kafka_python.elect_leaders(0, {TOPIC: [0]}, raise_errors=False),
            lambda: kafka_python.alter_partition_reassignments({KpTopicPartition(TOPIC, 1): [1]}),
            lambda: kafka_python.list_partition_reassignments(),
            lambda: kafka_python.alter_replica_log_dirs({(TOPIC, 2, 1): kafka_python_log_dir(kafka_python)}),
            lambda: kafka_python.delete_group_offsets(GROUP, [KpTopicPartition(TOPIC, 0)]),
            lambda: kafka_python.create_partitions({TOPIC: KpNewPartitions(4)}),
            lambda: kafka_python.delete_groups([GROUP + "-epochs"]),
        ):
            try:
                call()
            except Exception as exc:  # the recording needs the request, not its success
                print(f"recording: {exc!r}")
    finally:
        kafka_python.close()


def offset_for_leader_epoch_frame() -> bytes:
    """OffsetForLeaderEpoch v3 as kafka-python's fetcher sends it to validate a position (KIP-320), encoded by
    kafka-python's own request class: a client sends it only after a partition's leader epoch moved on under its
    position, which the one-broker recording cluster has no leader change to cause."""
    partitions = [OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
        partition=p, current_leader_epoch=0, leader_epoch=0) for p in range(3)]
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=TOPIC, partitions=partitions)])
    request.with_header(correlation_id=1, client_id="kafka-python-3.0.12")
    return bytes(request.encode(version=3, header=True))


def kafka_python_log_dir(admin: KafkaAdminClient) -> str:
    """DescribeLogDirs asked, and the broker's log directory found in its answer."""
    text = json.dumps(admin.describe_log_dirs(), default=str)
    return next((part for part in text.split('"') if part.endswith("/logs")), "/nonexistent")


def wait_futures(futures) -> None:
    for future in (futures.values() if isinstance(futures, dict) else futures):
        try:
            future.result(30)
        except Exception as exc:  # the recording needs the request, not its success
            print(f"recording: {exc}")


def poll_some(consumer: Consumer, count: int, timeout_s: float = 30) -> list:
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message)
    return got


def write_txn_markers_frame() -> bytes:
    """WriteTxnMarkers v1 (the first version kafkasim implements) for a partition of the recorded transaction's,
    encoded by kio (no client sends it)."""
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.schema.write_txn_markers.v1.request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )
    from kio.serial import entity_writer
    from kio.static.primitive import i16, i32, i64

    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(request_api_key=i16(ApiKey.WRITE_TXN_MARKERS),
                                                       request_api_version=i16(1), correlation_id=i32(1),
                                                       client_id="broker-1"))
    marker = WritableTxnMarker(producer_id=i64(1000), producer_epoch=i16(0), transaction_result=True,
                               topics=(WritableTxnMarkerTopic(name=SECOND_TOPIC, partition_indexes=(i32(0),)),),
                               coordinator_epoch=i32(0))
    entity_writer(WriteTxnMarkersRequest)(buffer, WriteTxnMarkersRequest(markers=(marker,)))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def recorded_frames(tmp_path_factory: pytest.TempPathFactory, zk_server: str) -> dict[int, list[bytes]]:
    data_dir = tmp_path_factory.mktemp("fuzz-recording")
    base = free_base_port()
    with recording(base) as recorder:
        overrides = {**TEST_DEFAULTS, **SINGLE_BROKER,
                     "advertised.listeners": f"PLAINTEXT://127.0.0.1:{recorder.port},CLUSTER://127.0.0.1:{base + 100}"}
        spec = up(data_dir, brokers=1, zookeeper=f"{zk_server}/fuzz-rec-{uuid.uuid4().hex[:8]}", profile="classroom",
                  overrides=overrides, base_port=base, say=lambda _: None)
        running = RunningCluster(data_dir, spec, spec.zookeeper)
        try:
            drive_real_clients(f"127.0.0.1:{recorder.port}")
        finally:
            running.stop_all()
        frames = recorder.recorded()
    frames.setdefault(ApiKey.WRITE_TXN_MARKERS, []).append(write_txn_markers_frame())
    frames.setdefault(ApiKey.OFFSET_FOR_LEADER_EPOCH, []).append(offset_for_leader_epoch_frame())
    return frames


# --- the fuzzed cluster ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fuzzed_cluster(tmp_path_factory: pytest.TempPathFactory, zk_server: str):
    running = start_cluster(tmp_path_factory.mktemp("fuzzed"), zk_server, 3, "classroom", FUZZED_CLUSTER)
    try:
        admin = AdminClient({"bootstrap.servers": running.spec.bootstrap_servers})
        wait_futures(admin.create_topics([NewTopic(TOPIC, 4, 3), NewTopic(SECOND_TOPIC, 2, 3)], operation_timeout=30))
        producer = Producer({"bootstrap.servers": running.spec.bootstrap_servers, "enable.idempotence": True})
        for i in range(30):
            producer.produce(TOPIC, value=b"seed-%d" % i)
            producer.produce(SECOND_TOPIC, value=b"seed-%d" % i)
        assert producer.flush(30) == 0
        yield running
    finally:
        running.stop_all()


def mutate(rng: random.Random, frame: bytes) -> bytes:
    out = bytearray(frame)
    # one mutation half the time: more frames still decode and reach the handlers, where the interesting refusals are
    for _ in range(rng.choice((1, 1, 1, 2, 3, 4))):
        if not out:
            break
        at = rng.randrange(len(out))
        kind = rng.choice(("flip", "flip", "byte", "int32", "int16", "truncate", "insert"))
        if kind == "flip":
            out[at] ^= 1 << rng.randrange(8)
        elif kind == "byte":
            out[at] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF))
        elif kind == "truncate":
            del out[at:]
        elif kind == "insert":
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        else:  # forged lengths and counts: small, negative, huge
            value = rng.choice((-1, 0, 1, 2**7, 2**15 - 1, 2**31 - 1, -(2**31), rng.getrandbits(31)))
            packed = struct.pack(">i", value) if kind == "int32" else struct.pack(">h", max(-(2**15),
                                                                                        min(2**15 - 1, value)))
            out[at:at + len(packed)] = packed
    return bytes(out)


def fuzzed_wire_frames(rng: random.Random, recorded: dict[int, list[bytes]]):
    """Size-prefixed bytes to send: mostly one mutated recorded frame, sometimes a lying size prefix or junk."""
    apis = sorted(recorded)
    while True:
        frame = mutate(rng, rng.choice(recorded[rng.choice(apis)]))
        roll = rng.random()
        if roll < 0.03:   # a size prefix that lies: the broker must wait for bytes that never come, or refuse
            yield struct.pack(">i", rng.choice((len(frame) + rng.randint(1, 64), -1, 2**31 - 1, 0))) + frame
        elif roll < 0.05:  # junk
            junk = rng.randbytes(rng.randint(0, 64))
            yield struct.pack(">i", len(junk)) + junk
        else:
            yield struct.pack(">i", len(frame)) + frame


class Fuzzer:
    """Frames go out one at a time on each connection, the next once the broker answered or closed, so every frame
    reaches the broker's decoder; a frame left unanswered for ANSWER_WAIT_S (acks=0, a long poll, a size prefix
    that promised more bytes) ends its connection."""

    def __init__(self, ports: list[int], recorded: dict[int, list[bytes]], total: int, seed: int) -> None:
        self.ports = ports
        self.frames = fuzzed_wire_frames(random.Random(seed), recorded)
        self.remaining = total
        self.sent = self.answered = self.closed_by_broker = self.unanswered = self.connections = 0
        self.unreachable: set[int] = set()

    async def run(self, deadline: float) -> None:
        await asyncio.gather(*(self._worker(port, deadline) for port in self.ports
                               for _ in range(CONNECTIONS_PER_BROKER)))

    async def _worker(self, port: int, deadline: float) -> None:
        while self.remaining > 0 and time.monotonic() < deadline:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
            except (OSError, TimeoutError):
                self.unreachable.add(port)  # the checks after the run say which broker and why
                return
            self.connections += 1
            try:
                while self.remaining > 0 and time.monotonic() < deadline:
                    self.remaining -= 1
                    writer.write(next(self.frames))
                    self.sent += 1
                    if not await self._answered(reader):
                        break
            except ConnectionError:
                self.closed_by_broker += 1
            finally:
                writer.close()
                try:
                    await asyncio.wait_for(writer.wait_closed(), ANSWER_WAIT_S)
                except (TimeoutError, ConnectionError):
                    pass

    async def _answered(self, reader: asyncio.StreamReader) -> bool:
        try:
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), ANSWER_WAIT_S))[0]
            await asyncio.wait_for(reader.readexactly(size), ANSWER_WAIT_S)
        except asyncio.IncompleteReadError:
            self.closed_by_broker += 1
            return False
        except TimeoutError:
            self.unanswered += 1
            return False
        self.answered += 1
        return True


class RssWatch:
    """The largest RSS of each broker process, sampled every 200 ms on a thread."""

    def __init__(self, pids: dict[int, int]) -> None:
        self.processes = {broker: psutil.Process(pid) for broker, pid in pids.items()}
        self.peak = dict.fromkeys(pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> RssWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            for broker, process in self.processes.items():
                try:
                    self.peak[broker] = max(self.peak[broker], process.memory_info().rss)
                except psutil.Error:
                    pass


def controller_state(cluster: RunningCluster) -> tuple[int, int]:
    controller = json.loads(cluster.raw("/controller")[0])["brokerid"]
    epoch = int(cluster.raw("/controller_epoch")[0])
    return controller, epoch


def handler_failures(cluster: RunningCluster) -> list[str]:
    failures = []
    for broker in cluster.spec.brokers:
        lines = cluster.layout.broker_log(broker.broker_id).read_text(errors="replace").splitlines()
        failures += [f"broker {broker.broker_id}: {lines[i - 1] if i else ''} / {line}"
                     for i, line in enumerate(lines) if line.startswith("Traceback")]
    return failures


def produce_and_consume_after(cluster: RunningCluster) -> None:
    bootstrap = cluster.spec.bootstrap_servers
    topic = f"after-fuzz-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    values = [b"after-%d" % i for i in range(100)]
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"after-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        got = [m.value() for m in poll_some(consumer, len(values), timeout_s=60)]
    finally:
        consumer.close()
    assert got == values


@pytest.mark.timeout(900)
def test_a_hundred_thousand_mutated_real_frames_leave_every_broker_up_small_and_serving(recorded_frames,
                                                                                         fuzzed_cluster):
    cluster = fuzzed_cluster
    missing = sorted(ApiKey(key).name for key in SUPPORTED_VERSIONS if key not in recorded_frames)
    assert not missing, f"no real client frame recorded for {missing}"

    before = controller_state(cluster)
    pids = {b.broker_id: cluster.pid(b.broker_id) for b in cluster.spec.brokers}
    fuzzer = Fuzzer([b.client_port for b in cluster.spec.brokers], recorded_frames, FRAMES, FUZZ_SEED)
    started = time.monotonic()
    with RssWatch(pids) as rss:
        asyncio.run(fuzzer.run(deadline=started + 600))
    elapsed = time.monotonic() - started
    print(f"\nfuzz: {fuzzer.sent} frames in {elapsed:.1f} s ({fuzzer.sent / elapsed:.0f} frames/s) on "
          f"{fuzzer.connections} connections: {fuzzer.answered} answered, {fuzzer.closed_by_broker} closed by a "
          f"broker, {fuzzer.unanswered} left unanswered for {ANSWER_WAIT_S} s; largest RSS "
          + ", ".join(f"broker {b} {peak / 2**20:.0f} MiB" for b, peak in sorted(rss.peak.items())))
    assert not fuzzer.unreachable, f"brokers on ports {sorted(fuzzer.unreachable)} stopped accepting connections"
    assert fuzzer.sent >= FRAMES, f"only {fuzzer.sent} frames went out before the deadline"

    for broker, pid in pids.items():
        assert psutil.pid_exists(pid), f"broker {broker} (pid {pid}) died"
    wait_until(lambda: sorted(b.broker_id for b in cluster.state().brokers) == [1, 2, 3], 30,
               "every broker registered")
    assert max(rss.peak.values()) < RSS_LIMIT, f"largest RSS per broker: {rss.peak}"
    assert controller_state(cluster) == before, "the controller changed during the fuzzing"
    assert handler_failures(cluster) == []
    produce_and_consume_after(cluster)
