"""The log as Partition's rules see it (a port): offsets, appends, reads, truncation and the leader
epoch lookups. The file-backed ``broker.log.log.Log`` implements it; so does an in-memory log in the
tests, which is how the high-watermark, ISR and fencing rules are tested without files."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from broker.log.record_batch import BatchHeader
from broker.log.transactions import AbortedTxn


class LogRegion(Protocol):
    """Whole batches ready to send; the file log's is a FileRegion sent with sendfile."""

    size: int

    def read_bytes(self) -> bytes: ...


class AppendInfo(Protocol):
    first_offset: int
    last_offset: int


@runtime_checkable
class ReplicaLog(Protocol):
    topic: str
    partition: int

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int, *,
                         from_coordinator: bool = False) -> AppendInfo | None:
        """Validates a producer's batches, assigns offsets from the LEO and ``leader_epoch``; a coordinator's
        transaction markers (``from_coordinator``) skip the client rules, which refuse control batches."""

    def check_online(self) -> None:
        """Raises KafkaStorageError if the log's directory is offline (nothing is appended or judged there)."""

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo | None:
        """Stores the leader's batches as they are, at or above the LEO."""

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> LogRegion: ...

    def truncate_to(self, target_offset: int) -> bool:
        """Drops every batch holding an offset >= ``target_offset``; whether anything went."""

    def truncate_fully_and_start_at(self, new_offset: int) -> None: ...

    def maybe_assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None: ...

    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool: ...

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetsForLeaderEpoch answers (KIP-279)."""

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction not yet decided and replicated (None: none); the LSO is
        this offset when it is below the high watermark, else the high watermark."""

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, upper bound), from the ``.txnindex`` files."""

    def producer_batches(self) -> Iterable[tuple[BatchHeader, int | None]]:
        """Every stored batch's header, oldest first, with the coordinator epoch of an end-transaction marker (None
        for any other batch): what producers' state is rebuilt from."""
