"""GroupMetadataManager: connects the pure GroupCoordinator to the broker. Groups and offsets are written as
records to the coordinator's __consumer_offsets partition with acks=all (answered once the high watermark
passes them); when this broker becomes leader of such a partition it replays the log before answering for
its groups, and when it stops leading it drops them. Delayed joins and heartbeat expiries run on the
asyncio loop through the purgatories' timing wheels."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator

from kio.schema.errors import ErrorCode

from broker.config import protocol_at_least
from broker.group.coordinator import Entry, GroupConfig, GroupCoordinator
from broker.group.metadata import GroupMetadata
from broker.group.replay import LoggedRecord, TxnMarker
from broker.log.log_reader import read_batches
from broker.log.record_batch import HEADER_SIZE, TRANSACTIONAL_FLAG, parse_header
from broker.log.records import NONE, Record, build_batch, read_varint
from broker.log.transactions import ABORT, COMMIT, control_record_type
from broker.purgatory.asyncio_timer import AsyncioTimer
from broker.replication.delayed_ops import ProducePartitionStatus
from broker.replication.partition import Partition
from broker.replication.replica_manager import ReplicaIO
from traces import events as te
from traces.writer import TraceWriter

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
READ_CHUNK_BYTES = 1 << 20


def group_config(config) -> GroupConfig:
    return GroupConfig(offsets_topic_partitions=config.offsets_topic_num_partitions,
                       min_session_timeout_ms=config.group_min_session_timeout_ms,
                       max_session_timeout_ms=config.group_max_session_timeout_ms,
                       initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                       offset_metadata_max_bytes=config.offset_metadata_max_bytes,
                       static_membership=protocol_at_least(config.inter_broker_protocol_version, (2, 3)))


def _field(buf: bytes, position: int) -> tuple[bytes | None, int]:
    length, position = read_varint(buf, position)
    if length < 0:
        return None, position
    return bytes(buf[position:position + length]), position + length


def keys_and_values(batches: bytes, from_offset: int = 0) -> Iterator[Entry]:
    """(key, value) of every data record at or after ``from_offset`` in whole v2 batches."""
    for item in logged_records(batches, from_offset):
        if isinstance(item, LoggedRecord):
            yield item.key, item.value


def logged_records(batches: bytes, from_offset: int = 0) -> Iterator[LoggedRecord | TxnMarker]:
    """The records at or after ``from_offset`` in whole v2 batches, as loading needs them: data records with their
    batch's base offset, producer and transactional flag, and the COMMIT/ABORT markers. The coordinator writes its
    batches uncompressed."""
    position = 0
    while position + HEADER_SIZE <= len(batches):
        header = parse_header(batches, position)
        end = position + header.size
        if header.next_offset > from_offset and header.is_control:
            control_type = control_record_type(batches[position:end])
            if control_type in (ABORT, COMMIT) and header.producer_id >= 0:
                yield TxnMarker(header.producer_id, control_type == COMMIT)
        elif header.next_offset > from_offset and header.compression == NONE:
            transactional = bool(header.attributes & TRANSACTIONAL_FLAG)
            body, at = batches[position + HEADER_SIZE:end], 0
            for _ in range(header.records_count):
                length, at = read_varint(body, at)
                record_end = at + length
                at += 1  # attributes
                _, at = read_varint(body, at)  # timestamp delta
                offset_delta, at = read_varint(body, at)
                key, at = _field(body, at)
                value, at = _field(body, at)
                if key is not None and header.base_offset + offset_delta >= from_offset:
                    yield LoggedRecord(key, value, header.base_offset, header.producer_id, transactional)
                at = record_end
        position = end


def _check_producer_epoch(partition: Partition, records: bytes) -> ProducePartitionStatus | None:
    """A TxnOffsetCommit of a fenced producer (an older epoch than the partition knows) is refused, as Kafka's log
    append of the offsets batch refuses it (ProducerAppendInfo.checkProducerEpoch)."""
    header = parse_header(records, 0)
    entry = partition.producer_state.producers.get(header.producer_id)
    if entry is not None and header.producer_epoch < entry.producer_epoch:
        return ProducePartitionStatus(ErrorCode.invalid_producer_epoch, error_message=(
            f"producer {header.producer_id} has epoch {header.producer_epoch}, older than {entry.producer_epoch}"))
    return None


class GroupMetadataManager:
    def __init__(self, config, replica_io: ReplicaIO, trace: TraceWriter, now_ms: Callable[[], int]) -> None:
        """``config``: the broker's KafkaConfig (group.* and offsets.* settings)."""
        self.replica_io = replica_io
        self.trace = trace
        self.now_ms = now_ms
        self.offsets_commit_timeout_ms = config.offsets_commit_timeout_ms
        self.offsets_retention_ms = config.offsets_retention_minutes * 60_000
        self.retention_check_interval_s = config.offsets_retention_check_interval_ms / 1000
        self._expiry: asyncio.TimerHandle | None = None
        self.coordinator = GroupCoordinator(config.broker_id, group_config(config), self._append,
                                            now_ms, self._trace_state_change,
                                            wall_clock_ms=lambda: int(time.time() * 1000))
        self._timers: list[AsyncioTimer] = []

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timers = [AsyncioTimer(self.coordinator.heartbeat_purgatory.timer, loop),
                        AsyncioTimer(self.coordinator.join_purgatory.timer, loop)]
        self._expiry = loop.call_later(self.retention_check_interval_s, self._expire_offsets, loop)

    def _expire_offsets(self, loop: asyncio.AbstractEventLoop) -> None:
        """Kafka's delete-expired-group-metadata task, every offsets.retention.check.interval.ms."""
        try:
            removed = self.coordinator.cleanup_group_metadata(self.offsets_retention_ms)
            if removed:
                log.info("removed %d expired offsets", removed)
        except Exception:
            log.exception("expiring group offsets failed")
        self._expiry = loop.call_later(self.retention_check_interval_s, self._expire_offsets, loop)

    def close(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        for timer in self._timers:
            timer.close()

    # --- storing ------------------------------------------------------------------------------------

    def _append(self, partition: int, entries: list[Entry], done: Callable[[ErrorCode, int], None],
                producer: tuple[int, int] | None = None) -> None:
        """``producer`` (id, epoch): a TxnOffsetCommit, written as Kafka's coordinator does, a transactional batch
        of that producer without sequence (AppendOrigin.Coordinator: no sequence check)."""
        tp = (OFFSETS_TOPIC, partition)
        now_wall = int(time.time() * 1000)
        records = [Record(key, value, now_wall) for key, value in entries]
        if producer is None:
            batch = build_batch(records)
        else:
            batch = build_batch(records, producer_id=producer[0], producer_epoch=producer[1], transactional=True)
        self.replica_io.append_records(
            {tp: batch}, -1, self.offsets_commit_timeout_ms, self.now_ms(),
            lambda statuses: done(statuses[tp].error, statuses[tp].base_offset),
            check=None if producer is None else _check_producer_epoch, from_coordinator=producer is not None)

    def handle_txn_completion(self, producer_id: int, partitions: list[int], committed: bool) -> None:
        """A COMMIT or ABORT marker of the producer is replicated on these __consumer_offsets partitions."""
        applied = self.coordinator.handle_txn_completion(producer_id, partitions, committed)
        if applied:
            log.info("transaction of producer %d committed %d group offsets", producer_id, applied)

    # --- leadership ---------------------------------------------------------------------------------

    def on_role_change(self, tp: tuple[str, int], leader: bool) -> None:
        if tp[0] != OFFSETS_TOPIC:
            return
        partition = tp[1]
        if not leader:
            dropped = self.coordinator.unload_partition(partition)
            if dropped:
                log.info("no longer coordinator for %s-%d: %d groups unloaded", OFFSETS_TOPIC, partition, dropped)
            return
        if partition in self.coordinator.owned_partitions:
            return  # a new epoch while staying leader: the groups in memory are current
        self.coordinator.begin_loading(partition)
        # answered COORDINATOR_LOAD_IN_PROGRESS until the log has been replayed
        asyncio.get_running_loop().call_soon(self._load, partition)

    def _load(self, partition: int) -> None:
        tp = (OFFSETS_TOPIC, partition)
        hosted = self.replica_io.hosted.get(tp)
        if hosted is None or not hosted.is_leader or partition not in self.coordinator.loading_partitions:
            return
        started = time.monotonic()
        try:
            loaded = self.coordinator.load_partition(partition, self._read_log(hosted.log))
        except Exception:
            log.exception("loading groups from %s-%d failed", OFFSETS_TOPIC, partition)
            self.coordinator.loading_partitions.discard(partition)
            return
        log.info("coordinator for %s-%d: loaded %d groups in %.1f ms", OFFSETS_TOPIC, partition, loaded,
                 (time.monotonic() - started) * 1000)

    @staticmethod
    def _read_log(partition_log) -> Iterator[LoggedRecord | TxnMarker]:
        for batches, from_offset in read_batches(partition_log, partition_log.log_start_offset,
                                                 partition_log.log_end_offset, READ_CHUNK_BYTES):
            yield from logged_records(batches, from_offset)

    # --- traces -------------------------------------------------------------------------------------

    def _trace_state_change(self, group: GroupMetadata, old_state: str, reason: str) -> None:
        self.trace.emit(te.GroupStateChanged, group_id=group.group_id, old_state=old_state,
                               new_state=group.state.value, generation_id=group.generation_id,
                               members=len(group.members), protocol=group.protocol_name, reason=reason)
