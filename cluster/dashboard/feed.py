"""The event feed: trace events told in words (pure, tested on hand-made events), and a follower that reads
the trace files of a cluster incrementally, the brokers' and the tools' (where faults from the CLI and the
dashboard's own buttons are recorded).

Only the events a person watching a failover wants to read become sentences; the high-rate ones (HW moves,
follower fetch states, produce acknowledgements, fetches served) are left out: the offset axis shows them."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from traces import events as te

ELECTIONS = {"initial": "", "offline": " after its leader went offline", "unclean": " (unclean: out of the ISR)",
             "controlled_shutdown": " (controlled shutdown)", "isr_removal": "",
             "preferred": " (back to its preferred replica)", "reassignment": " (partition reassignment)"}


def _isr(isr: list[int]) -> str:
    return "[" + ",".join(map(str, isr)) + "]"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.0f} s" if ms >= 10_000 else f"{ms / 1000:.1f} s"


def _leader_elected(e: te.LeaderElected) -> str:
    name = f"{e.topic}-{e.partition}"
    who = f"controller {e.broker_id}"
    if e.leader < 0:
        return f"{who} found no leader for {name}: it is offline (leader epoch {e.leader_epoch})"
    return (f"{who} elected broker {e.leader} leader of {name}, leader epoch {e.leader_epoch}, "
            f"ISR {_isr(e.isr)}{ELECTIONS.get(e.election, '')}")


def _isr_changed(e: te.IsrChanged) -> str:
    name = f"{e.topic}-{e.partition}"
    verb = "shrank" if e.kind == "shrink" else "grew"
    text = f"ISR of {name} {verb} to {_isr(e.new_isr)}"
    if e.lags:
        if e.kind == "shrink":
            text += ": " + ", ".join(f"broker {lag.replica} lagged {_seconds(lag.lag_ms)}" for lag in e.lags)
        else:
            text += ": " + ", ".join(f"broker {lag.replica} caught up" for lag in e.lags)
    elif e.reason:
        text += f" ({e.reason})"
    return text


def _fault(e: te.FaultInjected) -> str:
    detail = f" ({e.detail})" if e.detail else ""
    return f"fault: {e.action} {e.target}{detail}"


def _scenario_step(e: te.ScenarioStep) -> str:
    where = f"scenario {e.scenario}, step {e.step}/{e.steps}"
    if e.outcome == "started":
        return f"{where}: {e.narration}" + (f" — Kafka predicts {e.prediction}" if e.prediction else "")
    return f"{where}: {e.prediction} {e.outcome}" + (f" ({e.detail})" if e.detail else "")


def _session(e: te.SessionStateChanged) -> str | None:
    if e.state == "expired":
        return f"broker {e.broker_id}'s ZooKeeper session expired"
    if e.state == "disconnected":
        return f"broker {e.broker_id} lost its ZooKeeper connection"
    if e.state == "new_session":
        return f"broker {e.broker_id} has a new ZooKeeper session"
    return None


def _partitions(names: list[str], limit: int = 5) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _controlled_shutdown_step(e: te.ControlledShutdownStep) -> str:
    if e.phase == "handled":
        text = f"controller {e.broker_id} handled a controlled shutdown {e.detail}".rstrip()
        if e.remaining:
            text += f"; still led by it (no other live ISR member): {_partitions(e.remaining)}"
        return text
    if e.phase == "failed":
        return (f"broker {e.broker_id} controlled shutdown failed{' ' + e.detail if e.detail else ''}: it stops "
                f"anyway, and what it still leads goes offline")
    return (f"broker {e.broker_id} controlled shutdown {e.phase}"
            + (f", {e.remaining_partitions} partitions left" if e.remaining_partitions else ""))


def _controlled_shutdown_attempt(e: te.ControlledShutdownAttempt) -> str:
    who = f"broker {e.broker_id} controlled shutdown attempt {e.attempt}/{e.max_attempts}"
    if e.error_code == 0 and not e.remaining:
        return f"{who}: controller {e.controller} moved every leadership"
    why = (f"it still leads {_partitions(e.remaining)} (no other live ISR member)" if e.remaining
           else f"no answer ({e.detail})")
    then = (f"asks again in {_seconds(e.backoff_ms)}" if e.attempt < e.max_attempts
            else "out of attempts: it stops anyway")
    return f"{who}: {why}; {then}"


SENTENCES: dict[type[te.TraceEvent], Callable] = {
    te.ControllerElected: lambda e: f"broker {e.broker_id} became the controller, controller epoch "
                                    f"{e.controller_epoch}",
    te.ControllerResigned: lambda e: f"broker {e.broker_id} stopped being the controller ({e.reason})",
    te.ControllerLoaded: lambda e: f"controller {e.broker_id} loaded {e.partitions} partitions in "
                                   f"{e.duration_ms:.0f} ms",
    te.ControllerWriteFenced: lambda e: (f"ZooKeeper refused {e.write or 'a write'} of deposed controller "
                                         f"{e.broker_id} (controller epoch {e.controller_epoch}, handling "
                                         f"{e.operation}): /controller_epoch is no longer at zkVersion "
                                         f"{e.expected_epoch_zk_version} (BADVERSION), a newer controller exists"),
    te.ControlRequestFenced: lambda e: (f"broker {e.broker_id} ignored {e.request} from controller "
                                        f"{e.from_controller}: its controller epoch {e.request_controller_epoch} is "
                                        f"older than {e.highest_controller_epoch_seen}, the newest it has seen "
                                        f"(STALE_CONTROLLER_EPOCH)"),
    te.BrokerRegistered: lambda e: f"broker {e.broker_id} registered, broker epoch {e.broker_epoch}",
    te.SessionStateChanged: _session,
    te.BrokerExpired: lambda e: f"broker {e.expired_broker}'s session expired (seen by controller {e.broker_id})",
    te.LeaderElected: _leader_elected,
    te.TopicCreated: lambda e: f"topic {e.topic} created with {len(e.assignment)} partitions",
    te.PartitionsAdded: lambda e: f"topic {e.topic}: partitions {', '.join(map(str, sorted(e.assignment)))} added",
    te.TopicDeleted: lambda e: f"topic {e.topic} deleted",
    te.PartitionReassignmentStep: lambda e: (f"reassignment of {e.topic}-{e.partition} {e.phase}: replicas "
                                             f"{e.replicas}, adding {e.adding_replicas}, removing "
                                             f"{e.removing_replicas}"),
    te.TopicConfigChanged: lambda e: (f"broker {e.broker_id} applied topic {e.topic}'s config "
                                      f"{e.topic_overrides or '(no overrides)'} to {e.local_logs} local logs"),
    te.BrokerConfigChanged: lambda e: (f"broker {e.broker_id} applied the dynamic config of brokers/{e.entity}: "
                                       f"{e.dynamic_config or '(none)'}, {e.local_logs} local logs"),
    te.IsrChanged: _isr_changed,
    te.FollowerTruncated: lambda e: (f"broker {e.broker_id} truncated {e.topic}-{e.partition} from offset "
                                     f"{e.from_offset} to {e.to_offset} ({e.rule}, leader {e.leader})"),
    te.LogStartOffsetIncremented: lambda e: (f"broker {e.broker_id} moved the start of {e.topic}-{e.partition} "
                                             f"to offset {e.log_start_offset} ({e.role}), "
                                             f"{e.segments_deleted} segment(s) deleted"),
    te.ControlledShutdownStep: _controlled_shutdown_step,
    te.ControlledShutdownAttempt: _controlled_shutdown_attempt,
    te.BrokerStopped: lambda e: f"broker {e.broker_id} stopped" + ("" if e.clean else " (unclean)"),
    te.LogDirFailed: lambda e: f"broker {e.broker_id}'s log directory failed: {e.error}",
    te.LogCleaned: lambda e: (f"broker {e.broker_id} compacted {e.topic}-{e.partition}: {e.segments_before} segments "
                              f"({e.bytes_before} bytes) into {e.segments_after} ({e.bytes_after} bytes), "
                              f"{e.keys} keys, up to offset {e.end_offset}"),
    te.GroupStateChanged: lambda e: (f"group {e.group_id}: {e.old_state} → {e.new_state}, generation "
                                     f"{e.generation_id}, {e.members} members"),
    te.TransactionStateChanged: lambda e: (f"transaction {e.transactional_id} (producer {e.producer_id}, epoch "
                                           f"{e.producer_epoch}): {e.old_state} → {e.new_state}"
                                           + (f", {len(e.txn_partitions)} partitions" if e.txn_partitions else "")
                                           + (f" ({e.reason})" if e.reason else "")),
    te.TxnMarkerWritten: lambda e: (f"broker {e.broker_id} wrote the {e.marker} marker of producer {e.producer_id} "
                                    f"to {e.topic}-{e.partition} at offset {e.offset}"),
    te.FaultInjected: _fault,
    te.ScenarioStep: _scenario_step,
    te.TraceEventsDropped: lambda e: f"broker {e.broker_id} dropped {e.dropped_total} trace events",
}


def sentence(event: te.TraceEvent) -> str | None:
    """The event in words, or None for an event the feed leaves out."""
    tell = SENTENCES.get(type(event))
    return tell(event) if tell is not None else None


@dataclass(frozen=True)
class FeedLine:
    ts_ms: float
    source: str      # "broker 2" or "tools"
    kind: str        # the event type
    text: str

    def as_dict(self) -> dict:
        return {"ts_ms": self.ts_ms, "source": self.source, "kind": self.kind, "text": self.text}


# the "event" field of a JSON line, found without parsing it: a busy broker writes thousands of lines a second the
# feed leaves out (produce acknowledgements, fetch states), and parsing each with pydantic would cost the dashboard
# more than everything else it does
_EVENT_FIELD = re.compile(rb'"event":\s*"([a-z_]+)"')
TOLD = frozenset(model.model_fields["event"].default for model in SENTENCES)


def wanted(line: bytes) -> bool:
    match = _EVENT_FIELD.search(line)
    return match is None or match.group(1).decode() in TOLD   # no event field: parsed, and refused there


class TraceFollower:
    """Reads what was appended to one trace file since the last call. A file that shrank or was replaced
    (rotation, a cluster started again) is read from its start; a partial last line waits for its end."""

    def __init__(self, path: Path, source: str, start_at_end: bool = False, told_only: bool = True) -> None:
        self.path = path
        self.told_only = told_only   # skip, unparsed, the event types the feed does not tell
        self.source = source
        self._inode: int | None = None
        self._offset = 0
        self._rest = b""
        self._start_at_end = start_at_end

    def poll(self, max_bytes: int = 4 << 20) -> list[te.TraceEvent]:
        try:
            stat = os.stat(self.path)
        except OSError:
            return []
        if stat.st_ino != self._inode or stat.st_size < self._offset:
            self._inode, self._rest = stat.st_ino, b""
            # at the dashboard's start, only the newest part of a long trace matters
            self._offset = max(0, stat.st_size - max_bytes) if self._start_at_end else 0
        if stat.st_size == self._offset:
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            data = handle.read(max_bytes)
        self._offset += len(data)
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        events = []
        for line in lines:
            if not line.strip() or (self.told_only and not wanted(line)):
                continue
            try:
                events.append(te.parse_line(line))
            except (ValidationError, ValueError):
                continue  # a line cut by a crash, or from another schema: skip it
        return events


class Feed:
    """The last ``size`` feed lines of every followed trace file, in time order."""

    def __init__(self, followers: list[TraceFollower], size: int = 200) -> None:
        self.followers = followers
        self.size = size
        self.lines: list[FeedLine] = []

    def poll(self) -> list[FeedLine]:
        """New lines since the previous poll (also kept in ``lines``)."""
        new = []
        for follower in self.followers:
            for event in follower.poll():
                text = sentence(event)
                if text is not None:
                    new.append(FeedLine(event.ts_ms, follower.source, event.event, text))  # type: ignore[attr-defined]
        new.sort(key=lambda line: line.ts_ms)
        if new:
            self.lines = sorted(self.lines + new, key=lambda line: line.ts_ms)[-self.size:]
        return new
