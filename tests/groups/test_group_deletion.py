"""DeleteGroups and OffsetDelete at the coordinator, driven directly: which groups and offsets may go (Kafka's
handleDeleteGroups and handleDeleteOffsets), the tombstones written to __consumer_offsets, and what a coordinator
replaying those records finds afterwards."""

from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode

from broker.group import records as rec
from broker.group.consumer_protocol import subscribed_topics
from broker.group.coordinator import GroupCoordinator
from broker.group.metadata import GroupState, OffsetAndMetadata
from tests.groups.test_coordinator_rules import GROUP, INITIAL_DELAY_MS, T0, Harness, Store

ORDERS, AUDIT = ("orders", 0), ("audit", 0)


def subscription(*topics: str, version: int = 1) -> bytes:
    """A consumer protocol Subscription as clients send it: version, topics, user data, owned partitions (v1)."""
    out = struct.pack(">hi", version, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", -1)  # no user data
    if version >= 1:
        out += struct.pack(">i", 0)  # no owned partitions
    return out


def stable_consumer(h: Harness, *topics: str) -> tuple[str, int]:
    member, joined = h.new_member([("range", subscription(*topics))])
    h.advance(INITIAL_DELAY_MS)
    generation = joined[0].generation_id
    h.sync(member, generation, {member: b"A"})
    assert h.group.state is GroupState.STABLE
    return member, generation


def empty_group_with_offsets(h: Harness) -> None:
    member, generation = stable_consumer(h, "orders")
    h.commit(member, generation, {ORDERS: OffsetAndMetadata(5), AUDIT: OffsetAndMetadata(7)})
    h.coordinator.handle_leave_group(GROUP, [member])
    h.advance(INITIAL_DELAY_MS)
    assert h.group.state is GroupState.EMPTY


def tombstones(store: Store, since: int) -> list:
    return [rec.decode_key(key) for _, key, value in store.entries[since:] if value is None]


def test_the_subscribed_topics_are_read_from_every_subscription_version():
    for version in (0, 1, 3):
        assert subscribed_topics(subscription("a", "bb", version=version)) == ["a", "bb"]


def test_a_group_with_members_is_not_deleted():
    h = Harness()
    stable_consumer(h, "orders")
    assert h.coordinator.handle_delete_groups([GROUP]) == {GROUP: ErrorCode.non_empty_group}
    assert h.group.state is GroupState.STABLE


def test_an_empty_group_is_deleted_with_tombstones_for_its_offsets_and_its_record():
    h = Harness()
    empty_group_with_offsets(h)
    before = len(h.store.entries)
    assert h.coordinator.handle_delete_groups([GROUP, GROUP]) == {GROUP: ErrorCode.none}
    assert GROUP not in h.coordinator.groups and h.changes[-1] == ("Empty", "Dead")
    assert set(tombstones(h.store, before)) == {rec.OffsetKey(GROUP, *ORDERS), rec.OffsetKey(GROUP, *AUDIT),
                                                rec.GroupKey(GROUP)}
    assert h.coordinator.handle_fetch_offsets(GROUP, [ORDERS]) == (ErrorCode.none, {ORDERS: None})
    # a coordinator replaying the partition after the deletion finds nothing
    reloaded = GroupCoordinator(2, h.coordinator.config, Store().append, lambda: T0)
    assert reloaded.load_partition(h.coordinator.partition_of(GROUP), [(k, v) for _, k, v in h.store.entries]) == 0


def test_unknown_groups_and_groups_of_other_coordinators_are_named_so():
    h = Harness()
    other = next(g for g in (f"g{i}" for i in range(100))
                 if h.coordinator.partition_of(g) != h.coordinator.partition_of(GROUP))
    assert h.coordinator.handle_delete_groups([GROUP, other, ""]) == {
        GROUP: ErrorCode.group_id_not_found, other: ErrorCode.not_coordinator, "": ErrorCode.invalid_group_id}


def test_offsets_of_a_topic_the_active_consumers_subscribe_to_are_kept():
    h = Harness()
    member, generation = stable_consumer(h, "orders")
    h.commit(member, generation, {ORDERS: OffsetAndMetadata(5), AUDIT: OffsetAndMetadata(7)})
    before = len(h.store.entries)
    assert h.coordinator.handle_delete_offsets(GROUP, [ORDERS, AUDIT]) == (
        ErrorCode.none, {ORDERS: ErrorCode.group_subscribed_to_topic, AUDIT: ErrorCode.none})
    assert set(h.group.offsets) == {ORDERS}
    assert tombstones(h.store, before) == [rec.OffsetKey(GROUP, *AUDIT)]


def test_an_active_group_of_another_protocol_keeps_all_its_offsets():
    h = Harness()
    member, joined = h.new_member()
    h.advance(INITIAL_DELAY_MS)
    assert h.group.protocol_type == "consumer"
    h.group.protocol_type = "connect"  # a Kafka Connect worker group: no consumer subscriptions to read
    assert h.coordinator.handle_delete_offsets(GROUP, [ORDERS]) == (ErrorCode.non_empty_group, {})
    assert joined[0].member_id == member


def test_deleting_the_last_offsets_of_an_empty_group_removes_the_group():
    h = Harness()
    empty_group_with_offsets(h)
    assert h.coordinator.handle_delete_offsets(GROUP, [ORDERS]) == (ErrorCode.none, {ORDERS: ErrorCode.none})
    assert h.group.offsets.keys() == {AUDIT}
    before = len(h.store.entries)
    assert h.coordinator.handle_delete_offsets(GROUP, [AUDIT]) == (ErrorCode.none, {AUDIT: ErrorCode.none})
    assert GROUP not in h.coordinator.groups
    assert set(tombstones(h.store, before)) == {rec.OffsetKey(GROUP, *AUDIT), rec.GroupKey(GROUP)}
    assert h.coordinator.handle_delete_offsets(GROUP, [AUDIT]) == (ErrorCode.group_id_not_found, {})


def test_a_consumer_group_whose_subscriptions_cannot_be_read_keeps_every_offset_while_active():
    h = Harness()
    member, joined = h.new_member([("range", b"not a subscription")])
    h.advance(INITIAL_DELAY_MS)
    h.sync(member, joined[0].generation_id, {member: b"A"})
    h.commit(member, joined[0].generation_id, {AUDIT: OffsetAndMetadata(7)})
    assert h.group.subscribed_topics is None  # unknown: Kafka treats every topic as subscribed
    assert h.coordinator.handle_delete_offsets(GROUP, [AUDIT]) == (
        ErrorCode.none, {AUDIT: ErrorCode.group_subscribed_to_topic})


def test_a_loaded_group_knows_its_subscriptions():
    old = Harness()
    member, generation = stable_consumer(old, "orders")
    old.commit(member, generation, {ORDERS: OffsetAndMetadata(5), AUDIT: OffsetAndMetadata(7)})
    new = GroupCoordinator(2, old.coordinator.config, Store().append, lambda: T0)
    new.load_partition(old.coordinator.partition_of(GROUP), [(k, v) for _, k, v in old.store.entries])
    assert new.groups[GROUP].subscribed_topics == {"orders"}
    assert new.handle_delete_offsets(GROUP, [ORDERS, AUDIT]) == (
        ErrorCode.none, {ORDERS: ErrorCode.group_subscribed_to_topic, AUDIT: ErrorCode.none})
