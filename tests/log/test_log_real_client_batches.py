"""Record batches made by real clients are stored and read back byte-identical.

A throwaway single-node endpoint, speaking just ApiVersions, Metadata and Produce through kio, captures
the raw record sets a confluent-kafka (librdkafka) producer sends with each compression codec; the
captured Produce frames of other clients in the shared reference folder are replayed too.
"""

from __future__ import annotations

import asyncio
import io
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.index import load_request_schema
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v8 import response as metadata
from kio.schema.produce.v8 import response as produce
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta, i64

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.record_batch import COMPRESSION_NAMES, check_batch_at, parse_header
from tests.log.support import ManualClock

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# librdkafka enables message format v2 and each codec only when these APIs are advertised
# (Fetch for MsgVer2/zstd, FindCoordinator for lz4); the endpoint never has to serve them.
ADVERTISED = {0: (3, 8), 1: (4, 11), 3: (1, 8), 10: (0, 2), 18: (0, 3)}
FRAMES = Path(__file__).parents[1] / "protocol" / "client_frames"


@dataclass
class CapturingEndpoint:
    """Answers ApiVersions/Metadata/Produce for one partition and keeps every produced record set."""

    record_sets: list[tuple[str, bytes]] = field(default_factory=list)
    port: int = 0

    def _frame(self, response: object, correlation_id: int) -> bytes:
        buffer = io.BytesIO()
        header = type(response).__header_schema__
        entity_writer(header)(buffer, header(correlation_id=i32(correlation_id)))
        entity_writer(type(response))(buffer, response)
        return struct.pack(">i", buffer.tell()) + buffer.getvalue()

    def _answer(self, api_key: int, request: object) -> object | None:
        if api_key == 18:
            return ApiVersionsResponse(
                error_code=ErrorCode.none,
                api_keys=tuple(
                    ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                    for k, (lo, hi) in ADVERTISED.items()
                ),
                throttle_time=i32Timedelta.parse(timedelta(0)),
            )
        if api_key == 3:
            partition = metadata.MetadataResponsePartition(
                error_code=ErrorCode.none,
                partition_index=i32(0),
                leader_id=BrokerId(0),
                leader_epoch=i32(0),
                replica_nodes=(BrokerId(0),),
                isr_nodes=(BrokerId(0),),
            )
            return metadata.MetadataResponse(
                throttle_time=i32Timedelta.parse(timedelta(0)),
                brokers=(metadata.MetadataResponseBroker(node_id=BrokerId(0), host="127.0.0.1", port=i32(self.port)),),
                cluster_id="capture",
                controller_id=BrokerId(0),
                topics=tuple(
                    metadata.MetadataResponseTopic(error_code=ErrorCode.none, name=t.name, partitions=(partition,))
                    for t in request.topics or ()
                ),
            )
        topics = []
        for topic in request.topic_data:
            for data in topic.partition_data:
                self.record_sets.append((topic.name, bytes(data.records)))
            topics.append(
                produce.TopicProduceResponse(
                    name=TopicName(topic.name),
                    partition_responses=tuple(
                        produce.PartitionProduceResponse(
                            index=d.index, error_code=ErrorCode.none, base_offset=i64(0), record_errors=()
                        )
                        for d in topic.partition_data
                    ),
                )
            )
        return produce.ProduceResponse(responses=tuple(topics)) if request.acks != 0 else None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version = struct.unpack_from(">hh", frame)
                schema = load_request_schema(api_key, version)
                header, used = entity_reader(schema.__header_schema__)(frame, 0)
                request, _ = entity_reader(schema)(frame, used)
                response = self._answer(api_key, request)
                if response is not None:
                    writer.write(self._frame(response, header.correlation_id))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[CapturingEndpoint]:
    capture = CapturingEndpoint()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()

    async def run() -> None:
        server = await asyncio.start_server(capture.serve, "127.0.0.1", 0)
        capture.port = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield capture
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)


def produced_with(endpoint: CapturingEndpoint, codec: str) -> list[bytes]:
    topic = f"captured-{codec}"
    errors = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{endpoint.port}", "compression.type": codec, "linger.ms": 20})
    for i in range(300):
        producer.produce(
            topic,
            key=b"key-%d" % (i % 7),
            value=(b"value %d " % i) * (1 + i % 40),
            headers=[("h", b"%d" % i)],
            timestamp=1_700_000_000_000 + i,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
        if i % 100 == 99:
            producer.flush(20)
    assert producer.flush(20) == 0 and errors == []
    return [data for name, data in endpoint.record_sets if name == topic]


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_confluent_kafka_batches_are_stored_and_read_back_byte_identical(tmp_path, endpoint, codec):
    record_sets = produced_with(endpoint, codec)
    assert record_sets, f"no Produce request captured for {codec}"
    leader = Log.open(tmp_path / "leader-0", LogConfig(), clock=ManualClock())
    follower = Log.open(tmp_path / "follower-0", LogConfig(), clock=ManualClock())
    for sent in record_sets:
        header = parse_header(sent)
        assert header.magic == 2 and COMPRESSION_NAMES[header.compression] == codec
        info = leader.append_as_leader(sent, leader_epoch=3)
        stored = leader.read(info.first_offset, len(sent)).read_bytes()
        assert len(stored) == len(sent)
        assert stored[8:12] == sent[8:12] and stored[16:] == sent[16:]
        assert struct.unpack(">q", stored[:8])[0] == info.first_offset
        assert struct.unpack(">i", stored[12:16])[0] == 3
        check_batch_at(stored, 0, len(stored))
        follower.append_as_follower(stored)
    assert leader.log_end_offset == 300
    assert leader.active_segment.log_path.read_bytes() == follower.active_segment.log_path.read_bytes()
    found = leader.fetch_offset_by_timestamp(1_700_000_000_150)
    assert found == (1_700_000_000_150, 150, 3)  # record-exact for every codec


def captured_produce_frames() -> list[Path]:
    return sorted(FRAMES.glob("*/*_Produce_v*.bin"))


def test_the_repository_holds_produce_frames_of_other_clients():
    # the round-trip test below is parametrized over these; without them it would silently run zero cases
    assert len(captured_produce_frames()) >= 3, f"captured Produce frames missing from {FRAMES}"


@pytest.mark.parametrize("frame_path", captured_produce_frames(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_captured_produce_frames_of_other_clients_round_trip(tmp_path, frame_path):
    frame = frame_path.read_bytes()
    api_key, version = struct.unpack_from(">hh", frame)
    schema = load_request_schema(api_key, version)
    _, used = entity_reader(schema.__header_schema__)(frame, 0)
    request, _ = entity_reader(schema)(frame, used)
    record_sets = [bytes(d.records) for t in request.topic_data for d in t.partition_data if d.records]
    assert record_sets
    log = Log.open(tmp_path / "replay-0", LogConfig(), clock=ManualClock())
    for sent in record_sets:
        info = log.append_as_leader(sent, leader_epoch=1)
        stored = log.read(info.first_offset, len(sent)).read_bytes()
        assert stored[16:] == sent[16:] and stored[8:12] == sent[8:12]
