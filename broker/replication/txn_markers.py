"""The leader's side of WriteTxnMarkers (Kafka's KafkaApis.handleWriteTxnMarkersRequest and
ProducerAppendInfo.appendEndTxnMarker): one control batch per partition, appended as the coordinator's append
(AppendOrigin.Coordinator, acks=all), answered per partition once replicated. Shared by the client-plane
WriteTxnMarkers handler and the cluster-plane service the transaction coordinator calls.

Checked before appending, per partition: a marker of an older producer epoch than the partition knows is
INVALID_PRODUCER_EPOCH; a marker whose coordinator epoch is older than the last one this leader wrote for the
producer is TRANSACTION_COORDINATOR_FENCED (a deposed coordinator's late marker). kafkasim remembers the coordinator
epoch while it leads the partition (there are no producer snapshots to carry it across a leader change); a new
leader takes any coordinator epoch first, then fences the older ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.log.record_batch import parse_header
from broker.log.records import build_end_txn_marker
from broker.replication.delayed_ops import ProducePartitionStatus
from broker.replication.partition import Partition
from broker.replication.replica_manager import ReplicaIO

TopicPartition = tuple[str, int]
MARKER_TIMEOUT_MS = 30_000  # Kafka appends markers with request.timeout.ms


@dataclass(frozen=True)
class TxnMarker:
    """One transaction's marker for some partitions (WritableTxnMarker)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


MarkerResults = dict[TopicPartition, ErrorCode]
# told of every marker's per-partition outcome once known (e.g. the group coordinator, for __consumer_offsets)
MarkerListener = Callable[[TxnMarker, MarkerResults], None]


def check_marker(partition: Partition, records: bytes, coordinator_epoch: int) -> ProducePartitionStatus | None:
    header = parse_header(records, 0)
    entry = partition.producer_state.producers.get(header.producer_id)
    if entry is None:
        return None
    if header.producer_epoch < entry.producer_epoch:
        return ProducePartitionStatus(
            ErrorCode.invalid_producer_epoch,
            error_message=f"marker of producer {header.producer_id} has epoch {header.producer_epoch}, older than "
                          f"the current {entry.producer_epoch}")
    if coordinator_epoch < entry.coordinator_epoch:
        return ProducePartitionStatus(
            ErrorCode.transaction_coordinator_fenced,
            error_message=f"marker of producer {header.producer_id} from coordinator epoch {coordinator_epoch}, "
                          f"older than {entry.coordinator_epoch}: a newer transaction coordinator took over")
    return None


class TxnMarkerWriter:
    def __init__(self, replica_io: ReplicaIO, now_ms: Callable[[], int]) -> None:
        self.replica_io = replica_io
        self.now_ms = now_ms
        self.listeners: list[MarkerListener] = []

    def write(self, markers: list[TxnMarker], wall_clock_ms: int,
              done: Callable[[list[MarkerResults]], None]) -> None:
        """Append every marker; ``done`` gets each one's error per partition, in order, once all are known."""
        results: list[MarkerResults | None] = [None] * len(markers)
        if not markers:
            done([])
            return

        def one_done(index: int, marker: TxnMarker, statuses: dict[TopicPartition, ProducePartitionStatus]) -> None:
            outcome = {tp: (statuses[tp].error if tp in statuses else ErrorCode.unknown_server_error)
                       for tp in marker.partitions}
            self._markers_appended(marker, outcome)
            results[index] = outcome
            if all(r is not None for r in results):
                done(results)

        for index, marker in enumerate(markers):
            records = build_end_txn_marker(producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                                           abort=not marker.commit, coordinator_epoch=marker.coordinator_epoch,
                                           timestamp=wall_clock_ms)
            self.replica_io.append_records(
                {tp: records for tp in marker.partitions}, -1, MARKER_TIMEOUT_MS, self.now_ms(),
                lambda statuses, i=index, m=marker: one_done(i, m, statuses),
                check=lambda partition, batch, m=marker: self._check(partition, batch, m),
                from_coordinator=True)

    @staticmethod
    def _check(partition: Partition, records: bytes, marker: TxnMarker) -> ProducePartitionStatus | None:
        refused = check_marker(partition, records, marker.coordinator_epoch)
        if refused is None:
            # remembered at append time: a deposed coordinator's marker arriving next is fenced at once
            partition.producer_state.note_coordinator_epoch(marker.producer_id, marker.coordinator_epoch)
        return refused

    def _markers_appended(self, marker: TxnMarker, results: MarkerResults) -> None:
        """The one place where a marker's per-partition outcome is known."""
        for listener in self.listeners:
            listener(marker, results)
