"""Every state change kafkasim traces, as one typed event each.

One JSON object per line. The ``event`` field names the type; ``schema_version`` lets readers refuse
files written by an incompatible kafkasim. The analysis package derives its Spark schema from these
models, so they are the only definition.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1


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


class ControllerWriteFenced(TraceEvent):
    """A write guarded by the /controller_epoch version was refused: this controller was deposed."""

    event: Literal["controller_write_fenced"] = "controller_write_fenced"
    operation: str


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
    election: Literal["initial", "offline", "unclean", "controlled_shutdown", "isr_removal"]


class TopicCreated(TraceEvent):
    event: Literal["topic_created"] = "topic_created"
    topic: str
    assignment: dict[int, list[int]]


class TopicDeleted(TraceEvent):
    event: Literal["topic_deleted"] = "topic_deleted"
    topic: str


class ControlRequestApplied(TraceEvent):
    """A broker received a control request and applied it, or refused it with ``error_code``."""

    event: Literal["control_request_applied"] = "control_request_applied"
    request: Literal["LeaderAndIsr", "UpdateMetadata", "StopReplica"]
    from_controller: int
    request_controller_epoch: int
    partitions: int
    error_code: int


class ReplicaRoleChanged(TraceEvent):
    event: Literal["replica_role_changed"] = "replica_role_changed"
    topic: str
    partition: int
    role: Literal["leader", "follower", "stopped"]
    leader: int
    leader_epoch: int
    isr: list[int]


class ControlledShutdownStep(TraceEvent):
    event: Literal["controlled_shutdown"] = "controlled_shutdown"
    phase: Literal["requested", "succeeded", "retrying", "failed", "handled"]
    remaining_partitions: int = 0
    detail: str = ""


class BrokerStopped(TraceEvent):
    event: Literal["broker_stopped"] = "broker_stopped"
    clean: bool


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


class HighWatermarkUpdated(TraceEvent):
    event: Literal["high_watermark_updated"] = "high_watermark_updated"
    topic: str
    partition: int
    high_watermark: int
    log_end_offset: int
    role: Literal["leader", "follower"]


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


class FaultInjected(TraceEvent):
    """kafkasim's own tools broke something on purpose (``broker_id`` is the victim, -1 for none)."""

    event: Literal["fault_injected"] = "fault_injected"
    action: str            # kill, pause, resume, start, disconnect, connect, ...
    target: str            # what was hit, e.g. "broker 2 (pid 1234)" or a container name
    detail: str = ""


class TraceEventsDropped(TraceEvent):
    """Written as soon as the buffer has room again: this many events were lost before this line."""

    event: Literal["trace_events_dropped"] = "trace_events_dropped"
    dropped_total: int


AnyTraceEvent = Annotated[
    ControllerElected | ControllerResigned | ControllerWriteFenced | BrokerRegistered | SessionStateChanged
    | BrokerMembershipChanged | LeaderElected | TopicCreated | TopicDeleted | ControlRequestApplied
    | ReplicaRoleChanged | ControlledShutdownStep | BrokerStopped | ProduceAcknowledged | IsrChanged
    | FollowerTruncated | HighWatermarkUpdated | GroupStateChanged | FaultInjected | TraceEventsDropped,
    Field(discriminator="event"),
]

EVENT_ADAPTER: TypeAdapter[AnyTraceEvent] = TypeAdapter(AnyTraceEvent)


def parse_line(line: str | bytes) -> TraceEvent:
    return EVENT_ADAPTER.validate_json(line)
