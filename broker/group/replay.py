"""Replaying a __consumer_offsets partition into groups, offsets and pending transactional offsets, as Kafka 2.8's
GroupMetadataManager.doLoadGroupsAndOffsets does. Pure: the manager reads the log and feeds the records in log order.

Records outside transactions: a later one wins, a tombstone deletes. Offset records inside a transactional batch
(TxnOffsetCommit) stay pending for their producer until its marker: COMMIT applies them where they are newer in the
log than the commit already there, ABORT drops them. Those still pending at the end are kept pending by the group,
to be completed by a marker written later."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.group import records as rec
from broker.group.metadata import OffsetAndMetadata

TopicPartition = tuple[str, int]
GroupOffsets = dict[str, dict[TopicPartition, OffsetAndMetadata]]


@dataclass(frozen=True, slots=True)
class LoggedRecord:
    """One data record of the partition, with what loading needs of its batch."""

    key: bytes
    value: bytes | None  # None: a tombstone
    batch_offset: int = -1  # the base offset of its batch (Kafka's appendedBatchOffset), -1: unknown
    producer_id: int = -1
    transactional: bool = False


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A COMMIT or ABORT control record of a producer (control records of other types are skipped)."""

    producer_id: int
    committed: bool


@dataclass
class PartitionReplay:
    offsets: GroupOffsets = field(default_factory=dict)
    groups: dict[str, rec.GroupValue | None] = field(default_factory=dict)
    # producer id -> group -> pending offsets
    pending: dict[int, GroupOffsets] = field(default_factory=dict)

    def apply(self, item: LoggedRecord | TxnMarker | tuple[bytes, bytes | None]) -> None:
        """``item``: a record, a marker, or a bare (key, value) of a record outside any transaction."""
        if isinstance(item, TxnMarker):
            self._complete(item)
            return
        if not isinstance(item, LoggedRecord):
            item = LoggedRecord(*item)
        key = rec.decode_key(item.key)
        if isinstance(key, rec.GroupKey):
            self.groups[key.group_id] = None if item.value is None else rec.decode_group_value(item.value)
            return
        if item.transactional and item.producer_id >= 0:
            target = self.pending.setdefault(item.producer_id, {}).setdefault(key.group_id, {})
        else:
            target = self.offsets.setdefault(key.group_id, {})
        tp = (key.topic, key.partition)
        if item.value is None:
            target.pop(tp, None)
            return
        value = rec.decode_offset_value(item.value)
        target[tp] = OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
                                       value.expire_timestamp, log_offset=item.batch_offset)

    def _complete(self, marker: TxnMarker) -> None:
        pending = self.pending.pop(marker.producer_id, {})
        if not marker.committed:
            return
        for group_id, values in pending.items():
            current = self.offsets.setdefault(group_id, {})
            for tp, value in values.items():
                if tp not in current or current[tp].older_than(value):
                    current[tp] = value

    def group_ids(self) -> set[str]:
        """Groups that exist after the replay: with offsets, pending offsets or a live group record. A group whose
        offsets and record were all tombstoned (DeleteGroups, OffsetDelete) stays gone."""
        ids = {g for g, offsets in self.offsets.items() if offsets}
        ids |= {g for g, value in self.groups.items() if value is not None}
        ids |= {g for by_group in self.pending.values() for g, offsets in by_group.items() if offsets}
        return ids

    def pending_of(self, group_id: str) -> dict[int, dict[TopicPartition, OffsetAndMetadata]]:
        return {producer_id: dict(by_group[group_id]) for producer_id, by_group in self.pending.items()
                if by_group.get(group_id)}
