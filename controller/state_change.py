"""What the controller's state machines decide, as data: the partition-state znode writes to make and
the control requests to send. The state machines return these; controller.py performs them (fenced
ZooKeeper writes, one request batch per broker) and nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.context import TopicPartition
from zk.znodes import LeaderIsrAndControllerEpoch


class ControllerMovedError(Exception):
    """A newer controller exists: a fenced write failed its /controller_epoch check, or a partition's
    state was already decided by a higher controller epoch."""


@dataclass(frozen=True)
class PartitionStateWrite:
    """One state znode write. ``expected_zk_version`` None creates the znode (NewPartition -> Online);
    otherwise it is a compare-and-set that ZooKeeper refuses if someone wrote in between."""

    tp: TopicPartition
    state: LeaderIsrAndControllerEpoch
    expected_zk_version: int | None
    previous_leader: int
    election: str                       # initial, offline, unclean, controlled_shutdown, isr_removal, preferred
    leader_and_isr_to: tuple[int, ...]  # who hears the result once it is written
    is_new: bool = False


@dataclass(frozen=True)
class StopReplica:
    broker: int
    tp: TopicPartition
    delete: bool
    leader_epoch: int


@dataclass(frozen=True)
class LeaderAndIsr:
    """A LeaderAndIsr entry that needs no write first (the state in ZooKeeper is already right)."""

    brokers: tuple[int, ...]
    tp: TopicPartition
    is_new: bool = False


@dataclass
class StateChanges:
    """One state-machine step's output. It covers every partition the step touches, so the writes go
    out pipelined and the requests as one batch per broker."""

    writes: list[PartitionStateWrite] = field(default_factory=list)
    leader_and_isr: list[LeaderAndIsr] = field(default_factory=list)
    stop_replicas: list[StopReplica] = field(default_factory=list)
    # partitions the step could not move (no live replica, no eligible leader), for logs and tests
    unchanged: list[TopicPartition] = field(default_factory=list)

    def extend(self, other: StateChanges) -> StateChanges:
        self.writes += other.writes
        self.leader_and_isr += other.leader_and_isr
        self.stop_replicas += other.stop_replicas
        self.unchanged += other.unchanged
        return self

    def write_for(self, tp: TopicPartition) -> PartitionStateWrite | None:
        return next((w for w in self.writes if w.tp == tp), None)
