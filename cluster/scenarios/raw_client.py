"""Requests sent to one chosen broker, whatever the metadata says (kafka-python's protocol classes): a produce for
stories that must decide who receives a write and act in the instant after its acknowledgement, the
OffsetForLeaderEpoch a KIP-320 client sends, to show a leader fencing an old epoch, and a group's OffsetFetch and
OffsetCommit, to ask one broker what it holds as the group's coordinator (a zombie one included)."""

from __future__ import annotations

import socket
import struct
import time
import warnings
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker.log.records import Record, build_batch

with warnings.catch_warnings():
    # kafka-python loads its message specs through importlib.resources calls deprecated since Python 3.11
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import (
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
    )
    from kafka.protocol.consumer.offsets import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

PRODUCE_VERSION = 8
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
OFFSET_FETCH_VERSION = 7    # require_stable (KIP-447), as a read_committed member asks
OFFSET_COMMIT_VERSION = 7
# a leader that has not applied its LeaderAndIsr yet, or moved: a client refreshes its metadata and retries
RETRIABLE_ROUTING = {e.value for e in (ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available,
                                       ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch,
                                       ErrorCode.fenced_leader_epoch)}


@dataclass(frozen=True)
class ProduceResult:
    error_code: int
    base_offset: int

    @property
    def error_name(self) -> str:
        return ErrorCode(self.error_code).name.upper()


def produce(host: str, port: int, topic: str, values: list[bytes], acks: int, timeout_ms: int = 20000
            ) -> ProduceResult:
    """One uncompressed v2 batch to partition 0 of ``topic`` on the broker at host:port; Produce v8."""
    now = int(time.time() * 1000)
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(
                index=0, records=build_batch([Record(None, value, now) for value in values]))])])
    response = call(host, port, request, PRODUCE_VERSION, ProduceResponse, timeout_ms / 1000 + 10)
    answer = response.responses[0].partition_responses[0]
    return ProduceResult(answer.error_code, answer.base_offset)


@dataclass(frozen=True)
class EpochEnd:
    error_code: int
    leader_epoch: int
    end_offset: int

    @property
    def error_name(self) -> str:
        return ErrorCode(self.error_code).name.upper()


def offset_for_leader_epoch(host: str, port: int, topic: str, current_leader_epoch: int, leader_epoch: int
                            ) -> EpochEnd:
    """Where ``leader_epoch`` ends on partition 0, asked as a consumer (replica -1) that believes the leader is in
    ``current_leader_epoch``: OffsetForLeaderEpoch v3."""
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=topic, partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch)])])
    response = call(host, port, request, OFFSET_FOR_LEADER_EPOCH_VERSION, OffsetForLeaderEpochResponse, 15)
    answer = response.topics[0].partitions[0]
    return EpochEnd(answer.error_code, answer.leader_epoch, answer.end_offset)


@dataclass(frozen=True)
class CommittedOffset:
    error_code: int      # the partition's error, else the response's
    offset: int          # -1: none committed

    @property
    def error_name(self) -> str:
        return ErrorCode(self.error_code).name.upper()


def offset_fetch(host: str, port: int, group: str, topic: str, timeout_s: float = 20) -> CommittedOffset:
    """The committed offset of ``group`` for partition 0 of ``topic``, asked of the broker at host:port as a
    read_committed member asks (OffsetFetch v7, require_stable: UNSTABLE_OFFSET_COMMIT while a transaction's
    offsets are pending there)."""
    request = OffsetFetchRequest(group_id=group, require_stable=True, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])
    response = call(host, port, request, OFFSET_FETCH_VERSION, OffsetFetchResponse, timeout_s)
    partition = next(p for t in response.topics for p in t.partitions)
    return CommittedOffset(response.error_code or partition.error_code, partition.committed_offset)


def offset_commit(host: str, port: int, group: str, topic: str, offset: int, timeout_s: float = 30) -> int:
    """An admin tool's commit (generation -1, no member: allowed for a group without members) of ``offset`` for
    partition 0 of ``topic``, sent to the broker at host:port: the partition's error code."""
    topic_class = OffsetCommitRequest.OffsetCommitRequestTopic
    partition = topic_class.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                         committed_leader_epoch=-1, committed_metadata="")
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                  group_instance_id=None, topics=[topic_class(name=topic, partitions=[partition])])
    response = call(host, port, request, OFFSET_COMMIT_VERSION, OffsetCommitResponse, timeout_s)
    return response.topics[0].partitions[0].error_code


def call(host: str, port: int, request: Any, version: int, response_class: Any, timeout_s: float) -> Any:
    """One request on a fresh connection to the broker at host:port, its answer decoded by kafka-python."""
    request.with_header(correlation_id=1, client_id="kafkasim-scenario")
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(request.encode(version=version, header=True, framed=True))
        size = struct.unpack(">i", _read(sock, 4))[0]
        return response_class.decode(_read(sock, size), version=version, header=True)


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data
