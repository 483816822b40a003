"""GroupCoordinator (Kafka's GroupCoordinator, classic protocol): JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit and OffsetFetch against the groups of the __consumer_offsets partitions this broker
leads. Pure: the clock is injected, delayed joins and heartbeat expiries sit in purgatories driven by whoever
owns them, and storing a group or offsets goes through an injected ``append`` that answers later."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.group import records as rec
from broker.group.metadata import (
    GroupMetadata,
    GroupState,
    JoinResult,
    MemberMetadata,
    OffsetAndMetadata,
)
from broker.group.replay import LoggedRecord, PartitionReplay, TxnMarker
from broker.purgatory.delayed_operation import DelayedOperation
from broker.purgatory.purgatory import DelayedOperationPurgatory, GroupKey

Entry = tuple[bytes, bytes | None]  # one __consumer_offsets record: key, value (None = tombstone)
# append(partition, entries, done, producer): done(error, base offset of the batch or -1); ``producer`` (id,
# epoch) makes the batch transactional (TxnOffsetCommit)
AppendFunction = Callable[..., None]
StateListener = Callable[[GroupMetadata, str, str], None]
TopicPartition = tuple[str, int]
NO_GENERATION = -1
NO_MEMBER = ""


@dataclass(frozen=True)
class GroupConfig:
    offsets_topic_partitions: int = 50
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    offset_metadata_max_bytes: int = 4096
    # inter.broker.protocol.version >= 2.3: below, a request with a group.instance.id is UNSUPPORTED_VERSION
    # (Kafka's KafkaApis: an older coordinator would drop the instance ids when loading the group)
    static_membership: bool = True


@dataclass(frozen=True, slots=True)
class MemberKey:
    """Watch key of a member's heartbeat expiry (Kafka's MemberKey)."""

    group_id: str
    member_id: str


def java_string_hash(value: str) -> int:
    """String.hashCode over UTF-16 code units, as a signed 32-bit int: the partition of a group must be
    the one Kafka would choose, so tools that compute it agree."""
    result = 0
    data = value.encode("utf-16-be")
    for i in range(0, len(data), 2):
        result = (31 * result + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return result - (1 << 32) if result >= 1 << 31 else result


def partition_for(group_id: str, partitions: int) -> int:
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions


def map_store_error(error: ErrorCode) -> ErrorCode:
    """What a client sees when writing offsets to __consumer_offsets failed (Kafka 2.8's
    GroupMetadataManager.storeOffsets). A write that timed out stays REQUEST_TIMED_OUT: a leader whose high watermark
    cannot advance (its followers fetch from a leader elected without it) answers that, after
    offsets.commit.timeout.ms, and nothing else (docs/zombie-coordinator.md)."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                 ErrorCode.not_enough_replicas_after_append):
        return ErrorCode.coordinator_not_available
    # FENCED_LEADER_EPOCH: kafkasim's own append path only (Kafka's coordinator names no epoch); the leader moved
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error, ErrorCode.fenced_leader_epoch):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.invalid_commit_offset_size
    return error


def map_store_group_error(error: ErrorCode) -> ErrorCode:
    """What SyncGroup's members see when writing the group's assignment failed (Kafka 2.8's
    GroupMetadataManager.storeGroup): as for offsets, except that a timed-out write asks them to rejoin
    (REBALANCE_IN_PROGRESS) and a record too large is an unknown server error."""
    if error == ErrorCode.request_timed_out:
        return ErrorCode.rebalance_in_progress
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return map_store_error(error)


class DelayedJoin(DelayedOperation):
    """Waits until every known member has rejoined, or the rebalance timeout (Kafka's DelayedJoin)."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.coordinator, self.group = coordinator, group

    def try_complete(self) -> bool:
        if self.group.has_all_members_joined:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an empty group waits group.initial.rebalance.delay.ms, again while new members
    keep arriving, up to the rebalance timeout, so a starting fleet of consumers lands in one generation."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, delay_ms: int,
                 remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        group, delay = self.group, self.coordinator.config.initial_rebalance_delay_ms
        if group.new_member_added and self.remaining_ms > 0 and group.is_(GroupState.PREPARING_REBALANCE):
            group.new_member_added = False
            next_delay = min(delay, self.remaining_ms)
            self.coordinator.join_purgatory.try_complete_else_watch(
                InitialDelayedJoin(self.coordinator, group, next_delay, self.remaining_ms - next_delay),
                [GroupKey(group.group_id)], self.coordinator.now_ms)
        else:
            self.coordinator.on_complete_join(group)


class DelayedHeartbeat(DelayedOperation):
    """Expires a member that neither heartbeated nor waits in a join or sync within its session timeout."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, member: MemberMetadata) -> None:
        super().__init__(member.session_timeout_ms)
        self.coordinator, self.group, self.member = coordinator, group, member
        self.member_id = member.member_id  # a static member's rejoin renames it: this expiry is then moot

    def try_complete(self) -> bool:
        if self.member.heartbeat_satisfied:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        if self.member.awaiting_join or self.member.awaiting_sync or self.member.member_id != self.member_id:
            return  # Kafka keeps a member alive while its JoinGroup or SyncGroup is parked
        self.coordinator.expire_member(self.group, self.member)


class DelayedPendingMember(DelayedOperation):
    """A member that was given an id (MEMBER_ID_REQUIRED) but never came back with it."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, member_id: str, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.coordinator, self.group, self.member_id = coordinator, group, member_id

    def try_complete(self) -> bool:
        if self.member_id not in self.group.pending_members:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        if self.member_id in self.group.pending_members:
            self.group.pending_members.discard(self.member_id)
            self.coordinator.join_purgatory.check_and_complete(GroupKey(self.group.group_id))


class GroupCoordinator:
    def __init__(self, broker_id: int, config: GroupConfig, append: AppendFunction, clock: Callable[[], int],
                 on_state_change: StateListener | None = None,
                 heartbeat_purgatory: DelayedOperationPurgatory | None = None,
                 join_purgatory: DelayedOperationPurgatory | None = None,
                 wall_clock_ms: Callable[[], int] | None = None) -> None:
        self.broker_id = broker_id
        self.config = config
        self.append = append
        self.on_state_change = on_state_change or (lambda group, old, reason: None)
        self.heartbeat_purgatory = heartbeat_purgatory or DelayedOperationPurgatory("Heartbeat")
        self.join_purgatory = join_purgatory or DelayedOperationPurgatory("Rebalance")
        self.groups: dict[str, GroupMetadata] = {}
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        self._clock = clock
        # state timestamps and offset expiry use wall-clock time, as the commit timestamps do (the injected
        # clock when none is given, so a test drives both with one)
        self._wall_clock_ms = wall_clock_ms or clock

    @property
    def wall_now_ms(self) -> int:
        return self._wall_clock_ms()

    @property
    def now_ms(self) -> int:
        # read at every use: expiries run between requests, and a deadline from a stale "now" would be early
        return self._clock()

    # --- ownership ----------------------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_partitions)

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        partition = self.partition_of(group_id)
        if partition in self.loading_partitions:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self.owned_partitions:
            return ErrorCode.not_coordinator
        return None

    def begin_loading(self, partition: int) -> None:
        self.loading_partitions.add(partition)

    def load_partition(self, partition: int, entries: Iterable[Entry | LoggedRecord | TxnMarker]) -> int:
        """Replay the partition's records (broker/group/replay.py); then this broker coordinates its groups.
        Returns how many groups were loaded."""
        replay = PartitionReplay()
        for entry in entries:
            replay.apply(entry)
        loaded = 0
        for group_id in sorted(replay.group_ids()):
            if self.partition_of(group_id) != partition:
                continue
            group = self._restore(group_id, replay.groups.get(group_id), replay.offsets.get(group_id, {}))
            group.pending_txn_offsets = replay.pending_of(group_id)
            self.groups[group_id] = group
            loaded += 1
        self.loading_partitions.discard(partition)
        self.owned_partitions.add(partition)
        return loaded

    def _restore(self, group_id: str, value: rec.GroupValue | None,
                 offsets: dict[TopicPartition, OffsetAndMetadata]) -> GroupMetadata:
        group = GroupMetadata(group_id, offsets=offsets, state_timestamp_ms=self.wall_now_ms)
        if value is None:
            return group
        group.state_timestamp_ms = value.current_state_timestamp
        group.protocol_type = value.protocol_type or None
        group.generation_id = value.generation_id
        group.protocol_name = value.protocol_name
        group.leader_id = value.leader_id
        for m in value.members:
            protocols = [(value.protocol_name or "", m.subscription)]
            group.members[m.member_id] = MemberMetadata(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, value.protocol_type, protocols, assignment=m.assignment)
        if group.members:
            # Kafka loads a group with members as Stable; members that are gone expire after their session.
            group.state = GroupState.STABLE
            group.subscribed_topics = group.compute_subscribed_topics()
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
        self.on_state_change(group, GroupState.DEAD.value, "loaded from __consumer_offsets")
        return group

    def unload_partition(self, partition: int) -> int:
        """Leadership of the partition moved away: its groups are answered NOT_COORDINATOR from now on."""
        self.owned_partitions.discard(partition)
        self.loading_partitions.discard(partition)
        gone = [g for g in self.groups.values() if self.partition_of(g.group_id) == partition]
        for group in gone:
            for member in group.members.values():
                self._answer_pending(member, ErrorCode.not_coordinator)
                self.heartbeat_purgatory.cancel_for_key(MemberKey(group.group_id, member.member_id))
            self.join_purgatory.cancel_for_key(GroupKey(group.group_id))
            self._transition(group, GroupState.DEAD, "coordinator moved")
            del self.groups[group.group_id]
        return len(gone)

    # --- JoinGroup ----------------------------------------------------------------------------------

    def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                          require_known_member_id: bool, client_id: str, client_host: str,
                          rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                          protocols: list[tuple[str, bytes]], callback: Callable[[JoinResult], None]) -> None:
        if group_instance_id is not None and not self.config.static_membership:
            callback(JoinResult(ErrorCode.unsupported_version, NO_MEMBER))
            return
        if not group_id:
            callback(JoinResult(ErrorCode.invalid_group_id, member_id))
            return
        error = self.coordinator_error(group_id)
        if error is not None:
            callback(JoinResult(error, member_id))
            return
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            callback(JoinResult(ErrorCode.invalid_session_timeout, member_id))
            return
        group = self.groups.get(group_id)
        if group is None:
            if member_id != NO_MEMBER:
                callback(JoinResult(ErrorCode.unknown_member_id, member_id))
                return
            group = self.groups[group_id] = GroupMetadata(group_id, state_timestamp_ms=self.wall_now_ms)
        if group.is_(GroupState.DEAD):
            # another request just removed the group (its partition moved): the client finds the coordinator
            callback(JoinResult(ErrorCode.coordinator_not_available, member_id))
            return
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            callback(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
            return
        # v0 has no rebalance timeout: Kafka uses the session timeout
        rebalance_timeout_ms = rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms
        if member_id == NO_MEMBER:
            # KIP-345: a static member's id starts with its group.instance.id
            new_id = f"{client_id if group_instance_id is None else group_instance_id}-{uuid.uuid4()}"
            old_id = group.static_member_id(group_instance_id)
            if old_id is not None:
                # a static member restarted: it takes its old place (and assignment) under the new id
                self._update_static_member_and_rebalance(group, old_id, new_id, protocols, callback)
            elif require_known_member_id and group_instance_id is None:
                # KIP-394: the member must come back with this id, so a lost response leaves no ghost member
                group.pending_members.add(new_id)
                self.heartbeat_purgatory.try_complete_else_watch(
                    DelayedPendingMember(self, group, new_id, session_timeout_ms),
                    [MemberKey(group_id, new_id)], self.now_ms)
                callback(JoinResult(ErrorCode.member_id_required, new_id))
                return
            else:
                self._add_member_and_rebalance(group, new_id, group_instance_id, client_id, client_host,
                                               rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                               callback)
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.heartbeat_purgatory.check_and_complete(MemberKey(group_id, member_id))
            self._add_member_and_rebalance(group, member_id, group_instance_id, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                           callback)
        elif group.is_static_member_fenced(member_id, group_instance_id):
            callback(JoinResult(ErrorCode.fenced_instance_id, member_id))
            return
        elif member_id not in group.members or (group_instance_id is not None
                                                and group.static_member_id(group_instance_id) is None):
            # an unknown member id, or a static member whose instance id the group does not know: it starts over
            callback(JoinResult(ErrorCode.unknown_member_id, member_id))
            return
        else:
            self._join_known_member(group, group.members[member_id], rebalance_timeout_ms, session_timeout_ms,
                                    protocols, callback)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.join_purgatory.check_and_complete(GroupKey(group_id))

    def _join_known_member(self, group: GroupMetadata, member: MemberMetadata, rebalance_timeout_ms: int,
                           session_timeout_ms: int, protocols: list[tuple[str, bytes]],
                           callback: Callable[[JoinResult], None]) -> None:
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, rebalance_timeout_ms, session_timeout_ms, protocols,
                                              callback)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # the member lost the JoinGroup answer: give it this generation again
                callback(self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, rebalance_timeout_ms, session_timeout_ms,
                                                  protocols, callback)
        elif group.is_(GroupState.STABLE):
            if group.is_leader(member.member_id) or not member.matches(protocols):
                # the leader rejoining means it wants a new assignment (e.g. its metadata changed)
                self._update_member_and_rebalance(group, member, rebalance_timeout_ms, session_timeout_ms,
                                                  protocols, callback)
            else:
                callback(JoinResult(ErrorCode.none, member.member_id, group.generation_id, group.protocol_name,
                                    group.leader_id or ""))
        else:
            callback(JoinResult(ErrorCode.unknown_member_id, member.member_id))

    def _update_static_member_and_rebalance(self, group: GroupMetadata, old_id: str, new_id: str,
                                            protocols: list[tuple[str, bytes]],
                                            callback: Callable[[JoinResult], None]) -> None:
        """Kafka's updateStaticMemberAndRebalance. A Stable group whose protocol would not change keeps its
        generation: the member is stored under its new id and answered with the current generation and the
        old leader id (so a rejoining leader does not assign again), and SyncGroup gives it its old assignment."""
        current_leader = group.leader_id or ""
        old = group.members[old_id]
        # an older incarnation still waiting in a JoinGroup or SyncGroup is fenced
        self._answer_pending(old, ErrorCode.fenced_instance_id)
        self.heartbeat_purgatory.cancel_for_key(MemberKey(group.group_id, old_id))
        member = group.replace_static_member(old_id, new_id)
        self._schedule_heartbeat(group, member)
        old_protocols, member.protocols, member.join_callback = member.protocols, protocols, callback
        reason = f"static member {new_id} (instance {member.group_instance_id}) rejoined"
        if group.is_(GroupState.STABLE):
            if group.select_protocol() != group.protocol_name:
                self._prepare_rebalance(group, f"{reason} with a change of protocol")
                return
            generation = group.generation_id

            def stored(error: ErrorCode) -> None:
                if group.generation_id != generation or not group.is_(GroupState.STABLE):
                    return  # a rebalance started meanwhile: it answers the member
                answer, member.join_callback = member.join_callback, None
                if error != ErrorCode.none:
                    # the new id could not be stored: the old incarnation keeps its place
                    member.protocols = old_protocols
                    if group.members.get(new_id) is member:
                        self.heartbeat_purgatory.cancel_for_key(MemberKey(group.group_id, new_id))
                        group.replace_static_member(new_id, old_id)
                        self._schedule_heartbeat(group, member)
                    if answer is not None:
                        answer(JoinResult(error, NO_MEMBER, generation, group.protocol_name, current_leader))
                elif answer is not None:
                    answer(JoinResult(ErrorCode.none, new_id, generation, group.protocol_name, current_leader))

            self._store_group(group, {m.member_id: m.assignment for m in group.members.values()}, stored)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            # the leader may be assigning to the old id: a new round gives everyone consistent assignments
            self._prepare_rebalance(group, reason)
        # PreparingRebalance: the member waits for the join like every other

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        members = group.member_list() if group.is_leader(member.member_id) else ()
        return JoinResult(ErrorCode.none, member.member_id, group.generation_id, group.protocol_name,
                          group.leader_id or "", members)

    def _add_member_and_rebalance(self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
                                  client_id: str, client_host: str, rebalance_timeout_ms: int,
                                  session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                                  callback: Callable[[JoinResult], None]) -> None:
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, protocols, is_new=True)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        self._maybe_prepare_rebalance(group, f"member {member_id} joined")

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata, rebalance_timeout_ms: int,
                                     session_timeout_ms: int, protocols: list[tuple[str, bytes]],
                                     callback: Callable[[JoinResult], None]) -> None:
        if member.join_callback is not None:
            # a repeated JoinGroup: the old request must still be answered, or its connection stalls
            member.join_callback(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_timeout_ms, session_timeout_ms
        member.protocols = protocols
        member.join_callback = callback
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        if group.is_(GroupState.EMPTY):
            delay = min(self.config.initial_rebalance_delay_ms, group.rebalance_timeout_ms)
            operation: DelayedJoin = InitialDelayedJoin(self, group, delay, group.rebalance_timeout_ms - delay)
        else:
            operation = DelayedJoin(self, group, group.rebalance_timeout_ms)
        self._transition(group, GroupState.PREPARING_REBALANCE, reason)
        self.join_purgatory.try_complete_else_watch(operation, [GroupKey(group.group_id)], self.now_ms)

    def on_complete_join(self, group: GroupMetadata) -> None:
        if group.is_(GroupState.DEAD) or group.group_id not in self.groups:
            return
        for member in group.not_yet_rejoined:
            if member.is_static:
                continue  # a static member leaves only by its session timeout or a LeaveGroup naming it
            # members that did not rejoin within the rebalance timeout leave the group
            self.heartbeat_purgatory.cancel_for_key(MemberKey(group.group_id, member.member_id))
            group.remove(member.member_id)
        old = group.state.value
        group.init_next_generation(self.wall_now_ms)
        self.on_state_change(group, old, f"generation {group.generation_id} formed")
        if group.is_(GroupState.EMPTY):
            self._store_group(group, {}, lambda error: None)
            return
        for member in list(group.members.values()):
            callback, member.join_callback = member.join_callback, None
            member.is_new = False
            if callback is not None:
                callback(self._join_result(group, member))
            self._schedule_heartbeat(group, member)

    # --- SyncGroup ----------------------------------------------------------------------------------

    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str,
                          assignments: dict[str, bytes], callback: Callable[[ErrorCode, bytes], None],
                          group_instance_id: str | None = None) -> None:
        if group_instance_id is not None and not self.config.static_membership:
            callback(ErrorCode.unsupported_version, b"")
            return
        error = self.coordinator_error(group_id) if group_id else ErrorCode.invalid_group_id
        group = self.groups.get(group_id)
        if error is None:
            if group is not None and group.is_(GroupState.DEAD):
                error = ErrorCode.coordinator_not_available
            elif group is not None and group.is_static_member_fenced(member_id, group_instance_id):
                error = ErrorCode.fenced_instance_id
            elif group is None or member_id not in group.members:
                error = ErrorCode.unknown_member_id
            elif generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
            elif group.is_(GroupState.EMPTY):
                error = ErrorCode.unknown_member_id
            elif group.is_(GroupState.PREPARING_REBALANCE):
                error = ErrorCode.rebalance_in_progress
        if error is not None:
            callback(error, b"")
            return
        assert group is not None
        member = group.members[member_id]
        if group.is_(GroupState.STABLE):
            callback(ErrorCode.none, member.assignment)
            return
        if member.sync_callback is not None:
            member.sync_callback(ErrorCode.rebalance_in_progress, b"")
        member.sync_callback = callback
        if not group.is_leader(member_id):
            return
        # Kafka does not look inside assignments (the assignor runs in the clients); members the leader
        # did not assign to get an empty one, assignments for unknown members are dropped.
        full = {m: assignments.get(m, b"") for m in group.members}
        generation = group.generation_id

        def stored(store_error: ErrorCode) -> None:
            if group.generation_id != generation or not group.is_(GroupState.COMPLETING_REBALANCE):
                return  # a newer rebalance already answered these members
            if store_error != ErrorCode.none:
                self._reset_and_propagate_assignment_error(group, store_error)
                self._maybe_prepare_rebalance(group, f"storing generation {generation} failed: {store_error.name}")
                return
            for m, assignment in full.items():
                if m in group.members:
                    group.members[m].assignment = assignment
            self._propagate_assignment(group, ErrorCode.none)
            self._transition(group, GroupState.STABLE, f"leader {member_id} sent the assignment")

        self._store_group(group, full, stored)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            callback, member.sync_callback = member.sync_callback, None
            if callback is not None:
                callback(error, member.assignment)
                self._schedule_heartbeat(group, member)

    # --- Heartbeat and LeaveGroup -------------------------------------------------------------------

    def handle_heartbeat(self, group_id: str, member_id: str, generation_id: int,
                         group_instance_id: str | None = None) -> ErrorCode:
        if group_instance_id is not None and not self.config.static_membership:
            return ErrorCode.unsupported_version
        error = self.coordinator_error(group_id)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is not None and group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group is not None and group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        if group is None or group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self._schedule_heartbeat(group, member)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def handle_leave_group(self, group_id: str, member_ids: list[str],
                           group_instance_ids: list[str | None] | None = None) -> tuple[ErrorCode, list[ErrorCode]]:
        """The request's error and one per member (LeaveGroup v3 batches members, each with its member id or
        its group.instance.id: a static member can be removed by its instance id alone, KIP-345)."""
        error = self.coordinator_error(group_id)
        if error is not None:
            return error, [error] * len(member_ids)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(member_ids)
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, [ErrorCode.coordinator_not_available] * len(member_ids)
        errors = []
        for member_id, instance_id in zip(member_ids, group_instance_ids or [None] * len(member_ids), strict=True):
            static_id = group.static_member_id(instance_id)
            if member_id != NO_MEMBER and group.is_static_member_fenced(member_id, instance_id):
                errors.append(ErrorCode.fenced_instance_id)
            elif static_id is not None:
                self._remove_member_and_update_group(group, group.members[static_id],
                                                     f"static member {static_id} (instance {instance_id}) left")
                errors.append(ErrorCode.none)
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self.heartbeat_purgatory.check_and_complete(MemberKey(group_id, member_id))
                self.join_purgatory.check_and_complete(GroupKey(group_id))
                errors.append(ErrorCode.none)
            elif member_id in group.members:
                self._remove_member_and_update_group(group, group.members[member_id], f"member {member_id} left")
                errors.append(ErrorCode.none)
            else:
                errors.append(ErrorCode.unknown_member_id)
        return ErrorCode.none, errors

    def expire_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        if group.members.get(member.member_id) is member:
            self._remove_member_and_update_group(
                group, member, f"member {member.member_id} missed its {member.session_timeout_ms} ms session timeout")

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        self.heartbeat_purgatory.cancel_for_key(MemberKey(group.group_id, member.member_id))
        self._answer_pending(member, ErrorCode.unknown_member_id)
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self.join_purgatory.check_and_complete(GroupKey(group.group_id))

    def _answer_pending(self, member: MemberMetadata, error: ErrorCode) -> None:
        join, sync = member.join_callback, member.sync_callback
        member.join_callback = member.sync_callback = None
        if join is not None:
            join(JoinResult(error, member.member_id))
        if sync is not None:
            sync(error, b"")

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        key = MemberKey(group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)  # the previous deadline is met
        member.heartbeat_satisfied = False
        self.heartbeat_purgatory.try_complete_else_watch(DelayedHeartbeat(self, group, member), [key], self.now_ms)

    # --- offsets ------------------------------------------------------------------------------------

    def handle_commit_offsets(self, group_id: str, member_id: str, generation_id: int,
                              offsets: dict[TopicPartition, OffsetAndMetadata],
                              callback: Callable[[dict[TopicPartition, ErrorCode]], None],
                              group_instance_id: str | None = None) -> None:

        def all_(error: ErrorCode) -> None:
            callback(dict.fromkeys(offsets, error))

        if group_instance_id is not None and not self.config.static_membership:
            all_(ErrorCode.unsupported_version)
            return
        error = self.coordinator_error(group_id) if group_id else ErrorCode.invalid_group_id
        if error is not None:
            all_(error)
            return
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                all_(ErrorCode.illegal_generation)  # a member of a generation this coordinator never saw
                return
            # no group management (assign() consumers): the group exists only to hold offsets
            group = self.groups[group_id] = GroupMetadata(group_id, state_timestamp_ms=self.wall_now_ms)
        if group.is_(GroupState.DEAD):
            all_(ErrorCode.coordinator_not_available)
            return
        if group.is_static_member_fenced(member_id, group_instance_id):
            all_(ErrorCode.fenced_instance_id)
            return
        if not (generation_id < 0 and group.is_(GroupState.EMPTY)):
            if member_id not in group.members:
                all_(ErrorCode.unknown_member_id)
                return
            if generation_id != group.generation_id:
                all_(ErrorCode.illegal_generation)
                return
            if group.is_(GroupState.COMPLETING_REBALANCE):
                all_(ErrorCode.rebalance_in_progress)
                return
        self._store_offsets(group, offsets, callback)

    def _store_offsets(self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetAndMetadata],
                       callback: Callable[[dict[TopicPartition, ErrorCode]], None],
                       producer: tuple[int, int] | None = None) -> None:
        """Kafka's GroupMetadataManager.storeOffsets: one batch, acks=all; ``producer`` (id, epoch): a
        TxnOffsetCommit, written as a transactional batch of that producer and held pending until its marker."""
        results: dict[TopicPartition, ErrorCode] = {}
        entries: list[Entry] = []
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            if len(value.metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            accepted[tp] = value
            entries.append((rec.encode_key(rec.OffsetKey(group.group_id, tp[0], tp[1])),
                            rec.encode_offset_value(rec.OffsetValue(value.offset, value.leader_epoch,
                                                                    value.metadata, value.commit_timestamp,
                                                                    value.expire_timestamp))))
        if not entries:
            callback(results)
            return

        def stored(error: ErrorCode, base_offset: int = -1) -> None:
            group.pending_offset_commits.subtract(list(accepted))
            group.pending_offset_commits += Counter()  # drop the zeros
            mapped = map_store_error(error)
            if mapped == ErrorCode.none and group.group_id in self.groups:
                for tp, value in accepted.items():
                    if base_offset >= 0:
                        value.log_offset = base_offset
                    # a commit answered late never replaces one written after it (onOffsetCommitAppend)
                    current = group.offsets.get(tp)
                    if current is None or current.older_than(value) or value.log_offset < 0:
                        group.offsets[tp] = value
            callback({**results, **dict.fromkeys(accepted, mapped)})

        def stored_txn(error: ErrorCode, base_offset: int = -1) -> None:
            assert producer is not None
            # a fenced producer is told so (Kafka passes the log's INVALID_PRODUCER_EPOCH through)
            mapped = error if error == ErrorCode.invalid_producer_epoch else map_store_error(error)
            for tp, value in accepted.items():
                if mapped == ErrorCode.none:
                    group.on_txn_offset_commit_append(producer[0], tp, value, base_offset)
                else:
                    group.fail_pending_txn_offset_commit(producer[0], tp, value)
            callback({**results, **dict.fromkeys(accepted, mapped)})

        if producer is not None:
            group.prepare_txn_offset_commit(producer[0], accepted)
            self.append(self.partition_of(group.group_id), entries, stored_txn, producer)
            return
        group.pending_offset_commits.update(list(accepted))
        self.append(self.partition_of(group.group_id), entries, stored)

    def handle_fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                             require_stable: bool = False,
                             ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | ErrorCode | None]]:
        """The committed offsets (None: none). ``require_stable`` (OffsetFetch v7, KIP-447): a partition with a
        commit not yet written, or a transactional one not yet completed, is UNSTABLE_OFFSET_COMMIT instead, which
        the client retries; as in Kafka 2.8, only when partitions are named."""
        error = self.coordinator_error(group_id)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        offsets = {} if group is None else group.offsets
        if partitions is None:
            return ErrorCode.none, dict(offsets)
        if require_stable and group is not None:
            return ErrorCode.none, {tp: ErrorCode.unstable_offset_commit if group.has_pending_offset_commits(tp)
                                    else offsets.get(tp) for tp in partitions}
        return ErrorCode.none, {tp: offsets.get(tp) for tp in partitions}

    # --- transactional offsets (KIP-98) -------------------------------------------------------------

    def handle_txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                  group_instance_id: str | None, generation_id: int,
                                  offsets: dict[TopicPartition, OffsetAndMetadata],
                                  callback: Callable[[dict[TopicPartition, ErrorCode]], None]) -> None:
        """Kafka's handleTxnCommitOffsets: a group that does not exist yet is created Empty; the member and the
        generation are checked only when given (TxnOffsetCommit v3, KIP-447)."""

        def all_(error: ErrorCode) -> None:
            callback(dict.fromkeys(offsets, error))

        if group_instance_id is not None and not self.config.static_membership:
            all_(ErrorCode.unsupported_version)
            return
        error = self.coordinator_error(group_id) if group_id else ErrorCode.invalid_group_id
        if error is not None:
            all_(error)
            return
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupMetadata(group_id, state_timestamp_ms=self.wall_now_ms)
        if group.is_(GroupState.DEAD):
            all_(ErrorCode.coordinator_not_available)
        elif group.is_static_member_fenced(member_id, group_instance_id):
            all_(ErrorCode.fenced_instance_id)
        elif member_id != NO_MEMBER and member_id not in group.members:
            all_(ErrorCode.unknown_member_id)
        elif generation_id >= 0 and generation_id != group.generation_id:
            all_(ErrorCode.illegal_generation)
        else:
            self._store_offsets(group, offsets, callback, (producer_id, producer_epoch))

    def handle_txn_completion(self, producer_id: int, partitions: Iterable[int], committed: bool) -> int:
        """A COMMIT or ABORT marker of ``producer_id`` was written to these __consumer_offsets partitions
        (Kafka's GroupMetadataManager.handleTxnCompletion): the producer's pending offsets in their groups become
        the committed ones, or are dropped. Returns how many offsets were applied."""
        wanted = set(partitions) & self.owned_partitions
        applied = 0
        for group in list(self.groups.values()):
            if self.partition_of(group.group_id) in wanted and producer_id in group.pending_txn_offsets:
                applied += group.complete_pending_txn_offset_commit(producer_id, committed)
        return applied

    # --- storing ------------------------------------------------------------------------------------

    def _store_group(self, group: GroupMetadata, assignments: dict[str, bytes],
                     callback: Callable[[ErrorCode], None]) -> None:
        members = tuple(
            rec.MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                            m.session_timeout_ms,
                            m.metadata_for(group.protocol_name) if group.protocol_name else b"",
                            assignments.get(m.member_id, b""))
            for m in group.members.values())
        value = rec.GroupValue(group.protocol_type or "", group.generation_id, group.protocol_name,
                               group.leader_id, group.state_timestamp_ms, members)
        entry = (rec.encode_key(rec.GroupKey(group.group_id)), rec.encode_group_value(value))
        self.append(self.partition_of(group.group_id), [entry],
                    lambda error, *_: callback(map_store_group_error(error)))

    def _transition(self, group: GroupMetadata, state: GroupState, reason: str) -> None:
        old = group.transition_to(state, self.wall_now_ms)
        self.on_state_change(group, old.value, reason)

    # --- describe -----------------------------------------------------------------------------------

    def describe(self, group_id: str) -> tuple[ErrorCode, GroupMetadata | None]:
        error = self.coordinator_error(group_id)
        if error is not None:
            return error, None
        return ErrorCode.none, self.groups.get(group_id)

    def list_groups(self) -> list[GroupMetadata]:
        return [g for g in self.groups.values() if self.partition_of(g.group_id) in self.owned_partitions]

    # --- deletion (DeleteGroups, OffsetDelete) ------------------------------------------------------

    def _group_status_error(self, group_id: str) -> ErrorCode | None:
        return self.coordinator_error(group_id) if group_id else ErrorCode.invalid_group_id

    def handle_delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """Kafka's handleDeleteGroups: only a group without members (Empty) can go; it becomes Dead, leaves
        the cache, and its offsets and record are tombstoned. Answered at once, as Kafka does: the tombstones
        are replicated like any write, but the answer does not wait for them."""
        results: dict[str, ErrorCode] = {}
        deletable: list[GroupMetadata] = []
        for group_id in dict.fromkeys(group_ids):  # Kafka reads the names as a set
            error = self._group_status_error(group_id)
            group = self.groups.get(group_id)
            if error is not None:
                results[group_id] = error
            elif group is None or group.is_(GroupState.DEAD):
                results[group_id] = ErrorCode.group_id_not_found
            elif group.is_(GroupState.EMPTY):
                deletable.append(group)
            else:  # Stable, PreparingRebalance, CompletingRebalance: members would lose their offsets
                results[group_id] = ErrorCode.non_empty_group
        for group in deletable:
            self._transition(group, GroupState.DEAD, "deleted (DeleteGroups)")
            self._remove_offsets(group, list(group.offsets))
            results[group.group_id] = ErrorCode.none
        return results

    def handle_delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                              ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """Kafka's handleDeleteOffsets: the group's error (then no partition results), else one per partition.
        An active consumer group keeps the offsets of the topics its generation subscribes to
        (GROUP_SUBSCRIBED_TO_TOPIC); an active group of another protocol keeps them all (NON_EMPTY_GROUP)."""
        error = self._group_status_error(group_id)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        results: dict[TopicPartition, ErrorCode] = {}
        if not group.is_(GroupState.EMPTY):
            if not group.is_consumer_group:
                return ErrorCode.non_empty_group, {}
            results = {tp: ErrorCode.group_subscribed_to_topic for tp in partitions
                       if group.is_subscribed_to_topic(tp[0])}
        eligible = [tp for tp in partitions if tp not in results]
        if eligible:
            group.remove_pending_txn_offsets(eligible)
            self._remove_offsets(group, eligible)
            results.update(dict.fromkeys(eligible, ErrorCode.none))
        return ErrorCode.none, results

    def cleanup_group_metadata(self, retention_ms: int) -> int:
        """Kafka's GroupMetadataManager.cleanupGroupMetadata, run every offsets.retention.check.interval.ms:
        the expired offsets of every group this broker coordinates are removed with tombstones, and a group left
        Empty without offsets becomes Dead (its record tombstoned too). Returns how many offsets expired."""
        now = self.wall_now_ms
        removed = 0
        for group in list(self.groups.values()):
            if self.partition_of(group.group_id) not in self.owned_partitions or group.is_(GroupState.DEAD):
                continue
            expired = group.expired_offsets(now, retention_ms)
            removed += self._remove_offsets(group, expired, "its offsets expired" if expired
                                            else "no members and no offsets left")
        return removed

    def _remove_offsets(self, group: GroupMetadata, partitions: list[TopicPartition],
                        reason: str = "no members and no offsets left") -> int:
        """Kafka's cleanupGroupMetadata: a tombstone for each offset removed; an Empty group left without offsets
        becomes Dead, leaves the cache and gets a tombstone too, unless it is of generation 0 (offsets only,
        it never wrote a group record). Kafka appends without waiting, and so does this."""
        removed = [tp for tp in partitions if group.offsets.pop(tp, None) is not None]
        # pending offsets (a write not yet answered, a transaction not yet completed) keep the group (hasOffsets)
        if group.is_(GroupState.EMPTY) and not group.has_offsets:
            self._transition(group, GroupState.DEAD, reason)
        entries: list[Entry] = [(rec.encode_key(rec.OffsetKey(group.group_id, topic, partition)), None)
                                for topic, partition in removed]
        if group.is_(GroupState.DEAD) and self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
            self.join_purgatory.cancel_for_key(GroupKey(group.group_id))
            if group.generation_id > 0:
                entries.append((rec.encode_key(rec.GroupKey(group.group_id)), None))
        if entries:
            self.append(self.partition_of(group.group_id), entries, lambda error, *_: None)
        return len(removed)
