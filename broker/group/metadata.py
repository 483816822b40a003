"""GroupMetadata and MemberMetadata (Kafka's classic group model): the states a group moves through, its
members with their supported protocols, the protocol vote, and the committed offsets. Pure data and rules."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE, SubscriptionFormatError, subscribed_topics


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's GroupState.validPreviousStates: any other transition is a coordinator bug.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                               GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupStateError(RuntimeError):
    """A transition Kafka's state diagram does not allow."""


@dataclass
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    # set only by OffsetCommit v2-v4 with a retention_time_ms: the old per-offset expiry (stored as value v1)
    expire_timestamp: int | None = None
    # the base offset of the __consumer_offsets batch holding this commit (Kafka's appendedBatchOffset), -1 until
    # appended or when unknown: a transactional commit completed by its marker replaces only an older one
    log_offset: int = field(default=-1, compare=False)

    def older_than(self, other: OffsetAndMetadata) -> bool:
        """Kafka's CommitRecordMetadataAndOffset.olderThan, by position in the log; an unknown position is older."""
        return self.log_offset < 0 or self.log_offset < other.log_offset


@dataclass
class JoinResult:
    error: object  # ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # only the leader gets them


@dataclass(eq=False)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_callback: Callable[[JoinResult], None] | None = None
    sync_callback: Callable[[object, bytes], None] | None = None
    heartbeat_satisfied: bool = False
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise IllegalGroupStateError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        # Kafka: each member votes for the first protocol in its own preference order that all support.
        return next(name for name in self.protocol_names if name in candidates)

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None


@dataclass(eq=False)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    new_member_added: bool = False
    # Kafka's currentStateTimestamp: the wall-clock time of the last state change (-1: unknown), stored in the
    # group's record; an Empty group's offsets expire offsets.retention.minutes after it
    state_timestamp_ms: int = -1
    # offsets written but not yet replicated: they never expire (Kafka's pendingOffsetCommits)
    pending_offset_commits: Counter = field(default_factory=Counter)
    # Kafka's pendingTransactionalOffsetCommits: TxnOffsetCommit offsets by producer id, invisible to OffsetFetch
    # until that producer's COMMIT marker reaches the partition (then they become the committed ones) or ABORT
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = field(default_factory=dict)
    # the topics the members of this generation consume; None: unknown (not a consumer group, or unreadable
    # metadata), which OffsetDelete must treat as "all of them" (Kafka's GroupMetadata.subscribedTopics)
    subscribed_topics: frozenset[str] | None = None

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, target: GroupState, now_ms: int = -1) -> GroupState:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalGroupStateError(f"group {self.group_id} cannot go from {self.state.value} to {target.value}")
        previous, self.state, self.state_timestamp_ms = self.state, target, now_ms
        return previous

    # --- members ------------------------------------------------------------------------------------

    def add(self, member: MemberMetadata, callback: Callable[[JoinResult], None] | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.join_callback = callback

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member_id == self.leader_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def is_leader(self, member_id: str) -> bool:
        return member_id == self.leader_id

    # --- static members (KIP-345) -------------------------------------------------------------------

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        """The member id a group.instance.id holds now, None when the instance is not a member."""
        if group_instance_id is None:
            return None
        return next((m.member_id for m in self.members.values() if m.group_instance_id == group_instance_id), None)

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """Kafka's isStaticMemberFenced: the instance id is known, but under another member id (an older
        incarnation of a restarted consumer, or a duplicate one)."""
        known = self.static_member_id(group_instance_id)
        return known is not None and known != member_id

    def replace_static_member(self, old_member_id: str, new_member_id: str) -> MemberMetadata:
        """Kafka's replaceGroupInstance: the same member (assignment, protocols) under a new member id; the
        leadership follows it."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        return member

    @property
    def has_all_members_joined(self) -> bool:
        return (all(member.awaiting_join for member in self.members.values())
                and not self.pending_members)

    @property
    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [member for member in self.members.values() if not member.awaiting_join]

    # --- transactional offsets (KIP-98, Kafka's GroupMetadata) --------------------------------------

    def prepare_txn_offset_commit(self, producer_id: int, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        self.pending_txn_offsets.setdefault(producer_id, {}).update(offsets)

    def on_txn_offset_commit_append(self, producer_id: int, tp: tuple[str, int], value: OffsetAndMetadata,
                                    log_offset: int) -> None:
        """The record is in the log: remember where, unless a later TxnOffsetCommit replaced it meanwhile."""
        pending = self.pending_txn_offsets.get(producer_id, {}).get(tp)
        if pending is value:
            pending.log_offset = log_offset

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: tuple[str, int], value: OffsetAndMetadata) -> None:
        """The record was not written: the client is answered an error and retries, perhaps elsewhere."""
        pending = self.pending_txn_offsets.get(producer_id)
        if pending is not None and pending.get(tp) is value:
            del pending[tp]
            if not pending:
                del self.pending_txn_offsets[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, committed: bool) -> int:
        """The producer's marker is in the log: COMMIT makes its offsets the committed ones where they are newer in
        the log than the commit there (Kafka's completePendingTxnOffsetCommit), ABORT drops them. Returns how many
        offsets were applied."""
        pending = self.pending_txn_offsets.pop(producer_id, {})
        if not committed:
            return 0
        applied = 0
        for tp, value in pending.items():
            current = self.offsets.get(tp)
            if current is None or current.older_than(value):
                self.offsets[tp] = value
                applied += 1
        return applied

    def has_pending_offset_commits(self, tp: tuple[str, int]) -> bool:
        """Kafka's hasPendingOffsetCommitsForTopicPartition: OffsetFetch with require_stable answers
        UNSTABLE_OFFSET_COMMIT for such a partition."""
        return bool(self.pending_offset_commits[tp]) or any(tp in p for p in self.pending_txn_offsets.values())

    @property
    def has_offsets(self) -> bool:
        """Kafka's hasOffsets: an Empty group without any becomes Dead; pending ones keep it."""
        return bool(self.offsets) or any(self.pending_offset_commits.values()) or bool(self.pending_txn_offsets)

    def remove_pending_txn_offsets(self, partitions: list[tuple[str, int]]) -> None:
        """Kafka's removeOffsets drops the partitions' pending transactional offsets too."""
        for producer_id, pending in list(self.pending_txn_offsets.items()):
            for tp in partitions:
                pending.pop(tp, None)
            if not pending:
                del self.pending_txn_offsets[producer_id]

    # --- offset expiry (KIP-211) --------------------------------------------------------------------

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """Kafka 2.8's removeExpiredOffsets, without removing: the offsets whose retention has passed.
        ``now_ms`` is wall-clock time, like the commit timestamps and the state timestamp.

        - a group with a protocol type, Empty: ``retention_ms`` after it became Empty (the commit time when
          that is unknown);
        - a consumer group, Stable, with known subscriptions: the topics it does not subscribe to, by commit time;
        - a group without a protocol type (commits only, e.g. assign() consumers): by commit time;
        - otherwise none. An offset with a commit not yet replicated never expires; in the three cases above, an
          offset committed with an explicit expire timestamp (OffsetCommit v2-v4) expires at that time instead."""
        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            def base(value: OffsetAndMetadata) -> int:
                return self.state_timestamp_ms if self.state_timestamp_ms >= 0 else value.commit_timestamp
            kept: frozenset[str] = frozenset()
        elif self.is_consumer_group and self.subscribed_topics is not None and self.is_(GroupState.STABLE):
            def base(value: OffsetAndMetadata) -> int:
                return value.commit_timestamp
            kept = self.subscribed_topics
        elif self.protocol_type is None:
            def base(value: OffsetAndMetadata) -> int:
                return value.commit_timestamp
            kept = frozenset()
        else:
            return []
        def expired(value: OffsetAndMetadata) -> bool:
            if value.expire_timestamp is not None:  # a legacy commit's own expiry replaces the retention
                return now_ms >= value.expire_timestamp
            return now_ms - base(value) >= retention_ms

        return [tp for tp, value in self.offsets.items()
                if tp[0] not in kept and not self.pending_offset_commits[tp] and expired(value)]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    # --- protocols ----------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        names = [set(member.protocol_names) for member in self.members.values()]
        return set.intersection(*names) if names else set()

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & set(names))

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        # ties broken by name, so every coordinator picks the same protocol for the same group
        return max(sorted(votes), key=lambda name: votes[name])

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.subscribed_topics = self.compute_subscribed_topics()

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if not self.is_consumer_group or self.protocol_name is None or not self.members:
            return None
        try:
            return frozenset(topic for member in self.members.values()
                             for topic in subscribed_topics(member.metadata_for(self.protocol_name)))
        except (SubscriptionFormatError, IllegalGroupStateError):
            return None

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is None or topic in self.subscribed_topics

    def member_list(self) -> tuple[tuple[str, str | None, bytes], ...]:
        assert self.protocol_name is not None
        return tuple((m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
                     for m in self.members.values())
