"""Offset expiry (KIP-211, Kafka 2.8's removeExpiredOffsets and cleanupGroupMetadata), driven directly with an
injected clock: which offsets of which groups expire, from which base time, the tombstones written, and the
group that becomes Dead once Empty without offsets."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.group import records as rec
from broker.group.coordinator import GroupCoordinator
from broker.group.metadata import GroupState, OffsetAndMetadata
from tests.groups.test_coordinator_rules import GROUP, INITIAL_DELAY_MS, Harness, Store
from tests.groups.test_group_deletion import stable_consumer, tombstones

RETENTION_MS = 60_000  # offsets.retention.minutes=1, the smallest Kafka accepts
ORDERS, AUDIT = ("orders", 0), ("audit", 0)


def offset(h: Harness, value: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(value, commit_timestamp=h.now)


def expire(h: Harness) -> int:
    return h.coordinator.cleanup_group_metadata(RETENTION_MS)


def test_an_empty_groups_offsets_expire_retention_after_it_became_empty_not_after_the_commit():
    h = Harness()
    member, generation = stable_consumer(h, "orders")
    # the commit is old, but the group has a member subscribed to the topic: nothing expires
    h.commit(member, generation, {ORDERS: OffsetAndMetadata(5, commit_timestamp=h.now - 2 * RETENTION_MS)})
    assert expire(h) == 0 and h.group.offsets[ORDERS].offset == 5
    h.coordinator.handle_leave_group(GROUP, [member])
    h.advance(INITIAL_DELAY_MS)
    assert h.group.state is GroupState.EMPTY
    emptied_at = h.group.state_timestamp_ms
    h.advance(RETENTION_MS - 1 - (h.now - emptied_at))
    assert expire(h) == 0 and GROUP in h.coordinator.groups
    before = len(h.store.entries)
    h.advance(1)
    assert expire(h) == 1
    assert tombstones(h.store, before) == [rec.OffsetKey(GROUP, *ORDERS), rec.GroupKey(GROUP)]
    assert GROUP not in h.coordinator.groups and h.changes[-1] == ("Empty", "Dead")
    assert h.coordinator.handle_fetch_offsets(GROUP, [ORDERS]) == (ErrorCode.none, {ORDERS: None})
    # a coordinator replaying the partition afterwards finds nothing either
    reloaded = GroupCoordinator(2, h.coordinator.config, Store().append, lambda: h.now)
    assert reloaded.load_partition(h.coordinator.partition_of(GROUP), [(k, v) for _, k, v in h.store.entries]) == 0


def test_a_stable_consumer_group_keeps_the_offsets_of_its_topics_and_loses_the_others_by_commit_time():
    h = Harness()
    member, generation = stable_consumer(h, "orders")
    old = h.now - RETENTION_MS
    h.commit(member, generation, {ORDERS: OffsetAndMetadata(5, commit_timestamp=old - 10),
                                  AUDIT: OffsetAndMetadata(7, commit_timestamp=old + 1)})
    assert expire(h) == 0
    h.advance(1)
    before = len(h.store.entries)
    assert expire(h) == 1
    assert tombstones(h.store, before) == [rec.OffsetKey(GROUP, *AUDIT)]
    assert set(h.group.offsets) == {ORDERS} and h.group.state is GroupState.STABLE


def test_a_group_rebalancing_or_of_another_protocol_keeps_its_offsets():
    h = Harness()
    member, generation = stable_consumer(h, "orders")
    h.commit(member, generation, {AUDIT: OffsetAndMetadata(7, commit_timestamp=h.now - 2 * RETENTION_MS)})
    h.join(member)  # the leader rejoins: a rebalance, the group is no longer Stable
    assert h.group.state is GroupState.COMPLETING_REBALANCE and expire(h) == 0

    other = Harness()
    member, joined = other.new_member([("range", b"not a consumer subscription")])
    other.group.protocol_type = "connect"
    other.advance(INITIAL_DELAY_MS)
    other.sync(member, joined[0].generation_id, {member: b"A"})
    other.commit(member, joined[0].generation_id, {AUDIT: OffsetAndMetadata(7, commit_timestamp=0)})
    assert other.group.state is GroupState.STABLE and expire(other) == 0 and AUDIT in other.group.offsets


def test_a_standalone_groups_offsets_expire_one_by_one_by_commit_time():
    h = Harness()
    h.commit("", -1, {ORDERS: offset(h, 1)})
    h.advance(RETENTION_MS // 2)
    h.commit("", -1, {AUDIT: offset(h, 2)})
    h.advance(RETENTION_MS // 2)
    before = len(h.store.entries)
    assert expire(h) == 1 and set(h.group.offsets) == {AUDIT}
    h.advance(RETENTION_MS // 2)
    assert expire(h) == 1 and GROUP not in h.coordinator.groups
    # generation 0: the group never wrote a record, so only the offsets get tombstones
    assert tombstones(h.store, before) == [rec.OffsetKey(GROUP, *ORDERS), rec.OffsetKey(GROUP, *AUDIT)]


def test_an_offset_whose_commit_is_not_yet_replicated_does_not_expire():
    h = Harness()
    h.commit("", -1, {ORDERS: offset(h, 1)})
    h.advance(RETENTION_MS)
    h.store.hold = True
    answers = h.commit("", -1, {ORDERS: OffsetAndMetadata(2, commit_timestamp=h.now - RETENTION_MS)})
    assert expire(h) == 0 and h.group.offsets[ORDERS].offset == 1
    h.store.release()
    assert answers == [{ORDERS: ErrorCode.none}] and h.group.pending_offset_commits == {}
    assert expire(h) == 1


def test_a_new_coordinator_counts_from_when_the_group_became_empty():
    h = Harness()
    member, generation = stable_consumer(h, "orders")
    h.commit(member, generation, {ORDERS: offset(h, 5)})
    h.coordinator.handle_leave_group(GROUP, [member])
    h.advance(INITIAL_DELAY_MS)
    emptied_at = h.group.state_timestamp_ms
    stored = rec.decode_group_value(h.store.entries[-1][2])
    assert stored.current_state_timestamp == emptied_at and stored.members == ()
    h.advance(RETENTION_MS // 2)
    reloaded = GroupCoordinator(2, h.coordinator.config, Store().append, lambda: h.now)
    reloaded.load_partition(h.coordinator.partition_of(GROUP), [(k, v) for _, k, v in h.store.entries])
    group = reloaded.groups[GROUP]
    assert group.state is GroupState.EMPTY and group.state_timestamp_ms == emptied_at
    assert reloaded.cleanup_group_metadata(RETENTION_MS) == 0
    h.advance(RETENTION_MS // 2)
    assert reloaded.cleanup_group_metadata(RETENTION_MS) == 1 and GROUP not in reloaded.groups


def test_an_empty_group_without_offsets_becomes_dead_at_the_next_check():
    h = Harness()
    member, _generation = stable_consumer(h, "orders")
    h.coordinator.handle_leave_group(GROUP, [member])
    h.advance(INITIAL_DELAY_MS)
    before = len(h.store.entries)
    assert expire(h) == 0 and GROUP not in h.coordinator.groups
    assert tombstones(h.store, before) == [rec.GroupKey(GROUP)]


def test_a_legacy_commit_with_its_own_retention_expires_at_its_expire_timestamp_and_is_stored_as_value_v1():
    h = Harness()
    h.commit("", -1, {ORDERS: OffsetAndMetadata(1, commit_timestamp=h.now, expire_timestamp=h.now + 1_000),
                      AUDIT: offset(h, 2)})
    value = rec.decode_offset_value(next(v for _, k, v in h.store.entries
                                         if rec.decode_key(k) == rec.OffsetKey(GROUP, *ORDERS)))
    assert value.expire_timestamp == h.now + 1_000 and value.leader_epoch == -1
    reloaded = GroupCoordinator(2, h.coordinator.config, Store().append, lambda: h.now)
    reloaded.load_partition(h.coordinator.partition_of(GROUP), [(k, v) for _, k, v in h.store.entries])
    assert reloaded.groups[GROUP].offsets[ORDERS].expire_timestamp == h.now + 1_000
    h.advance(999)
    assert expire(h) == 0
    h.advance(1)
    assert expire(h) == 1 and set(h.group.offsets) == {AUDIT}  # the other one waits for the broker's retention


def test_every_offset_commit_value_version_is_read():
    v0_or_v2 = b"\x00\x00" + (7).to_bytes(8, "big") + b"\x00\x02md" + (123).to_bytes(8, "big")
    assert rec.decode_offset_value(v0_or_v2) == rec.OffsetValue(7, -1, "md", 123)
    assert rec.decode_offset_value(b"\x00\x02" + v0_or_v2[2:]) == rec.OffsetValue(7, -1, "md", 123)
    v1 = rec.encode_offset_value(rec.OffsetValue(7, -1, "md", 123, 456))
    assert v1[:2] == b"\x00\x01" and rec.decode_offset_value(v1) == rec.OffsetValue(7, -1, "md", 123, 456)
    v3 = rec.encode_offset_value(rec.OffsetValue(7, 4, "md", 123))
    assert v3[:2] == b"\x00\x03" and rec.decode_offset_value(v3) == rec.OffsetValue(7, 4, "md", 123)
