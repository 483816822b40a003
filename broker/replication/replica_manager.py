"""ReplicaManager: every partition replica this broker hosts, its role as the controller last decided it,
and the appends and reads that go through those replicas (Kafka's ReplicaManager).

Synchronous and loop-free: LeaderAndIsr and StopReplica in, errors and role changes out; produce and
fetch answer through a ``respond`` callback, at once or later from the produce and fetch purgatories.
"Now" is passed in; whoever owns the manager drives the purgatories' timers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.log.errors import InvalidRecordBatchError, KafkaStorageError, OffsetOutOfRangeError
from broker.metrics.topic_stats import BrokerTopicStats
from broker.purgatory.purgatory import DelayedOperationPurgatory, TopicPartitionOperationKey
from broker.replication.control_fencing import check_control_request
from broker.replication.delayed_ops import (
    DelayedDeleteRecords,
    DelayedFetch,
    DelayedProduce,
    DelayedSessionFetch,
    DeleteRecordsPartitionStatus,
    FetchParams,
    FetchPartitionRequest,
    FetchPartitionResult,
    ProducePartitionStatus,
    partition_error,
)
from broker.replication.fetch_session import LeaderFetchSession, SessionRequest
from broker.replication.partition import (
    FetchIsolation,
    IsrProposal,
    LastStableOffsetReport,
    Partition,
    PartitionError,
    TxnMarkerAppended,
)
from clusterplane import cluster_pb2 as pb

TopicPartition = tuple[str, int]
# a session fetch looks at all of its partitions once in this many fetches (every 5 s for an idle follower), at
# the partitions woken since its last answer otherwise
FULL_CHECK_EVERY = 10


@dataclass(frozen=True, slots=True)
class FetchSessionKey:
    """Watch key of a follower's parked fetch in an incremental fetch session: one key for all its partitions."""

    session_id: int


@dataclass
class ReplicaState:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    zk_version: int
    replicas: list[int]
    controller_epoch: int

    def is_leader(self, broker_id: int) -> bool:
        return self.leader == broker_id


RoleListener = Callable[[ReplicaState | None, TopicPartition, str], None]


class ReplicaManager:
    def __init__(self, broker_id: int, on_role_change: RoleListener | None = None) -> None:
        self.broker_id = broker_id
        self.broker_epoch = -1
        self.highest_controller_epoch = 0
        self.partitions: dict[TopicPartition, ReplicaState] = {}
        self.on_role_change = on_role_change or (lambda state, tp, role: None)

    def _fence(self, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        error = check_control_request(controller_epoch, self.highest_controller_epoch, broker_epoch,
                                      self.broker_epoch)
        if error == ErrorCode.none:
            self.highest_controller_epoch = controller_epoch
        return error

    def become_leader_or_follower(self, request: pb.LeaderAndIsrRequest) -> pb.LeaderAndIsrResponse:
        error = self._fence(request.controller_epoch, request.broker_epoch)
        if error != ErrorCode.none:
            return pb.LeaderAndIsrResponse(error_code=error.value)
        errors = []
        for ps in request.partition_states:
            tp = (ps.topic, ps.partition)
            code = self._apply(tp, ps)
            errors.append(pb.PartitionError(topic=ps.topic, partition=ps.partition, error_code=code.value))
        return pb.LeaderAndIsrResponse(error_code=0, partition_errors=errors)

    def _apply(self, tp: TopicPartition, ps: pb.PartitionState) -> ErrorCode:
        if self.broker_id not in ps.replicas:
            return ErrorCode.unknown_topic_or_partition
        current = self.partitions.get(tp)
        # Only a strictly newer leader epoch changes anything: the controller bumps it on every decision.
        if current is not None and ps.leader_epoch <= current.leader_epoch:
            return ErrorCode.stale_controller_epoch
        state = ReplicaState(ps.topic, ps.partition, ps.leader, ps.leader_epoch, list(ps.isr), ps.zk_version,
                             list(ps.replicas), ps.controller_epoch)
        self.partitions[tp] = state
        self.on_role_change(state, tp, "leader" if state.is_leader(self.broker_id) else "follower")
        return ErrorCode.none

    def forget(self, tp: TopicPartition, previous: ReplicaState | None) -> None:
        """Undoes the record of a LeaderAndIsr state that could not be applied, so that the same epoch is taken
        when the controller sends it again."""
        if previous is None:
            self.partitions.pop(tp, None)
        else:
            self.partitions[tp] = previous

    def stop_replicas(self, request: pb.StopReplicaRequest) -> pb.StopReplicaResponse:
        error = self._fence(request.controller_epoch, request.broker_epoch)
        if error != ErrorCode.none:
            return pb.StopReplicaResponse(error_code=error.value)
        errors = []
        for part in request.partitions:
            tp = (part.topic, part.partition)
            current = self.partitions.get(tp)
            code = ErrorCode.none
            # -2: topic being deleted, -1: epoch unknown; otherwise only a newer epoch may stop us.
            if current is not None and part.leader_epoch not in (-1, -2) and part.leader_epoch <= current.leader_epoch:
                code = ErrorCode.fenced_leader_epoch
            elif current is not None:
                del self.partitions[tp]
                self.on_role_change(None, tp, "stopped")
            errors.append(pb.PartitionError(topic=part.topic, partition=part.partition, error_code=code.value))
        return pb.StopReplicaResponse(error_code=0, partition_errors=errors)

    def leader_partitions(self) -> list[TopicPartition]:
        return sorted(tp for tp, state in self.partitions.items() if state.is_leader(self.broker_id))


class ReplicaIO:
    """Produce, fetch and DeleteRecords through the Partitions hosted here, with the acks=all, long-poll and
    delete-records purgatories."""

    def __init__(self, manager: ReplicaManager, *,
                 known_in_metadata: Callable[[TopicPartition], bool],
                 min_insync_replicas: Callable[[Partition], int],
                 on_isr_proposal: Callable[[IsrProposal], None] | None = None,
                 is_broker_alive: Callable[[int], bool] = lambda broker_id: True) -> None:
        self.manager = manager
        self.hosted: dict[TopicPartition, Partition] = {}
        # replicas in an offline log directory (Kafka's HostedPartition.Offline), until the process ends
        self.offline: set[TopicPartition] = set()
        self.produce_purgatory = DelayedOperationPurgatory("Produce")
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch")
        self.delete_records_purgatory = DelayedOperationPurgatory("DeleteRecords")
        self._is_broker_alive = is_broker_alive
        self.topic_stats = BrokerTopicStats()
        self._known_in_metadata = known_in_metadata
        self._min_insync = min_insync_replicas
        self.on_isr_proposal = on_isr_proposal or (lambda proposal: None)
        self.on_high_watermark: Callable[[Partition], None] = lambda partition: None
        # tracing hooks: (partition, follower, HW moved, follower LEO before the fetch); (purgatory, expired, keys)
        self.on_follower_fetch: Callable[[Partition, int, bool, int], None] = lambda *args: None
        self.on_delayed_finished: Callable[[str, bool, list[TopicPartition]], None] = lambda *args: None
        # a leader's log start moved by DeleteRecords: its segments below go, the checkpoint is written, traced
        self.on_log_start_moved: Callable[[Partition], None] = lambda partition: None
        # transactions: a marker a leader appended; a leader's LSO leaving, moving behind or rejoining its HW
        self.on_txn_marker: Callable[[Partition, TxnMarkerAppended], None] = lambda *args: None
        self.on_last_stable_offset: Callable[[Partition, LastStableOffsetReport], None] = lambda *args: None
        # the followers' incremental fetch sessions watching each partition led here (replication_service opens them)
        self._sessions_of: dict[TopicPartition, set[LeaderFetchSession]] = {}
        # leader partitions where an ISR follower may be behind the LEO: the only ones the ISR expiry looks at
        self._maybe_lagging: set[TopicPartition] = set()
        # leader partitions with a replica outside the ISR, or an ISR change in flight: a session fetch that does
        # not name them (nothing changed for the follower) still re-checks whether its follower may join the ISR
        self._expansion_candidates: set[TopicPartition] = set()
        # bumped whenever a hosted partition's HW may have moved (or a partition came or went): the periodic HW
        # checkpoint skips collecting every partition's HW while it is unchanged
        self.high_watermark_generation = 0

    # --- lookup -------------------------------------------------------------------------------------

    def partition_or_error(self, tp: TopicPartition) -> Partition:
        partition = self.hosted.get(tp)
        if partition is not None:
            return partition
        if tp in self.offline:
            raise PartitionError(ErrorCode.kafka_storage_error,
                                 f"{tp[0]}-{tp[1]} is in an offline log directory of broker {self.manager.broker_id}")
        # Kafka's getPartitionOrException: a partition the cluster knows but this broker does not host
        # sends the client back to Metadata; one nobody knows is unknown.
        if tp in self.manager.partitions or self._known_in_metadata(tp):
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"broker {self.manager.broker_id} does not lead {tp[0]}-{tp[1]}")
        raise PartitionError(ErrorCode.unknown_topic_or_partition, f"{tp[0]}-{tp[1]} does not exist")

    def leader_partition(self, tp: TopicPartition) -> Partition:
        partition = self.partition_or_error(tp)
        if not partition.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"broker {self.manager.broker_id} is not the leader of {tp[0]}-{tp[1]}")
        return partition

    def _touch_sessions(self, tp: TopicPartition) -> None:
        """Something changed for the followers fetching ``tp`` in sessions: their next answer looks at it, and a
        parked fetch of theirs checks it now."""
        sessions = self._sessions_of.get(tp)
        if sessions:
            for session in tuple(sessions):
                session.touched.add(tp)
                self.fetch_purgatory.check_and_complete(FetchSessionKey(session.session_id))

    def wake(self, tp: TopicPartition, high_watermark_moved: bool) -> None:
        key = TopicPartitionOperationKey(*tp)
        if high_watermark_moved:
            self.high_watermark_generation += 1
            partition = self.hosted.get(tp)
            if partition is not None:
                self.on_high_watermark(partition)
                if partition.lso_watched:
                    self._trace_last_stable_offset(partition)
            self.produce_purgatory.check_and_complete(key)
            self.delete_records_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)
        self._touch_sessions(tp)

    # --- produce ------------------------------------------------------------------------------------

    def append_records(self, entries: dict[TopicPartition, bytes], required_acks: int, timeout_ms: int,
                       now_ms: int, respond: Callable[[dict[TopicPartition, ProducePartitionStatus]], None],
                       check: Callable[[Partition, bytes], ProducePartitionStatus | None] | None = None,
                       from_coordinator: bool = False) -> None:
        """Append each partition's records as leader; ``check`` may answer a partition without appending
        (an idempotent producer's duplicate or a sequence error). ``from_coordinator``: transaction markers
        (Kafka's AppendOrigin.Coordinator), which no client may write."""
        statuses: dict[TopicPartition, ProducePartitionStatus] = {}
        if required_acks not in (-1, 0, 1):
            respond({tp: ProducePartitionStatus(ErrorCode.invalid_required_acks) for tp in entries})
            return
        for tp, records in entries.items():
            statuses[tp] = status = self._append_one(tp, records, required_acks, now_ms, check, from_coordinator)
            self.topic_stats.record_produce(tp[0], failed=status.error != ErrorCode.none)
            if status.error == ErrorCode.none and status.required_offset >= 0:
                status.acks_pending = required_acks == -1
        if not any(status.acks_pending for status in statuses.values()):
            respond(statuses)
            return
        operation = DelayedProduce(timeout_ms, statuses, self.partition_or_error, self._min_insync, respond,
                                   on_finished=self.on_delayed_finished)
        keys = [TopicPartitionOperationKey(*tp) for tp, status in statuses.items() if status.acks_pending]
        self.produce_purgatory.try_complete_else_watch(operation, keys, now_ms)

    def _append_one(self, tp: TopicPartition, records: bytes, required_acks: int, now_ms: int,
                    check: Callable[[Partition, bytes], ProducePartitionStatus | None] | None,
                    from_coordinator: bool = False) -> ProducePartitionStatus:
        try:
            partition = self.leader_partition(tp)
            partition.check_enough_isr(required_acks, self._min_insync(partition), records)
            # Kafka checks the ISR first, then Log.append refuses an offline log dir before validating the batch:
            # between an I/O error and the replicas going offline (a few ms here), a batch behind the one that
            # failed must be answered KAFKA_STORAGE_ERROR (retriable), not OUT_OF_ORDER_SEQUENCE_NUMBER, which
            # makes librdkafka bump its epoch and re-send, under new sequences, batches the log already holds.
            partition.log.check_online()
            early = check(partition, records) if check is not None else None
            if early is not None:
                return early
            before = partition.high_watermark
            end_before = partition.log_end_offset
            info = partition.append_records_to_leader(records, required_acks, self._min_insync(partition), now_ms,
                                                      from_coordinator=from_coordinator)
            if partition.log_end_offset != end_before:
                self._followers_caught_up_until_now(tp, partition, end_before)
        except PartitionError as exc:
            return ProducePartitionStatus(exc.error_code, error_message=str(exc))
        except (InvalidRecordBatchError, KafkaStorageError) as exc:
            return ProducePartitionStatus(exc.error_code, error_message=str(exc))
        if info is not None and from_coordinator:
            for marker in partition.appended_markers:
                self.on_txn_marker(partition, marker)
        if partition.lso_watched:
            self._trace_last_stable_offset(partition)
        if info is not None:
            # Kafka's BytesInPerSec: the records' size as received (the stored batch differs only in two fields)
            self.topic_stats.record_append(tp[0], len(records), info.last_offset - info.first_offset + 1)
        self.wake(tp, partition.high_watermark > before)
        if info is None:
            return ProducePartitionStatus(ErrorCode.none, log_start_offset=partition.log.log_start_offset)
        return ProducePartitionStatus(ErrorCode.none, base_offset=info.first_offset,
                                      log_append_time=info.log_append_time,
                                      log_start_offset=info.log_start_offset,
                                      required_offset=info.last_offset + 1)

    def _trace_last_stable_offset(self, partition: Partition) -> None:
        report = partition.last_stable_offset_change()
        if report is not None:
            self.on_last_stable_offset(partition, report)

    # --- delete records -----------------------------------------------------------------------------

    def delete_records(self, offsets: dict[TopicPartition, int], timeout_ms: int, now_ms: int,
                       respond: Callable[[dict[TopicPartition, DeleteRecordsPartitionStatus]], None]) -> None:
        """Kafka's ReplicaManager.deleteRecords: each leader moves its log start offset at once (-1: to the high
        watermark); the answer waits in the delete-records purgatory until the low watermark reaches every
        requested offset, or the timeout."""
        statuses: dict[TopicPartition, DeleteRecordsPartitionStatus] = {}
        for tp, offset in offsets.items():
            try:
                partition = self.partition_or_error(tp)
                start_before = partition.log.log_start_offset
                requested = partition.delete_records_on_leader(offset)
            except PartitionError as exc:
                statuses[tp] = DeleteRecordsPartitionStatus(exc.error_code, error_message=str(exc))
                continue
            except (OffsetOutOfRangeError, KafkaStorageError) as exc:
                statuses[tp] = DeleteRecordsPartitionStatus(exc.error_code, error_message=str(exc))
                continue
            if partition.log.log_start_offset != start_before:
                self.on_log_start_moved(partition)
                self._touch_sessions(tp)
            statuses[tp] = DeleteRecordsPartitionStatus(ErrorCode.none, low_watermark=self._low_watermark(tp),
                                                        required_offset=requested, acks_pending=True)
        if not any(status.acks_pending for status in statuses.values()):
            respond(statuses)
            return
        operation = DelayedDeleteRecords(timeout_ms, statuses, self._low_watermark, respond,
                                         on_finished=self.on_delayed_finished)
        keys = [TopicPartitionOperationKey(*tp) for tp in offsets]
        self.delete_records_purgatory.try_complete_else_watch(operation, keys, now_ms)

    def _low_watermark(self, tp: TopicPartition) -> int:
        return self.leader_partition(tp).low_watermark(self._is_broker_alive)

    # --- fetch --------------------------------------------------------------------------------------

    def fetch_messages(self, params: FetchParams, now_ms: int,
                       respond: Callable[[dict[TopicPartition, FetchPartitionResult]], None]) -> None:
        """Answer at once if there is enough to read (or an error), else park in the fetch purgatory."""
        respond = self._counting_fetch(params, respond)
        if params.replica_id >= 0:
            self._update_follower_fetch_states(params, now_ms)
        results = self.read_from_local_logs(params)
        available = sum(r.read.size for r in results.values() if r.read is not None)
        immediate = (params.max_wait_ms <= 0 or not params.partitions or available >= params.min_bytes
                     or any(r.error != ErrorCode.none or r.diverging_epoch is not None for r in results.values()))
        if immediate:
            respond(results)
            return
        operation = DelayedFetch(params, self.read_from_local_logs, respond, on_finished=self.on_delayed_finished)
        keys = [TopicPartitionOperationKey(p.topic, p.partition) for p in params.partitions]
        # the read above is the first try: a second one (every partition again) cost a sixth of an idle
        # broker's CPU at 1000 partitions
        self.fetch_purgatory.watch(operation, keys, now_ms)

    # --- incremental fetch sessions (KIP-227) ------------------------------------------------------------

    def update_session(self, session: LeaderFetchSession, request: SessionRequest) -> ErrorCode:
        """Applies a follower's request to its session and keeps the partitions' watchers in step with it."""
        error, added, removed = session.update(request)
        for tp in added:
            self._sessions_of.setdefault(tp, set()).add(session)
        for tp in removed:
            self._unwatch_session(tp, session)
        return error

    def close_session(self, session: LeaderFetchSession) -> None:
        """The follower's stream ended: its session goes, with any fetch of it still parked."""
        for tp in session.positions:
            self._unwatch_session(tp, session)
        session.positions = {}
        for operation in self.fetch_purgatory.cancel_for_key(FetchSessionKey(session.session_id)):
            operation.force_complete()

    def _unwatch_session(self, tp: TopicPartition, session: LeaderFetchSession) -> None:
        sessions = self._sessions_of.get(tp)
        if sessions is not None:
            sessions.discard(session)
            if not sessions:
                del self._sessions_of[tp]

    def session_fetch(self, session: LeaderFetchSession, named: FetchParams, now_ms: int,
                      respond: Callable[[dict[TopicPartition, FetchPartitionResult]], None]) -> None:
        """A follower's fetch in its session: the partitions it named (their positions changed) update the
        leader's view of it as any replica fetch does; the answer holds only the session's partitions with
        something new, at once if there are records or errors, else when one of them gets some (woken through
        the session's one watch key) or at max_wait_ms."""
        session.last_fetch_ms = now_ms
        if named.partitions:
            self._update_follower_fetch_states(named, now_ms)
        if self._expansion_candidates:
            self._maybe_expand_isrs(session)
        respond = self._counting_fetch(named, respond)
        broker_id = self.manager.broker_id
        # What may have something new: the partitions named now, and those woken (append, HW move, role change,
        # log start moved by DeleteRecords) since the last answer. Every FULL_CHECK_EVERY-th fetch looks at all
        # of the session's partitions, for what no wake reports (retention moving a log start, an answer the
        # follower dropped because the partition was re-added meanwhile).
        session.fetches += 1
        full_check = session.fetches % FULL_CHECK_EVERY == 1
        woken = None if full_check else {(p.topic, p.partition) for p in named.partitions} | session.touched
        session.touched = set()

        def read(among: set[TopicPartition] | None) -> dict[TopicPartition, FetchPartitionResult]:
            answer = session.partitions_to_answer(self.hosted, broker_id, among)
            return self.read_from_local_logs(self._session_params(session, named, answer)) if answer else {}

        results = read(woken)
        available = sum(r.read.size for r in results.values() if r.read is not None)
        if (named.max_wait_ms <= 0 or available >= max(named.min_bytes, 1)
                or any(r.error != ErrorCode.none for r in results.values())):
            respond(results)
            return
        operation = DelayedSessionFetch(
            named.max_wait_ms, session,
            lambda touched: session.has_data_or_error(self.hosted, broker_id, touched),
            lambda touched: respond(read(None if woken is None else woken | touched)))
        self.fetch_purgatory.watch(operation, [FetchSessionKey(session.session_id)], now_ms)

    def _maybe_expand_isrs(self, session: LeaderFetchSession) -> None:
        """Kafka's maybeExpandIsr runs on every fetch of a partition; a session fetch names a partition only when
        the follower moved, so one whose earlier expansion could not be proposed then (another ISR change in
        flight, a refused write) is looked at again here, among the few partitions with a replica outside the ISR."""
        follower_id = session.replica_id
        for tp in list(self._expansion_candidates):
            partition = self.hosted.get(tp)
            if partition is None or not partition.is_leader:
                self._expansion_candidates.discard(tp)
                continue
            if partition.pending_isr is None and all(f in partition.isr for f in partition.followers):
                self._expansion_candidates.discard(tp)
                continue
            if tp in session.positions:
                proposal = partition.isr_to_expand(follower_id)
                if proposal is not None:
                    self._propose(proposal)

    def _propose(self, proposal: IsrProposal) -> None:
        # the outcome (committed, refused, failed) may leave a replica outside the ISR, re-checked on later fetches,
        # or bring in one still behind the LEO, for the ISR expiry to watch
        tp = (proposal.topic, proposal.partition)
        self._expansion_candidates.add(tp)
        self._maybe_lagging.add(tp)
        self.on_isr_proposal(proposal)

    @staticmethod
    def _session_params(session: LeaderFetchSession, named: FetchParams,
                        partitions: list[TopicPartition]) -> FetchParams:
        positions = session.positions
        return FetchParams(
            replica_id=named.replica_id, max_wait_ms=0, min_bytes=0, max_bytes=named.max_bytes,
            isolation=FetchIsolation.LOG_END,
            partitions=[FetchPartitionRequest(tp[0], tp[1], positions[tp].fetch_offset,
                                              positions[tp].partition_max_bytes,
                                              current_leader_epoch=positions[tp].current_leader_epoch,
                                              log_start_offset=positions[tp].log_start_offset)
                        for tp in partitions])

    def _followers_caught_up_until_now(self, tp: TopicPartition, partition: Partition, end_before: int) -> None:
        """The leader's LEO moved past ``end_before``. A follower whose session holds the partition at that offset
        was caught up at its session's last fetch (Kafka's lastCaughtUpTimeMs, which Kafka updates on every fetch
        for every partition of the session; here only named partitions are touched per fetch). The partition may
        now have a lagging ISR follower for the ISR expiry to watch."""
        self._maybe_lagging.add(tp)
        sessions = self._sessions_of.get(tp)
        if not sessions:
            return
        for session in sessions:
            follower = partition.followers.get(session.replica_id)
            position = session.positions.get(tp)
            if follower is not None and position is not None and follower.log_end_offset >= end_before:
                follower.last_caught_up_time_ms = max(follower.last_caught_up_time_ms, session.last_fetch_ms)

    def _counting_fetch(self, params: FetchParams, respond: Callable[[dict[TopicPartition, FetchPartitionResult]], None]
                        ) -> Callable[[dict[TopicPartition, FetchPartitionResult]], None]:
        """Kafka counts fetched bytes when the response is sent: BytesOutPerSec for consumers,
        ReplicationBytesOutPerSec for followers."""
        stats = self.topic_stats

        def counted(results: dict[TopicPartition, FetchPartitionResult]) -> None:
            if params.replica_id >= 0:
                stats.replication_bytes_out += sum(r.read.size for r in results.values() if r.read is not None)
            else:
                for (topic, _), result in results.items():
                    stats.record_fetch(topic, result.read.size if result.read is not None else 0,
                                       failed=result.error != ErrorCode.none)
            respond(results)

        return counted

    def _update_follower_fetch_states(self, params: FetchParams, now_ms: int) -> None:
        for request in params.partitions:
            tp = (request.topic, request.partition)
            partition = self.hosted.get(tp)
            if partition is None or not partition.is_leader:
                continue
            try:
                partition.check_leader_epoch(request.current_leader_epoch)
                if request.fetch_offset > partition.log_end_offset:
                    continue  # a diverged follower: it truncates first, its LEO means nothing yet
                if request.fetch_offset != partition.log_end_offset:
                    self._maybe_lagging.add(tp)
                follower = partition.followers.get(params.replica_id)
                previous_leo = follower.log_end_offset if follower is not None else -1
                previous_start = follower.log_start_offset if follower is not None else -1
                moved = partition.update_follower_fetch_state(params.replica_id, request.fetch_offset,
                                                              request.log_start_offset, partition.log_end_offset,
                                                              now_ms)
            except PartitionError:
                continue
            if request.log_start_offset != previous_start:
                # the follower's log start moved (it followed ours): the low watermark may have reached a
                # waiting DeleteRecords (Kafka's leaderLWIncremented)
                self.delete_records_purgatory.check_and_complete(TopicPartitionOperationKey(*tp))
            self.on_follower_fetch(partition, params.replica_id, moved, previous_leo)
            proposal = partition.isr_to_expand(params.replica_id)
            if proposal is not None:
                self._propose(proposal)
            elif params.replica_id not in partition.isr:
                self._expansion_candidates.add(tp)
            if moved:
                self.wake(tp, True)

    def read_from_local_logs(self, params: FetchParams) -> dict[TopicPartition, FetchPartitionResult]:
        results: dict[TopicPartition, FetchPartitionResult] = {}
        budget = params.max_bytes
        for request in params.partitions:
            tp = (request.topic, request.partition)
            try:
                partition = self.leader_partition(tp)
                # Kafka returns at least one batch, however large, for the first partition with data,
                # so a consumer or follower never stalls on a batch bigger than its limits.
                read = partition.read_records(request.fetch_offset, max(0, min(request.max_bytes, budget)),
                                              isolation=params.isolation,
                                              current_leader_epoch=request.current_leader_epoch,
                                              min_one_message=budget == params.max_bytes)
            except PartitionError as exc:
                results[tp] = partition_error(exc)
                continue
            except OffsetOutOfRangeError as exc:
                results[tp] = FetchPartitionResult(ErrorCode.offset_out_of_range, error_message=str(exc))
                continue
            except KafkaStorageError as exc:
                results[tp] = FetchPartitionResult(ErrorCode.kafka_storage_error, error_message=str(exc))
                continue
            budget -= read.size
            results[tp] = FetchPartitionResult(ErrorCode.none, read)
        return results

    # --- lifecycle ----------------------------------------------------------------------------------

    def attach(self, partition: Partition) -> None:
        self.hosted[partition.topic_partition] = partition
        self.high_watermark_generation += 1
        self._maybe_lagging.add(partition.topic_partition)  # the ISR expiry has a look, if it leads here
        self._expansion_candidates.add(partition.topic_partition)

    def detach(self, tp: TopicPartition) -> Partition | None:
        removed = self.hosted.pop(tp, None)
        self.wake(tp, True)  # parked produces and fetches answer NOT_LEADER / UNKNOWN now
        return removed

    def mark_offline(self, partitions: list[TopicPartition]) -> None:
        """Kafka's markPartitionOffline: the replicas' log directory failed. Requests for them are answered
        KAFKA_STORAGE_ERROR from now on, parked produces and fetches at once, so no produce waiting for
        acks=all is ever acknowledged by this broker."""
        for tp in partitions:
            self.hosted.pop(tp, None)
            self.offline.add(tp)
            self.wake(tp, True)

    def shrink_isrs(self, now_ms: int) -> None:
        """Kafka's isr-expiration task: propose dropping followers that fell behind (run every lag/2). Only an ISR
        member behind the LEO can be out of sync, and a follower falls behind only when the leader appends, becomes
        leader, or the follower fetches from below the LEO: those partitions are noted, and the others, all caught
        up, are not looked at."""
        for tp in list(self._maybe_lagging):
            partition = self.hosted.get(tp)
            if partition is None or not partition.is_leader:
                self._maybe_lagging.discard(tp)
                continue
            proposal = partition.isr_to_shrink(now_ms)
            if proposal is not None:
                self._propose(proposal)
            leo = partition.log_end_offset
            if all(f.log_end_offset == leo for f in partition.followers.values() if f.broker_id in partition.isr):
                self._maybe_lagging.discard(tp)

    def leadership_changed(self, tp: TopicPartition) -> None:
        """A partition became leader here (or its epoch changed): its followers have to fetch in the new epoch."""
        self._maybe_lagging.add(tp)
        self._expansion_candidates.add(tp)

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: partition.high_watermark for tp, partition in self.hosted.items()}
