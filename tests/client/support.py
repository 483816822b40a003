"""What the client tests share: raw connections that speak Kafka frames through kafka-python 3.0.12's
protocol classes (an encoder and decoder written independently of the broker's kio), record batches built
by kafka-python's record builder, and where each partition's leader is."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.admin import (
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    AlterReplicaLogDirsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteGroupsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeLogDirsResponse,
    ElectLeadersResponse,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetDeleteResponse,
)
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    WriteTxnMarkersResponse,
)
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from cluster.readiness import read_frame
from tests.cluster.test_controller import make_topic
from tests.harness import RunningCluster, wait_until

T = TypeVar("T")
MAGIC_V2 = 2
LATEST = -1
EARLIEST = -2
_SIZE = struct.Struct(">i")

# The response class of every API the broker serves, by API key, from kafka-python (the oracle).
RESPONSES: dict[int, type[ApiMessage]] = {
    0: ProduceResponse, 1: FetchResponse, 2: ListOffsetsResponse, 3: MetadataResponse, 10: FindCoordinatorResponse,
    18: ApiVersionsResponse,
    19: CreateTopicsResponse, 20: DeleteTopicsResponse, 21: DeleteRecordsResponse, 22: InitProducerIdResponse,
    34: AlterReplicaLogDirsResponse, 35: DescribeLogDirsResponse,
    37: CreatePartitionsResponse, 42: DeleteGroupsResponse, 43: ElectLeadersResponse, 47: OffsetDeleteResponse,
    45: AlterPartitionReassignmentsResponse, 46: ListPartitionReassignmentsResponse,
    60: DescribeClusterResponse, 32: DescribeConfigsResponse, 33: AlterConfigsResponse,
    44: IncrementalAlterConfigsResponse, 27: WriteTxnMarkersResponse,
    24: AddPartitionsToTxnResponse, 25: AddOffsetsToTxnResponse, 26: EndTxnResponse,
}


def bootstrap(cluster: RunningCluster) -> str:
    return cluster.spec.bootstrap_servers


def leader_of(cluster: RunningCluster, topic: str, partition: int = 0) -> int:
    return cluster.state([topic]).partition(topic, partition).leader


def client_port(cluster: RunningCluster, broker_id: int) -> int:
    return cluster.spec.broker(broker_id).client_port


def decode_exactly(response_class: type[ApiMessage], data: bytes, version: int) -> Any:
    """Decode with kafka-python and require that re-encoding gives back exactly the bytes received: the
    answer was read to its last byte, with nothing missing, left over or read differently."""
    reply = response_class.decode(data, version=version, header=True)
    assert reply.encode(header=True) == data, (
        f"{response_class.__name__} v{version} did not decode to exactly the {len(data)} bytes received")
    return reply


class RawConnection:
    """One client connection to one broker, speaking size-prefixed frames."""

    def __init__(self, port: int, timeout_s: float = 15) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self._correlation_id = 0

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send_frame(self, frame: bytes) -> None:
        self.sock.sendall(_SIZE.pack(len(frame)) + frame)

    def read_frame(self) -> bytes:
        return read_frame(self.sock)

    def request(self, request: ApiMessage, version: int) -> Any:
        """Send ``request`` at ``version`` and decode the answer with kafka-python's response class."""
        self._correlation_id += 1
        request.with_header(correlation_id=self._correlation_id, client_id="kafkasim-client-tests")
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        data = self.read_frame()
        response_class = RESPONSES.get(request.API_KEY)
        assert response_class is not None, f"no response class for API {request.API_KEY}"
        reply = decode_exactly(response_class, data, version)
        assert reply.header.correlation_id == self._correlation_id
        return reply


def exchange(port: int, frame: bytes, timeout_s: float) -> bytes | None:
    """One frame on a fresh connection: the answer, or None if the broker closed the connection.
    Raises TimeoutError if it did neither within ``timeout_s``."""
    with RawConnection(port, timeout_s) as connection:
        connection.send_frame(frame)
        try:
            return connection.read_frame()
        except ConnectionError:
            return None


def record_batch(values: list[bytes], *, producer_id: int = -1, producer_epoch: int = -1,
                 base_sequence: int = -1) -> bytes:
    """An uncompressed v2 batch as a producer sends it (baseOffset 0), timestamped now."""
    builder = DefaultRecordBatchBuilder(MAGIC_V2, 0, False, producer_id, producer_epoch, base_sequence, 1 << 20)
    start = int(time.time() * 1000)
    for delta, value in enumerate(values):
        builder.append(delta, start + delta, None, value, [])
    return bytes(builder.build())


def produce_request(topic: str, partition: int, records: bytes, acks: int = 1) -> ProduceRequest:
    partition_data = ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10000,
                          topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[partition_data])])


def fetch_request(topic: str, partition: int, offset: int) -> FetchRequest:
    """A Fetch that answers at once, whatever there is to read."""
    wanted = FetchRequest.FetchTopic.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                                    log_start_offset=-1, partition_max_bytes=1 << 20)
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic,
                                                                                        partitions=[wanted])],
                        forgotten_topics_data=[], rack_id="")


def list_offsets_request(topic: str, partition: int, timestamp: int) -> ListOffsetsRequest:
    wanted = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=partition,
                                                                      current_leader_epoch=-1, timestamp=timestamp)
    return ListOffsetsRequest(replica_id=-1, isolation_level=0,
                              topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[wanted])])


def metadata_request(topics: list[str] | None) -> MetadataRequest:
    wanted = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    return MetadataRequest(topics=wanted, allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                           include_topic_authorized_operations=False)


def latest_offset(connection: RawConnection, topic: str, partition: int = 0) -> int:
    """The log end as consumers see it (ListOffsets latest, v5) from the partition's leader."""
    reply = connection.request(list_offsets_request(topic, partition, LATEST), 5)
    answer = reply.topics[0].partitions[0]
    assert answer.error_code == 0, f"ListOffsets {topic}-{partition}: error {answer.error_code}"
    return answer.offset


def metadata_ok(connection: RawConnection, topic: str) -> bool:
    reply = connection.request(metadata_request([topic]), 8)
    return reply.topics[0].error_code == 0 and len(reply.brokers) > 0


def read_records(records: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a Fetch answer's record set, decoded by kafka-python."""
    out = []
    batches = MemoryRecords(records)
    while (batch := batches.next_batch()) is not None:
        out.extend((record.offset, record.value) for record in batch)
    return out


def fetch_batches(cluster: RunningCluster, topic: str, partition: int = 0, offset: int = 0) -> list:
    """The record batches stored in a partition from ``offset`` on, as kafka-python decodes them (one Fetch)."""
    with RawConnection(client_port(cluster, leader_of(cluster, topic, partition))) as connection:
        reply = connection.request(fetch_request(topic, partition, offset), 11)
    answer = reply.responses[0].partitions[0]
    assert answer.error_code == 0, f"Fetch {topic}-{partition}: error {answer.error_code}"
    batches, records = [], MemoryRecords(answer.records)
    while (batch := records.next_batch()) is not None:
        batches.append(batch)
    return batches


def create_topic(cluster: RunningCluster, name: str, partitions: int, replication_factor: int = 1,
                 config: dict[str, str] | None = None) -> None:
    """Create a topic through ZooKeeper and wait until every broker's metadata has a leader for each partition,
    so a client may start with any broker."""
    make_topic(cluster, name, partitions, replication_factor, config)

    def everywhere() -> bool:
        for broker in cluster.spec.brokers:
            with RawConnection(broker.client_port) as connection:
                reply = connection.request(metadata_request([name]), 8)
            topic = reply.topics[0]
            if topic.error_code != 0 or len(topic.partitions) != partitions or any(
                    p.leader_id < 0 for p in topic.partitions):
                return False
        return True

    wait_until(everywhere, 30, f"every broker's metadata to show {name} with leaders")


# A consumer's first calls can race its connection set-up (a broker restarted by an earlier test, a connection
# librdkafka is still opening): a transport error there is retried, any other error fails the test.
TRANSPORT_FAILURE = KafkaError._TRANSPORT


def retrying(call: Callable[[], T], what: str, timeout_s: float = 30) -> T:
    """``call`` until it returns something truthy (see TRANSPORT_FAILURE for why a consumer may need it)."""
    return wait_until(call, timeout_s, what, interval_s=0.1)


def confluent_consume(cluster: RunningCluster, topic: str, partitions: list[int], count: int,
                      timeout_s: float = 30) -> dict[int, list[tuple[int, bytes]]]:
    """Read ``count`` records from offset 0 of ``partitions`` with an assign()-mode confluent-kafka consumer
    (nothing is committed); (offset, value) per partition, in the order received."""
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "client-tests",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == TRANSPORT_FAILURE, f"consumer error: {message.error()}"
                continue
            got[message.partition()].append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert sum(map(len, got.values())) == count, f"read {sum(map(len, got.values()))} of {count} records: {got}"
    return got


def kafka_python_consume(cluster: RunningCluster, topic: str, partitions: list[int], count: int,
                         timeout_s: float = 30) -> dict[int, list[tuple[int, bytes]]]:
    """The same with kafka-python's KafkaConsumer: no group_id, assign() and seek to 0."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(cluster).split(","), enable_auto_commit=False,
                             request_timeout_ms=20000, fetch_max_wait_ms=100)
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
    try:
        assigned = [KafkaTopicPartition(topic, p) for p in partitions]
        consumer.assign(assigned)
        for tp in assigned:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + timeout_s
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                got[tp.partition].extend((m.offset, m.value) for m in messages)
    finally:
        consumer.close()
    assert sum(map(len, got.values())) == count, f"read {sum(map(len, got.values()))} of {count} records: {got}"
    return got


def consume(cluster: RunningCluster, topic: str, isolation: str, expected: int, linger_s: float = 3) -> list[bytes]:
    """Every value an assign()-mode consumer with ``isolation`` (read_committed or read_uncommitted) reads from
    offset 0 of partition 0: until ``expected`` arrived, then ``linger_s`` more, so that a record beyond what should
    be visible would show up too."""
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": f"txn-{isolation}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100, "isolation.level": isolation})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 40
        linger_until = None
        while time.monotonic() < (linger_until or deadline):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(message.value())
            if linger_until is None and len(got) >= expected:
                linger_until = time.monotonic() + linger_s
    finally:
        consumer.close()
    return got
