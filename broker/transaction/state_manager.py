"""TransactionStateManager: connects the pure TransactionCoordinator to the broker. Transactional ids are written as
records to their __transaction_state partition with acks=all (a change applies once the high watermark passes it);
when this broker becomes leader of such a partition it replays the log before answering for its ids
(COORDINATOR_LOAD_IN_PROGRESS meanwhile), with the partition's leader epoch as its coordinator epoch, and re-sends
the markers of transactions that were decided but not completed; when it stops leading it drops them. Two timers
run the abort of timed-out transactions and the expiry of idle transactional ids."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator

from kio.schema.errors import ErrorCode

from broker.group.manager import keys_and_values
from broker.log.log_reader import read_batches
from broker.log.records import Record, build_batch
from broker.replication.replica_manager import ReplicaIO
from broker.replication.txn_markers import TxnMarkerWriter
from broker.transaction.coordinator import (
    TRANSACTION_STATE_TOPIC,
    Entry,
    TransactionCoordinator,
    TxnConfig,
    TxnMarkerRequest,
    TxnStateChange,
)
from broker.transaction.marker_channel import TransactionMarkerChannelManager
from traces import events as te
from traces.writer import TraceWriter

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 1 << 20
APPEND_TIMEOUT_MS = 30_000  # Kafka appends to the transaction log with request.timeout.ms


def txn_config(config) -> TxnConfig:
    return TxnConfig(state_partitions=config.transaction_state_log_num_partitions,
                     max_timeout_ms=config.transaction_max_timeout_ms,
                     id_expiration_ms=config.transactional_id_expiration_ms,
                     offsets_topic_partitions=config.offsets_topic_num_partitions)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class TransactionStateManager:
    def __init__(self, config, replica_io: ReplicaIO, marker_writer: TxnMarkerWriter, trace: TraceWriter,
                 now_ms: Callable[[], int], leader_of: Callable[[tuple[str, int]], int | None],
                 address_of: Callable[[int], str | None],
                 partition_exists: Callable[[tuple[str, int]], bool]) -> None:
        """``config``: the broker's KafkaConfig (transaction.* settings). ``leader_of``/``address_of``: where each
        partition's leader is and its cluster-plane address, for the markers."""
        self.replica_io = replica_io
        self.trace = trace
        self.now_ms = now_ms
        self.abort_interval_s = config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        self.expiry_interval_s = config.transaction_remove_expired_transaction_cleanup_interval_ms / 1000
        self.coordinator = TransactionCoordinator(txn_config(config), self._append, self._send_markers,
                                                  wall_clock_ms, self._trace_state_change)
        self.markers = TransactionMarkerChannelManager(
            config.broker_id, leader_of, address_of, marker_writer,
            is_current=lambda request: self.coordinator.owned_partitions.get(request.state_partition)
            == request.coordinator_epoch,
            on_complete=self.coordinator.on_markers_written, partition_exists=partition_exists)
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._every(loop, "abort", self.abort_interval_s, self.coordinator.abort_timed_out_transactions,
                    "aborted timed-out transactions of")
        self._every(loop, "expire", self.expiry_interval_s, self.coordinator.expire_transactional_ids,
                    "expired the transactional ids")

    def _every(self, loop: asyncio.AbstractEventLoop, name: str, interval_s: float, task: Callable[[], list[str]],
               what: str) -> None:
        def run() -> None:
            try:
                done = task()
                if done:
                    log.info("%s %s", what, done)
            except Exception:
                log.exception("transaction coordinator task %r failed", name)
            self._handles[name] = loop.call_later(interval_s, run)
        self._handles[name] = loop.call_later(interval_s, run)

    async def close(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        await self.markers.close()

    # --- storing and markers ------------------------------------------------------------------------

    def _append(self, partition: int, entries: list[Entry], done: Callable[[ErrorCode], None]) -> None:
        tp = (TRANSACTION_STATE_TOPIC, partition)
        batch = build_batch([Record(key, value, wall_clock_ms()) for key, value in entries])
        self.replica_io.append_records({tp: batch}, -1, APPEND_TIMEOUT_MS, self.now_ms(),
                                       lambda statuses: done(statuses[tp].error))

    def _send_markers(self, request: TxnMarkerRequest) -> None:
        self.markers.send(request)

    # --- leadership ---------------------------------------------------------------------------------

    def on_role_change(self, tp: tuple[str, int], leader: bool) -> None:
        if tp[0] != TRANSACTION_STATE_TOPIC:
            return
        partition = tp[1]
        hosted = self.replica_io.hosted.get(tp)
        if not leader or hosted is None:
            dropped = self.coordinator.unload_partition(partition)
            if dropped:
                log.info("no longer transaction coordinator for %s-%d: %d ids unloaded", *tp, dropped)
            return
        epoch = hosted.leader_epoch
        if self.coordinator.owned_partitions.get(partition) == epoch or \
                self.coordinator.loading_partitions.get(partition) == epoch:
            return
        # a new leader epoch is a new coordinator epoch: what was in flight under the old one is not ours to finish
        self.coordinator.unload_partition(partition)
        self.coordinator.begin_loading(partition, epoch)
        asyncio.get_running_loop().call_soon(self._load, partition, epoch)

    def _load(self, partition: int, epoch: int) -> None:
        tp = (TRANSACTION_STATE_TOPIC, partition)
        hosted = self.replica_io.hosted.get(tp)
        if hosted is None or not hosted.is_leader or self.coordinator.loading_partitions.get(partition) != epoch:
            return
        started = time.monotonic()
        try:
            loaded = self.coordinator.load_partition(partition, epoch, read_log(hosted.log))
        except Exception:
            log.exception("loading transactions from %s-%d failed", *tp)
            self.coordinator.loading_partitions.pop(partition, None)
            return
        log.info("transaction coordinator for %s-%d (coordinator epoch %d): loaded %d ids in %.1f ms", *tp, epoch,
                 loaded, (time.monotonic() - started) * 1000)

    # --- traces -------------------------------------------------------------------------------------

    def _trace_state_change(self, change: TxnStateChange) -> None:
        self.trace.emit(te.TransactionStateChanged, transactional_id=change.transactional_id,
                        producer_id=change.producer_id, producer_epoch=change.producer_epoch,
                        old_state=change.old_state.label, new_state=change.new_state.label,
                        txn_partitions=[f"{t}-{p}" for t, p in sorted(change.partitions)],
                        coordinator_epoch=change.coordinator_epoch, state_partition=change.state_partition,
                        reason=change.reason)


def read_log(partition_log) -> Iterator[Entry]:
    """(key, value) of every record of a __transaction_state log, from its start to its end."""
    for batches, from_offset in read_batches(partition_log, partition_log.log_start_offset,
                                             partition_log.log_end_offset, READ_CHUNK_BYTES):
        yield from keys_and_values(batches, from_offset)
