"""Every state change kafkasim traces, as one typed event each.

One JSON object per line. The ``event`` field names the type; ``schema_version`` lets readers refuse
files written by an incompatible kafkasim. The analysis package derives its Spark schema from these
models, so they are the only definition.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

# 2: replica lags and reasons on ISR changes, bytes dropped by truncations, replicas on elections, and the
# leader-side replica, fetch, purgatory and control-request-received events
SCHEMA_VERSION = 2


class TraceEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    ts_ms: float = 0.0            # wall clock, epoch milliseconds
    mono_ns: int = 0              # monotonic clock of the writing process
    broker_id: int = -1
    controller_epoch: int | None = None


class ControllerElected(TraceEvent):
    event: Literal["controller_elected"] = "controller_elected"
    epoch_zk_version: int


class ControllerResigned(TraceEvent):
    event: Literal["controller_resigned"] = "controller_resigned"
    reason: str


class ControllerLoaded(TraceEvent):
    """The new controller has read every topic and partition state, made every partition it could whole and sent
    the brokers their requests (the end of Kafka's onControllerFailover): from here it serves the next event."""

    event: Literal["controller_loaded"] = "controller_loaded"
    partitions: int
    duration_ms: float       # from winning the election


class ControllerWriteFenced(TraceEvent):
    """ZooKeeper refused a write of this controller: the multi-op's first op, a check of /controller_epoch's
    zkVersion, failed with BADVERSION, because another controller was elected since and bumped it (Kafka's
    ControllerMovedException, "Controller epoch zkVersion check fails"). Nothing of the write was applied.
    ``controller_epoch`` is the deposed controller's epoch, ``operation`` the event it was handling, ``write`` what it
    tried to write and ``expected_epoch_zk_version`` the zkVersion of /controller_epoch it was elected at."""

    event: Literal["controller_write_fenced"] = "controller_write_fenced"
    operation: str
    write: str = ""
    expected_epoch_zk_version: int = -1


class BrokerRegistered(TraceEvent):
    event: Literal["broker_registered"] = "broker_registered"
    broker_epoch: int
    endpoints: list[str]


class SessionStateChanged(TraceEvent):
    event: Literal["session_state_changed"] = "session_state_changed"
    state: str
    session_id: int | None = None


class BrokerMembershipChanged(TraceEvent):
    """The controller's view of /brokers/ids changed."""

    event: Literal["broker_membership_changed"] = "broker_membership_changed"
    new_brokers: list[int]
    dead_brokers: list[int]
    bounced_brokers: list[int]
    broker_epochs: dict[int, int]


class BrokerExpired(TraceEvent):
    """The controller saw a broker's registration go (its ZooKeeper session ended): one per broker."""

    event: Literal["broker_expired"] = "broker_expired"
    expired_broker: int
    broker_epoch: int


class LeaderElected(TraceEvent):
    """The controller wrote a new leader (or none) and leader epoch to a partition state znode."""

    event: Literal["leader_elected"] = "leader_elected"
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    previous_leader: int
    zk_version: int
    election: Literal["initial", "offline", "unclean", "controlled_shutdown", "isr_removal", "preferred",
                      "reassignment"]
    replicas: list[int] = []   # the assignment, so under-replication can be told from the trace alone


class TopicCreated(TraceEvent):
    event: Literal["topic_created"] = "topic_created"
    topic: str
    assignment: dict[int, list[int]]


class PartitionsAdded(TraceEvent):
    """CreatePartitions (or a rewritten /brokers/topics/<t>) gave a topic new partitions; the controller
    takes them online next (leader_elected events with election "initial")."""

    event: Literal["partitions_added"] = "partitions_added"
    topic: str
    assignment: dict[int, list[int]]   # the added partitions only


class PartitionReassignmentStep(TraceEvent):
    """A step of a partition reassignment (KIP-455), as the controller took it. ``phase``: "started" (RS, AR and RR
    written to the topic znode), "replaced" (an earlier reassignment's extra replicas stopped: a new target or a
    cancellation), "adding" (leader epoch bumped, LeaderAndIsr to every replica: the new ones fetch),
    "leader_moved" (the target is in the ISR; leader chosen in the target), "replicas_removed" (out of the ISR,
    StopReplica with delete), "completed" (the topic znode lists the target only)."""

    event: Literal["partition_reassignment_step"] = "partition_reassignment_step"
    topic: str
    partition: int
    phase: str
    replicas: list[int]
    adding_replicas: list[int] = []
    removing_replicas: list[int] = []
    detail: str = ""


class TopicDeleted(TraceEvent):
    event: Literal["topic_deleted"] = "topic_deleted"
    topic: str


class TopicConfigChanged(TraceEvent):
    """A /config/changes notification named the topic: this broker read its dynamic config again and gave it to
    its ``local_logs`` logs of the topic (0: none here; the controller re-reads it too)."""

    event: Literal["topic_config_changed"] = "topic_config_changed"
    topic: str
    topic_overrides: dict[str, str]
    local_logs: int


class BrokerConfigChanged(TraceEvent):
    """This broker applied a dynamic broker config: its own (``entity`` its id) or the cluster-wide default
    (``<default>``), read at start or on a /config/changes notification. ``dynamic_config`` is that entity's whole
    dynamic config, ``local_logs`` how many of this broker's logs took new defaults."""

    event: Literal["broker_config_changed"] = "broker_config_changed"
    entity: str
    dynamic_config: dict[str, str]
    local_logs: int


class ControlRequestReceived(TraceEvent):
    """A control request arrived; its ControlRequestApplied follows once it was applied (or refused)."""

    event: Literal["control_request_received"] = "control_request_received"
    request: Literal["LeaderAndIsr", "UpdateMetadata", "StopReplica"]
    from_controller: int
    request_controller_epoch: int
    partitions: int


class ControlRequestApplied(TraceEvent):
    """A broker received a control request and applied it, or refused it with ``error_code``."""

    event: Literal["control_request_applied"] = "control_request_applied"
    request: Literal["LeaderAndIsr", "UpdateMetadata", "StopReplica"]
    from_controller: int
    request_controller_epoch: int
    partitions: int
    error_code: int


class ControlRequestFenced(TraceEvent):
    """A broker refused a control request with STALE_CONTROLLER_EPOCH: it came from a controller older than the newest
    this broker has heard from (``request_controller_epoch`` < ``highest_controller_epoch_seen``), a deposed one still
    acting. Nothing of it was applied (Kafka's ReplicaManager.becomeLeaderOrFollower, stopReplicas and
    maybeUpdateMetadataCache)."""

    event: Literal["control_request_fenced"] = "control_request_fenced"
    request: Literal["LeaderAndIsr", "UpdateMetadata", "StopReplica"]
    from_controller: int
    request_controller_epoch: int
    highest_controller_epoch_seen: int
    partitions: int


class ReplicaRoleChanged(TraceEvent):
    event: Literal["replica_role_changed"] = "replica_role_changed"
    topic: str
    partition: int
    role: Literal["leader", "follower", "stopped"]
    leader: int
    leader_epoch: int
    isr: list[int]


class ControlledShutdownStep(TraceEvent):
    """A step of a controlled shutdown. On the stopping broker: "requested" (an attempt sent; its answer follows as
    ControlledShutdownAttempt), "succeeded" (no partition left), "failed" (out of attempts: the broker stops anyway,
    and the partitions it still leads go offline when the controller handles its death); "retrying" only in older
    traces. On the controller: "handled", with the partitions still led by the broker (``remaining``)."""

    event: Literal["controlled_shutdown"] = "controlled_shutdown"
    phase: Literal["requested", "succeeded", "retrying", "failed", "handled"]
    remaining_partitions: int = 0
    remaining: list[str] = []   # "topic-partition"
    detail: str = ""


class ControlledShutdownAttempt(TraceEvent):
    """The controller's answer to one ControlledShutdown attempt of this broker (Kafka's
    KafkaServer.controlledShutdown): ``remaining`` are the partitions it still leads ("topic-partition"), those
    whose only live ISR member is this broker. With an error or a partition remaining the broker waits
    ``backoff_ms`` (controlled.shutdown.retry.backoff.ms) and, while attempts are left (``attempt`` of
    ``max_attempts``, controlled.shutdown.max.retries), asks again; ``controller`` is -1 when none was reachable."""

    event: Literal["controlled_shutdown_attempt"] = "controlled_shutdown_attempt"
    attempt: int
    max_attempts: int
    controller: int
    error_code: int
    remaining: list[str]
    backoff_ms: int = 0
    detail: str = ""


class BrokerStopped(TraceEvent):
    event: Literal["broker_stopped"] = "broker_stopped"
    clean: bool


class LogDirFailed(TraceEvent):
    """An I/O error took a log directory offline (Kafka's LogDirFailureChannel); its replicas stopped being
    served here. With no log directory left the broker halts right after this event."""

    event: Literal["log_dir_failed"] = "log_dir_failed"
    log_dir: str
    error: str
    offline_partitions: list[str]


class LogCleaned(TraceEvent):
    """The log cleaner compacted one replica's log (Kafka's "Cleaner 0: Log ... cleaned" statistics): offsets
    [first_dirty_offset, end_offset) were mapped (``dirty_bytes`` read, ``keys`` keys), the segments from the log
    start to ``end_offset`` rewritten into ``segments_after`` segments, ``end_offset`` checkpointed."""

    event: Literal["log_cleaned"] = "log_cleaned"
    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    dirty_bytes: int
    records_read: int
    records_kept: int
    keys: int
    duration_ms: float


class ProduceAcknowledged(TraceEvent):
    """A produce answered for one partition (acks=0: the append, no answer sent). ``end_offset`` is the
    offset after the batch; on error nothing was appended and both offsets are -1."""

    event: Literal["produce_acknowledged"] = "produce_acknowledged"
    topic: str
    partition: int
    acks: int
    error: str
    base_offset: int
    end_offset: int


class ReplicaLag(BaseModel):
    """How far one follower was behind, as its leader saw it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replica: int
    log_end_offset: int
    lag_offsets: int   # leader LEO - follower LEO
    lag_ms: int        # time since the follower was last caught up; -1: never, under this leader


class IsrChanged(TraceEvent):
    """A leader's ISR change was written to ZooKeeper (compare-and-set succeeded)."""

    event: Literal["isr_changed"] = "isr_changed"
    topic: str
    partition: int
    kind: Literal["shrink", "expand"]
    old_isr: list[int]
    new_isr: list[int]
    leader_epoch: int
    zk_version: int
    reason: str = ""
    lags: list[ReplicaLag] = []    # the replicas that left or joined, at the time of the change


class FollowerTruncated(TraceEvent):
    """A follower cut its log before fetching from a (new) leader."""

    event: Literal["follower_truncated"] = "follower_truncated"
    topic: str
    partition: int
    rule: str
    leader: int
    leader_epoch: int
    from_offset: int
    to_offset: int
    bytes_dropped: int = 0


class HighWatermarkUpdated(TraceEvent):
    event: Literal["high_watermark_updated"] = "high_watermark_updated"
    topic: str
    partition: int
    high_watermark: int
    log_end_offset: int
    role: Literal["leader", "follower"]


class FollowerFetchStateUpdated(TraceEvent):
    """The leader's view of one follower after a fetch: its LEO, the leader's LEO and HW, the lag.

    Coalesced per replica (at most one per ``kafkasim.trace.replica.interval.ms``), but always written when
    the HW moved, when the follower caught up to the leader's LEO or first fetched in this epoch, so a
    timeline never misses the fetch that advanced the HW or closed a gap."""

    event: Literal["follower_fetch_state_updated"] = "follower_fetch_state_updated"
    topic: str
    partition: int
    replica: int
    leader_epoch: int
    log_end_offset: int
    leader_log_end_offset: int
    high_watermark: int
    lag_ms: int          # since the follower was last caught up; -1: never, under this leader
    in_isr: bool
    coalesced: int = 0   # updates folded into this one since the previous event for this replica


class LogStartOffsetIncremented(TraceEvent):
    """A replica's log start offset moved forward: on the leader by DeleteRecords, on a follower because the
    leader's did (learnt from a fetch). Whole segments below it were deleted from disk at once."""

    event: Literal["log_start_offset_incremented"] = "log_start_offset_incremented"
    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    role: Literal["leader", "follower"]
    reason: Literal["delete_records", "leader_log_start"]
    segments_deleted: int


class FetchServed(TraceEvent):
    """Replica fetches a leader answered for one follower, summed over a coalescing interval."""

    event: Literal["fetch_served"] = "fetch_served"
    follower: int
    fetches: int
    partitions: int        # partition entries over those fetches (a fetch session names only those that moved)
    last_fetch_offsets: dict[str, int]   # "topic-partition" -> the latest fetch offset named
    bytes: int
    wait_ms_total: float
    wait_ms_max: float


class DelayedOperationFinished(TraceEvent):
    """Parked produces/fetches that completed or expired. Expiries are written one by one; completions are
    summed over the coalescing interval."""

    event: Literal["delayed_operation_finished"] = "delayed_operation_finished"
    purgatory: Literal["Produce", "Fetch", "DeleteRecords"]
    outcome: Literal["completed", "expired"]
    count: int
    waited_on: list[str]  # "topic-partition"s of an expired produce; empty for summed ones


class GroupStateChanged(TraceEvent):
    """A consumer group's coordinator moved the group to another state (Kafka's GroupState names)."""

    event: Literal["group_state_changed"] = "group_state_changed"
    group_id: str
    old_state: str
    new_state: Literal["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    generation_id: int
    members: int
    protocol: str | None = None
    reason: str = ""


class TransactionStateChanged(TraceEvent):
    """A transaction coordinator moved a transactional id to another state (Kafka's TransactionState names),
    written once the change is durable in ``__transaction_state`` (PrepareEpochFence lives in memory only)."""

    event: Literal["transaction_state_changed"] = "transaction_state_changed"
    transactional_id: str
    producer_id: int
    producer_epoch: int
    old_state: str
    new_state: Literal["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                       "Dead", "PrepareEpochFence"]
    txn_partitions: list[str]      # "topic-partition"s in the transaction
    coordinator_epoch: int         # the leader epoch of the coordinator's __transaction_state partition
    state_partition: int           # that partition
    reason: str = ""               # e.g. "EndTxn(commit)", "timed out", "fenced by InitProducerId"


class TxnMarkerWritten(TraceEvent):
    """A partition leader appended a transaction's COMMIT or ABORT marker (a control batch) at ``offset``."""

    event: Literal["txn_marker_written"] = "txn_marker_written"
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    marker: Literal["COMMIT", "ABORT"]
    offset: int
    coordinator_epoch: int


class LastStableOffsetChanged(TraceEvent):
    """A leader's last stable offset stopped following its high watermark (a transaction is open below it) or
    moved while held (a transaction ended). Not written while LSO = HW and nothing is open."""

    event: Literal["last_stable_offset_changed"] = "last_stable_offset_changed"
    topic: str
    partition: int
    last_stable_offset: int
    high_watermark: int
    open_transactions: int


class FaultInjected(TraceEvent):
    """kafkasim's own tools broke something on purpose (``broker_id`` is the victim, -1 for none)."""

    event: Literal["fault_injected"] = "fault_injected"
    action: str            # kill, pause, resume, start, disconnect, connect, ...
    target: str            # what was hit, e.g. "broker 2 (pid 1234)" or a container name
    detail: str = ""


class ScenarioStep(TraceEvent):
    """A classroom scenario began a step (``outcome`` "started", with its narration and predictions) or finished
    it ("held", "did not hold"). Written by ``kafkasim scenario run`` into the tools' trace."""

    event: Literal["scenario_step"] = "scenario_step"
    scenario: str
    step: int
    steps: int
    narration: str
    prediction: str = ""   # the step's predictions, "; "-separated; empty for a step that predicts nothing
    outcome: Literal["started", "held", "did not hold"] = "started"
    detail: str = ""       # on "did not hold": what was measured instead


class TraceEventsDropped(TraceEvent):
    """Written as soon as the buffer has room again: this many events were lost before this line."""

    event: Literal["trace_events_dropped"] = "trace_events_dropped"
    dropped_total: int


AnyTraceEvent = Annotated[
    ControllerElected | ControllerResigned | ControllerLoaded | ControllerWriteFenced
    | BrokerRegistered | SessionStateChanged
    | BrokerMembershipChanged | BrokerExpired | LeaderElected | TopicCreated | PartitionsAdded | TopicDeleted
    | PartitionReassignmentStep
    | TopicConfigChanged | BrokerConfigChanged
    | ControlRequestReceived | ControlRequestApplied | ControlRequestFenced | ReplicaRoleChanged
    | ControlledShutdownStep
    | ControlledShutdownAttempt | BrokerStopped
    | LogDirFailed | LogCleaned | ProduceAcknowledged | IsrChanged | FollowerTruncated | HighWatermarkUpdated
    | FollowerFetchStateUpdated | LogStartOffsetIncremented | FetchServed | DelayedOperationFinished
    | GroupStateChanged | TransactionStateChanged | TxnMarkerWritten | LastStableOffsetChanged | FaultInjected
    | ScenarioStep | TraceEventsDropped,
    Field(discriminator="event"),
]

EVENT_ADAPTER: TypeAdapter[AnyTraceEvent] = TypeAdapter(AnyTraceEvent)


# every event type a trace file may hold, in the union's order (the analysis derives its schema from these)
EVENT_TYPES: tuple[type[TraceEvent], ...] = get_args(get_args(AnyTraceEvent)[0])


def parse_line(line: str | bytes) -> TraceEvent:
    return EVENT_ADAPTER.validate_json(line)
