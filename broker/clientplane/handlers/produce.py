"""Produce: one v2 batch per partition to the leader's log; acks=0 gets no answer, acks=all waits in the
produce purgatory for the high watermark."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import ReplicaAccess
from broker.clientplane.handlers.common import NO_THROTTLE, answer_once, millis, response_module
from broker.clientplane.network import CloseConnectionError, Delayed
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.group.manager import OFFSETS_TOPIC
from broker.log.record_batch import (
    CURRENT_MAGIC,
    HEADER_SIZE,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    MalformedBatch,
    check_batch_at,
    parse_header,
)
from broker.replication.delayed_ops import ProducePartitionStatus
from broker.replication.partition import Partition
from broker.transaction.coordinator import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)
ZSTD = 4
FIRST_VERSION_WITH_ZSTD = 7

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def validate_records(records: bytes | None, version: int) -> ProducePartitionStatus | None:
    """Kafka's ProduceRequest.validateRecords (v3+): exactly one batch, magic 2, zstd only from v7; no control
    batch, no transaction without a producer id (LogValidator)."""
    if not records or len(records) < HEADER_SIZE:
        return ProducePartitionStatus(ErrorCode.invalid_record,
                                      error_message="a produce request must carry exactly one record batch")
    header = parse_header(records, 0)
    if header.magic != CURRENT_MAGIC:
        return ProducePartitionStatus(ErrorCode.invalid_record,
                                      error_message=f"record batch magic {header.magic}; only v2 (magic 2) is stored")
    if header.size != len(records):
        return ProducePartitionStatus(ErrorCode.invalid_record,
                                      error_message="a produce request must carry exactly one record batch per "
                                                    f"partition (batch of {header.size} in {len(records)} bytes)")
    if header.is_control or (header.attributes & TRANSACTIONAL_FLAG and header.producer_id < 0):
        # LogValidator's client rules, which Kafka applies after the CRC check and before the producer's sequence
        # is looked at: markers are the coordinator's (WriteTxnMarkers), and a transaction belongs to a producer id
        try:
            check_batch_at(records, 0, len(records))
        except MalformedBatch as exc:
            return ProducePartitionStatus(exc.error_code, error_message=str(exc))
        what = "a control batch" if header.is_control else "a transactional batch without a producer id"
        return ProducePartitionStatus(ErrorCode.invalid_record, error_message=f"producers may not write {what}")
    if header.compression == ZSTD and version < FIRST_VERSION_WITH_ZSTD:
        return ProducePartitionStatus(ErrorCode.unsupported_compression_type,
                                      error_message=f"zstd needs Produce v{FIRST_VERSION_WITH_ZSTD}+")
    return None


def check_idempotence(partition: Partition, records: bytes) -> ProducePartitionStatus | None:
    header = parse_header(records, 0)
    if header.producer_id < 0:
        return None
    try:
        # Kafka validates the batch (CRC) before looking at sequences: a corrupt copy is CORRUPT_MESSAGE,
        # never mistaken for a duplicate or a sequence gap.
        check_batch_at(records, 0, len(records))
    except MalformedBatch as exc:
        return ProducePartitionStatus(exc.error_code, error_message=str(exc))
    decision = partition.check_producer_batch(header)
    if decision is None:
        _log_producer_restart(partition, header)
        return None
    if decision.duplicate_of is not None:
        # A retried batch the log already holds: Kafka 2.x answers with the original offsets.
        original = decision.duplicate_of
        # acks=all still waits for the original to be committed: the retry is answered like the first try
        return ProducePartitionStatus(ErrorCode.none, base_offset=original.first_offset,
                                      log_start_offset=partition.log.log_start_offset,
                                      required_offset=original.last_offset + 1)
    # A refused sequence makes librdkafka bump its epoch and re-send what it has not seen acknowledged:
    # say exactly what the partition remembered, so a duplicate that follows can be explained.
    entry = partition.producer_state.producers.get(header.producer_id)
    retained = [(b.first_seq, b.last_seq, b.first_offset) for b in entry.batches] if entry else []
    log.warning("%s-%d refused producer %d epoch %d sequences %d..%d (+%d): %s; retained (first, last, offset): %s; "
                "leader epoch %d, LEO %d, HW %d", partition.topic, partition.partition, header.producer_id,
                header.producer_epoch, header.base_sequence, header.base_sequence + header.last_offset_delta,
                header.last_offset_delta + 1, decision.error_code.name, retained, partition.leader_epoch,
                partition.log_end_offset, partition.high_watermark)
    return ProducePartitionStatus(decision.error_code, error_message=decision.message)


def _log_producer_restart(partition: Partition, header: BatchHeader) -> None:
    # The two ways a batch is appended without following the producer's last one here: a new epoch (librdkafka
    # bumps it after a refused sequence and re-sends, under new sequences, what it has not seen acknowledged),
    # or a producer this replica knows nothing of, continuing mid-sequence (KIP-360). Either can duplicate a
    # write the log already holds, so each is worth a line when a chaos run finds one.
    entry = partition.producer_state.producers.get(header.producer_id)
    if entry is not None and entry.producer_epoch != header.producer_epoch:
        log.info("%s-%d: producer %d starts epoch %d at sequence %d (epoch %d ended at sequence %d, offset %d)",
                 partition.topic, partition.partition, header.producer_id, header.producer_epoch,
                 header.base_sequence, entry.producer_epoch, entry.last_seq,
                 entry.batches[-1].last_offset if entry.batches else -1)
    elif entry is None and header.base_sequence != 0:
        log.info("%s-%d: producer %d epoch %d unknown here, taken at sequence %d (LEO %d, leader epoch %d)",
                 partition.topic, partition.partition, header.producer_id, header.producer_epoch,
                 header.base_sequence, partition.log_end_offset, partition.leader_epoch)


async def handle_produce(replicas: ReplicaAccess, request: Request):
    body = request.body
    version = request.header.api_version
    entries: dict[tuple[str, int], bytes] = {}
    refused: dict[tuple[str, int], ProducePartitionStatus] = {}
    for topic in body.topic_data:
        for data in topic.partition_data:
            tp = (topic.name, data.index)
            problem = validate_records(data.records, version)
            if topic.name in INTERNAL_TOPICS:
                # only the coordinators write there (Kafka: internalTopicsAllowed for the coordinators only)
                problem = ProducePartitionStatus(ErrorCode.invalid_topic_exception,
                                                 error_message=f"Cannot append to internal topic {topic.name}")
            if problem is not None:
                refused[tp] = problem
            else:
                entries[tp] = data.records
    future, respond = answer_once(asyncio.get_running_loop())

    replicas.replica_io.append_records(entries, body.acks, millis(body.timeout), replicas.now_ms(), respond,
                                     check=check_idempotence)

    def finish(statuses: dict):
        statuses = {**refused, **statuses}
        replicas.on_produce_answered(statuses, body.acks)
        if body.acks == 0:
            failed = [f"{t}-{p}: {s.error.name}" for (t, p), s in statuses.items() if s.error != ErrorCode.none]
            if failed:
                raise CloseConnectionError(f"acks=0 produce failed ({', '.join(failed)})")
            return None
        return _response(version, body, statuses)

    if future.done():
        return finish(future.result())
    return Delayed(future, finish)


def _append_time(millis_since_epoch: int) -> datetime | None:
    # kio models the -1 "CreateTime topic" marker as None
    return None if millis_since_epoch < 0 else datetime.fromtimestamp(millis_since_epoch / 1000, tz=UTC)


def _response(version: int, body, statuses: dict[tuple[str, int], ProducePartitionStatus]):
    module = response_module(ApiKey.PRODUCE, version)
    topics = []
    for topic in body.topic_data:
        partitions = []
        for data in topic.partition_data:
            status = statuses[(topic.name, data.index)]
            partitions.append(build(
                module.PartitionProduceResponse, index=data.index, error_code=status.error,
                base_offset=status.base_offset, log_append_time=_append_time(status.log_append_time),
                log_start_offset=status.log_start_offset, record_errors=(),
                error_message=status.error_message if status.error != ErrorCode.none else None))
        topics.append(build(module.TopicProduceResponse, name=topic.name, partition_responses=tuple(partitions)))
    return build(module.ProduceResponse, responses=tuple(topics), throttle_time=NO_THROTTLE)
