"""An in-memory ReplicaLog: batches in a list, the same batch checks and epoch cache as the file log.

Partition's rule tests run against it and against the file-backed Log, so a rule that only holds
because of something the files do shows up as a difference between the two.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from broker.log.errors import OffsetOutOfRangeError, UnexpectedAppendOffsetError
from broker.log.leader_epoch_cache import LeaderEpochFileCache
from broker.log.record_batch import (
    BatchHeader,
    assign_offset_and_epoch,
    check_client_batch,
    parse_header,
    split_record_set,
)

ANY_TIME_MS = 1 << 62  # the in-memory log has no clock: every producer timestamp is accepted


@dataclass
class MemoryAppendInfo:
    first_offset: int
    last_offset: int
    log_start_offset: int


@dataclass
class MemoryRegion:
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    def read_bytes(self) -> bytes:
        return self.data


class InMemoryLog:
    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self._batches: list[tuple[BatchHeader, bytes]] = []
        self._log_start_offset = 0
        self._log_end_offset = 0
        self.leader_epoch_cache = LeaderEpochFileCache(None, lambda: self._log_end_offset)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int, *,
                         from_coordinator: bool = False) -> MemoryAppendInfo | None:
        batches = split_record_set(records, max_message_bytes=None)
        if not batches:
            return None
        for _, header in batches:
            check_client_batch(header, log_append_time=False, now_ms=ANY_TIME_MS,
                               timestamp_difference_max_ms=ANY_TIME_MS)
        data = bytearray(records)
        next_offset = self._log_end_offset
        for position, header in batches:
            assign_offset_and_epoch(data, position, next_offset, leader_epoch)
            next_offset += header.last_offset_delta + 1
        return self._store(data, [position for position, _ in batches])

    def check_online(self) -> None:
        pass  # memory never fails

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> MemoryAppendInfo | None:
        batches = split_record_set(records, max_message_bytes=None)
        if not batches:
            return None
        if batches[0][1].base_offset < self._log_end_offset:
            raise UnexpectedAppendOffsetError(batches[0][1].base_offset, self._log_end_offset)
        return self._store(bytes(records), [position for position, _ in batches])

    def _store(self, data: bytes | bytearray, positions: list[int]) -> MemoryAppendInfo:
        stored = []
        for position in positions:
            header = parse_header(data, position)
            stored.append((header, bytes(data[position:position + header.size])))
        self._batches += stored
        self._log_end_offset = stored[-1][0].last_offset + 1
        for header, _ in stored:
            if header.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        return MemoryAppendInfo(stored[0][0].base_offset, stored[-1][0].last_offset, self._log_start_offset)

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> MemoryRegion:
        if not self._log_start_offset <= start_offset <= self._log_end_offset:
            raise OffsetOutOfRangeError(f"offset {start_offset} is outside "
                                        f"[{self._log_start_offset}, {self._log_end_offset}]")
        bound = self._log_end_offset if max_offset is None else min(max_offset, self._log_end_offset)
        chunks, size = [], 0
        for header, data in self._batches:
            if header.last_offset < start_offset:
                continue
            if header.last_offset >= bound or (size + len(data) > max_bytes and (chunks or not min_one_message)):
                break
            chunks.append(data)
            size += len(data)
        return MemoryRegion(b"".join(chunks))

    def truncate_to(self, target_offset: int) -> bool:
        if target_offset >= self._log_end_offset:
            return False
        self._batches = [(h, d) for h, d in self._batches if h.last_offset < target_offset]
        self._log_end_offset = self._batches[-1][0].last_offset + 1 if self._batches else target_offset
        self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
        return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        self._batches = []
        self._log_start_offset = self._log_end_offset = new_offset
        self.leader_epoch_cache.clear_and_flush()

    def maybe_assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        self.leader_epoch_cache.assign(leader_epoch, start_offset)

    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool:
        if new_log_start_offset > self._log_end_offset:
            raise OffsetOutOfRangeError(f"log start {new_log_start_offset} is beyond the LEO {self._log_end_offset}")
        if new_log_start_offset <= self._log_start_offset:
            return False
        self._log_start_offset = new_log_start_offset
        self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
        return True

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        return self.leader_epoch_cache.end_offset_for(leader_epoch)

    def producer_batches(self) -> Iterator[tuple[BatchHeader, int | None]]:
        return iter([(header, None) for header, _ in self._batches])  # no transactions modelled here

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        return None  # the in-memory log models no transactions

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list:
        return []
