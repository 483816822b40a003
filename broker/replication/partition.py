"""Partition: one replica's leader or follower state (Kafka's Partition.scala).

The leader keeps every follower's progress, the in-sync replicas and the high watermark; the follower
keeps the leader it fetches from and the high watermark the leader last sent. Rules only: the log is the
one thing touched, "now" is passed in, and ISR changes are returned as proposals for someone else to
write to ZooKeeper and confirm.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.log.record_batch import BatchHeader, parse_header
from broker.log.transactions import ABORT, end_transaction_marker, is_transactional, last_stable_offset
from broker.replication.producer_state import Decision, ProducerStateManager, increment_sequence
from broker.replication.replica_log import AppendInfo, LogRegion, ReplicaLog

NO_EPOCH = -1  # a request that does not name the leader epoch it expects (before KIP-320)
DELETE_TO_HIGH_WATERMARK = -1  # DeleteRecords' offset meaning "everything committed"


class PartitionError(Exception):
    """A per-partition failure answered with a Kafka error code, not a crash."""

    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code


class FetchIsolation(enum.Enum):
    LOG_END = "log_end"  # followers read everything the leader has
    HIGH_WATERMARK = "high_watermark"  # consumers read only committed records (read_uncommitted)
    TXN_COMMITTED = "txn_committed"  # read_committed consumers stop at the last stable offset


@dataclass
class FollowerState:
    """What a leader knows of one follower (Kafka's Replica). LEO -1 = not fetched in this epoch yet."""

    broker_id: int
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int, leader_log_end_offset: int,
                           now_ms: int) -> None:
        # Caught up if it asked for the leader's LEO, or at least for what the leader had at its
        # previous fetch: a follower that keeps pace under steady produce never "reaches" the LEO.
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = now_ms


@dataclass(frozen=True)
class LeadershipState:
    """The controller's decision for this partition, as LeaderAndIsr carries it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    controller_epoch: int


@dataclass(frozen=True)
class IsrProposal:
    """A new ISR the leader wants written to the state znode (compare-and-set on ``zk_version``)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    controller_epoch: int


@dataclass(frozen=True)
class LogReadResult:
    region: LogRegion | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    # read_committed only: (producer id, first offset) of the aborted transactions overlapping the records read
    aborted_transactions: tuple[tuple[int, int], ...] | None = None

    @property
    def size(self) -> int:
        return 0 if self.region is None else self.region.size


@dataclass(frozen=True)
class TxnMarkerAppended:
    """A COMMIT or ABORT marker the leader appended for a coordinator (for the trace)."""

    producer_id: int
    producer_epoch: int
    aborted: bool
    offset: int
    coordinator_epoch: int


@dataclass(frozen=True)
class LastStableOffsetReport:
    """The leader's LSO next to its HW, when it stopped following the HW, moved while held, or was released."""

    last_stable_offset: int
    high_watermark: int
    open_transactions: int


@dataclass
class Partition:
    topic: str
    partition: int
    local_broker_id: int
    log: ReplicaLog
    replica_lag_time_max_ms: int
    high_watermark: int = 0
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    zk_version: int = -1
    replicas: tuple[int, ...] = ()
    controller_epoch: int = -1
    leader_epoch_start_offset: int = -1
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending_isr: tuple[int, ...] | None = None
    producer_state: ProducerStateManager = field(default_factory=ProducerStateManager)
    # The leader watches its LSO (for the trace) only from a transactional append until the LSO follows the HW
    # again with nothing open: a partition without transactions pays nothing per produce or HW move.
    lso_watched: bool = False
    # the end-transaction markers of the leader's last append, with their offsets (the coordinator's markers feed the
    # transaction and group coordinators); parsed once, with the producers' state
    appended_markers: list[TxnMarkerAppended] = field(default_factory=list)
    # (held LSO, or None while it equals the HW; open transactions) as last reported; None: following the HW
    _lso_reported: tuple[int | None, int] | None = None

    def __post_init__(self) -> None:
        self.high_watermark = min(max(self.high_watermark, self.log.log_start_offset), self.log.log_end_offset)
        self.rebuild_producer_state()

    def rebuild_producer_state(self) -> None:
        """Idempotent producers' last batches, replayed from the log, so any replica that becomes leader
        (or restarts) still recognises a retried batch. Kafka keeps snapshots; headers are cheap to scan."""
        self.producer_state.rebuild(self.log.producer_batches())

    @property
    def topic_partition(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_broker_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """Kafka's Log.lastStableOffset: the first offset of the earliest transaction not yet decided with its
        marker replicated, when that is below the high watermark; else the high watermark."""
        return last_stable_offset(self.high_watermark, self.log.first_unstable_offset(self.high_watermark))

    # --- becoming leader or follower ---------------------------------------------------------------

    def _accept(self, state: LeadershipState) -> None:
        self.leader, self.leader_epoch = state.leader, state.leader_epoch
        self.zk_version, self.replicas = state.zk_version, tuple(state.replicas)
        self.controller_epoch = state.controller_epoch
        self.pending_isr = None

    def make_leader(self, state: LeadershipState, now_ms: int) -> bool:
        """Kafka's makeLeader: the new epoch starts at our LEO; followers must fetch in this epoch
        before they count for the high watermark. Returns True (leadership or epoch changed)."""
        was_leader = self.is_leader
        self._accept(state)
        self.producer_state.forget_refusals()
        self.isr = tuple(state.isr)
        leo = self.log.log_end_offset
        self.log.maybe_assign_epoch_start_offset(state.leader_epoch, leo)
        self.leader_epoch_start_offset = leo
        followers = {}
        for replica in state.replicas:
            if replica == self.local_broker_id:
                continue
            # A follower outside the new ISR counts only once it fetches in this epoch: the controller may just have
            # taken it out (a controlled shutdown, StopReplica), and its old position would put it straight back
            follower = self.followers.get(replica) if was_leader and replica in self.isr else None
            follower = follower or FollowerState(replica)
            follower.last_caught_up_time_ms = now_ms if replica in self.isr else 0
            follower.last_fetch_leader_log_end_offset = leo
            follower.last_fetch_time_ms = now_ms
            followers[replica] = follower
        self.followers = followers
        self._lso_reported = None
        # a follower that held open transactions leads them now (the producer state is replayed from the log)
        self.lso_watched = self.open_transactions() > 0
        self.maybe_increment_high_watermark(now_ms)
        return True

    def make_follower(self, state: LeadershipState) -> bool:
        """Kafka's makeFollower: only the leader tracks the ISR. True if the leader or epoch changed."""
        changed = (self.leader, self.leader_epoch) != (state.leader, state.leader_epoch)
        self._accept(state)
        self.producer_state.forget_refusals()
        self.isr = ()
        self.followers = {}
        self.leader_epoch_start_offset = -1
        self.lso_watched, self._lso_reported = False, None
        return changed

    # --- leader: appends, high watermark, ISR ------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int | None) -> None:
        """KIP-320: a client or follower names the epoch it believes in; both directions are errors."""
        if current_leader_epoch is None or current_leader_epoch == NO_EPOCH:
            return
        if current_leader_epoch < self.leader_epoch:
            raise PartitionError(ErrorCode.fenced_leader_epoch,
                                 f"epoch {current_leader_epoch} is older than {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise PartitionError(ErrorCode.unknown_leader_epoch,
                                 f"epoch {current_leader_epoch} is newer than {self.leader_epoch}")

    def _require_leader(self) -> None:
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"broker {self.local_broker_id} is not the leader of {self.topic}-{self.partition}")

    def append_records_to_leader(self, records: bytes, required_acks: int, min_insync_replicas: int,
                                 now_ms: int, *, from_coordinator: bool = False) -> AppendInfo | None:
        self.check_enough_isr(required_acks, min_insync_replicas)
        if from_coordinator:
            info = self.log.append_as_leader(records, self.leader_epoch, from_coordinator=True)
        else:
            info = self.log.append_as_leader(records, self.leader_epoch)
        self.appended_markers = self._record_producer_batches(records, info.first_offset) if info is not None else []
        self.maybe_increment_high_watermark(now_ms)
        return info

    def check_producer_batch(self, header: BatchHeader) -> Decision | None:
        """An idempotent producer's batch: None to append it, else the answer without appending."""
        if header.producer_id < 0:
            return None
        decision = self.producer_state.check(header.producer_id, header.producer_epoch, header.base_sequence,
                                             increment_sequence(header.base_sequence, header.last_offset_delta),
                                             is_transactional(header))
        return None if decision.should_append else decision

    def _record_producer_batches(self, records: bytes, first_offset: int | None) -> list[TxnMarkerAppended]:
        """Producers' state from appended batches; on the leader (``first_offset`` known) the end-transaction markers
        among them, with their offsets."""
        # The leader's copy of the client bytes still says baseOffset 0: count from the assigned offset.
        # A follower's bytes carry the leader's offsets already.
        markers: list[TxnMarkerAppended] = []
        position, offset = 0, first_offset
        while position < len(records):
            header = parse_header(records, position)
            if offset is not None:
                header = header._replace(base_offset=offset)
                offset += header.last_offset_delta + 1
            if header.producer_id >= 0:
                marker = end_transaction_marker(records[position:position + header.size]) if header.is_control \
                    else None
                self.producer_state.record_header(header, None if marker is None else marker[1])
                if offset is not None and marker is not None:
                    markers.append(TxnMarkerAppended(header.producer_id, header.producer_epoch, marker[0] == ABORT,
                                                     header.base_offset, marker[1]))
                if offset is not None and is_transactional(header):
                    self.lso_watched = True
            position += header.size
        return markers

    def open_transactions(self) -> int:
        return sum(1 for entry in self.producer_state.producers.values()
                   if entry.current_txn_first_offset is not None)

    def last_stable_offset_change(self) -> LastStableOffsetReport | None:
        """For the trace, on a watched leader after an append or an HW move: the LSO when it stopped following
        the HW, moved while held, or follows it again with nothing open (which ends the watch); else None."""
        if not self.lso_watched or not self.is_leader:
            return None
        high_watermark = self.high_watermark
        first_unstable = self.log.first_unstable_offset(high_watermark)
        lso = last_stable_offset(high_watermark, first_unstable)
        open_transactions = self.open_transactions()
        if first_unstable is None and open_transactions == 0:
            self.lso_watched = False
        if lso == high_watermark and open_transactions == 0:
            # following the HW again (a decided transaction may still wait for its marker to be replicated, from
            # at or above the HW: it can hold the LSO again, so the watch goes on until it is gone)
            reported, self._lso_reported = self._lso_reported, None
            return LastStableOffsetReport(lso, high_watermark, 0) if reported is not None else None
        key = (lso if lso < high_watermark else None, open_transactions)
        if key == self._lso_reported:
            return None
        self._lso_reported = key
        return LastStableOffsetReport(lso, high_watermark, open_transactions)

    def check_enough_isr(self, required_acks: int, min_insync_replicas: int, records: bytes | None = None) -> None:
        """acks=all checks the ISR before anything else: NOT_ENOUGH_REPLICAS means "nothing appended".
        ``records`` (the client's batch) lets an idempotent producer's later batches wait for this one."""
        self._require_leader()
        if required_acks == -1 and len(self.isr) < min_insync_replicas:
            if records:
                header = parse_header(records, 0)
                self.producer_state.refused_for_isr(header.producer_id, header.producer_epoch, header.base_sequence)
            raise PartitionError(ErrorCode.not_enough_replicas,
                                 f"ISR {list(self.isr)} is smaller than min.insync.replicas={min_insync_replicas}")

    def maybe_increment_high_watermark(self, now_ms: int) -> bool:
        """HW = the smallest LEO among the leader, the ISR and followers caught up within the lag time.
        It only moves forward; a follower not yet heard from in this epoch (LEO -1) holds it back."""
        if not self.is_leader:
            return False
        candidate = self.log.log_end_offset
        for follower in self.followers.values():
            if follower.log_end_offset >= candidate:
                continue
            caught_up = now_ms - follower.last_caught_up_time_ms <= self.replica_lag_time_max_ms
            if caught_up or follower.broker_id in self.isr:
                candidate = follower.log_end_offset
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def check_enough_replicas_reach_offset(self, required_offset: int,
                                           min_insync_replicas: int) -> tuple[bool, ErrorCode]:
        """For a delayed acks=all produce: done once the HW passes the batch."""
        if not self.is_leader:
            return True, ErrorCode.not_leader_or_follower
        if self.high_watermark < required_offset:
            return False, ErrorCode.none
        if len(self.isr) < min_insync_replicas:
            return True, ErrorCode.not_enough_replicas_after_append
        return True, ErrorCode.none

    def update_follower_fetch_state(self, follower_id: int, fetch_offset: int, follower_log_start_offset: int,
                                    leader_log_end_offset: int, now_ms: int) -> bool:
        """A follower fetched from ``fetch_offset``; returns True if the high watermark moved."""
        follower = self.followers.get(follower_id)
        if follower is None:
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"broker {follower_id} is not a replica of {self.topic}-{self.partition}")
        follower.update_fetch_state(fetch_offset, follower_log_start_offset, leader_log_end_offset, now_ms)
        return self.maybe_increment_high_watermark(now_ms)

    # --- leader: DeleteRecords -----------------------------------------------------------------------

    def delete_records_on_leader(self, offset: int) -> int:
        """Kafka's deleteRecordsOnLeader: the log start moves to ``offset`` (-1: the high watermark), never past
        the high watermark, so only committed records are deleted. Returns the offset the start was asked to
        reach; the request is done once the low watermark gets there."""
        self._require_leader()
        requested = self.high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset
        if requested < 0 or requested > self.high_watermark:
            raise PartitionError(ErrorCode.offset_out_of_range,
                                 f"cannot delete records of {self.topic}-{self.partition} up to offset {requested}: "
                                 f"it must lie between 0 and the high watermark {self.high_watermark}")
        self.log.maybe_increment_log_start_offset(requested)
        return requested

    def low_watermark(self, is_alive: Callable[[int], bool]) -> int:
        """Kafka 2.8's lowWatermarkIfLeader: the smallest log start offset among the leader and every replica on a
        live broker, in the ISR or not. A follower not heard from in this leader's time counts as -1 (unknown),
        so a DeleteRecords waits for its first fetch."""
        self._require_leader()
        low = self.log.log_start_offset
        for follower in self.followers.values():
            if follower.log_start_offset < low and is_alive(follower.broker_id):
                low = follower.log_start_offset
        return low

    def isr_to_expand(self, follower_id: int) -> IsrProposal | None:
        """Kafka 2.1+: a follower joins once it reaches both the HW and the start of this leader epoch,
        so it cannot be elected without the previous leader's committed tail."""
        follower = self.followers.get(follower_id)
        if (not self.is_leader or self.pending_isr is not None or follower is None
                or follower_id in self.isr):
            return None
        if follower.log_end_offset >= self.high_watermark and \
                follower.log_end_offset >= self.leader_epoch_start_offset:
            return self._propose(tuple(sorted((*self.isr, follower_id))))
        return None

    def out_of_sync_replicas(self, now_ms: int) -> set[int]:
        """ISR members that are behind the LEO and have not caught up for replica.lag.time.max.ms."""
        leo = self.log.log_end_offset
        return {
            follower.broker_id
            for follower in self.followers.values()
            if follower.broker_id in self.isr and follower.log_end_offset != leo
            and now_ms - follower.last_caught_up_time_ms > self.replica_lag_time_max_ms
        }

    def isr_to_shrink(self, now_ms: int) -> IsrProposal | None:
        if not self.is_leader or self.pending_isr is not None:
            return None
        out = self.out_of_sync_replicas(now_ms)
        if not out:
            return None
        return self._propose(tuple(r for r in self.isr if r not in out))

    def _propose(self, isr: tuple[int, ...]) -> IsrProposal:
        self.pending_isr = isr
        return IsrProposal(self.topic, self.partition, self.local_broker_id, self.leader_epoch, isr,
                           self.zk_version, self.controller_epoch)

    def isr_change_committed(self, proposal: IsrProposal, new_zk_version: int, now_ms: int) -> bool:
        """ZooKeeper accepted the proposal. Returns True if the HW moved (a shrink can release it)."""
        if self.pending_isr != proposal.isr or self.leader_epoch != proposal.leader_epoch:
            return False  # a LeaderAndIsr replaced our view meanwhile; the controller's word wins
        self.isr, self.zk_version, self.pending_isr = proposal.isr, new_zk_version, None
        return self.maybe_increment_high_watermark(now_ms)

    def isr_change_failed(self, proposal: IsrProposal) -> None:
        """Stale zkVersion: keep the old ISR and wait for the controller's next LeaderAndIsr (Kafka ZK mode)."""
        if self.pending_isr == proposal.isr:
            self.pending_isr = None

    def end_offset_for_epoch(self, current_leader_epoch: int | None, leader_epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch as the leader answers it (KIP-279, fenced by KIP-320)."""
        self.check_leader_epoch(current_leader_epoch)
        self._require_leader()
        return self.log.end_offset_for_epoch(leader_epoch)

    # --- reads --------------------------------------------------------------------------------------

    def read_records(self, fetch_offset: int, max_bytes: int, *, isolation: FetchIsolation,
                     current_leader_epoch: int | None, min_one_message: bool = True) -> LogReadResult:
        """Whole batches from ``fetch_offset`` up to the LEO (followers) or the HW (consumers), sampled
        with the offsets the response carries. Only the leader serves fetches."""
        # the epoch first (Kafka's getLocalLog): a stale reader learns it is fenced, not just "not leader"
        self.check_leader_epoch(current_leader_epoch)
        self._require_leader()
        high_watermark = self.high_watermark
        log_start, log_end = self.log.log_start_offset, self.log.log_end_offset
        if isolation is FetchIsolation.LOG_END:
            # followers: no LSO needed, and asking for it is a cost on every replica fetch
            bound, lso = log_end, -1
        else:
            lso = self.last_stable_offset
            bound = lso if isolation is FetchIsolation.TXN_COMMITTED else high_watermark
        aborted = () if isolation is FetchIsolation.TXN_COMMITTED else None
        if log_start <= fetch_offset == bound:
            # nothing to read: the usual answer to an idle follower, which asks for every partition twice a second
            return LogReadResult(None, high_watermark, log_start, log_end, lso, aborted)
        region = self.log.read(fetch_offset, max_bytes, max_offset=bound, min_one_message=min_one_message)
        if isolation is FetchIsolation.TXN_COMMITTED and region.size:
            # Kafka's upper bound is the offset after the data read; the next batch's offset is not known here
            # without another lookup, so the LSO (which the data never passes) bounds the search: an entry
            # listed beyond the data is harmless, the consumer only skips the listed producers' batches
            aborted = tuple((t.producer_id, t.first_offset)
                            for t in self.log.collect_aborted_transactions(fetch_offset, bound))
        return LogReadResult(region if region.size else None, high_watermark, log_start, log_end, lso, aborted)

    # --- follower -----------------------------------------------------------------------------------

    def append_records_to_follower(self, records: bytes, leader_high_watermark: int,
                                   leader_log_start_offset: int) -> AppendInfo | None:
        info = self.log.append_as_follower(records)
        if info is not None:
            self._record_producer_batches(records, None)
        self.update_follower_high_watermark(leader_high_watermark, leader_log_start_offset)
        return info

    def update_follower_high_watermark(self, leader_high_watermark: int, leader_log_start_offset: int) -> bool:
        """A follower's HW is the leader's, capped by what it has itself; its log start follows the leader's
        (DeleteRecords, retention there), never past its own HW. Returns whether the log start moved."""
        self.high_watermark = max(self.log.log_start_offset, min(leader_high_watermark, self.log.log_end_offset))
        if leader_log_start_offset > self.log.log_start_offset:
            return self.log.maybe_increment_log_start_offset(min(leader_log_start_offset, self.high_watermark))
        return False

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """We fell off the leader's log start: nothing we hold is useful any more."""
        self.log.truncate_fully_and_start_at(offset)
        self.high_watermark = offset
        self.rebuild_producer_state()

    def truncate_to(self, offset: int) -> None:
        if self.log.truncate_to(offset):
            self.rebuild_producer_state()
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
