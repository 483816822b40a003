"""One size of ``kafkasim bench scale`` on a fresh cluster: create the partitions through the Kafka protocol, sit
idle, kill -9 a broker, restart it, stop one with a controlled shutdown, kill -9 the controller.

Every "until" is read from ZooKeeper, several hundred state znodes per look: the reads go out pipelined on one
session (a look at 1000 partitions one round trip at a time would take longer than some of the figures). Where
a precise instant matters the znode's own mtime says when the controller wrote it (ZooKeeper runs on this
machine, on the same clock), so a figure does not carry the length of the look that saw it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from cluster.bench.process_facts import CpuMeter, resident_mib
from cluster.lifecycle import start_broker
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec
from zk.client import ZkClient, connected
from zk.znodes import ControllerEpochZNode, ControllerZNode, TopicPartitionStateZNode

TOPIC = "bench-scale"
REPLICATION_FACTOR = 3
POLL_S = 0.1
# librdkafka reports every refused connection to a stopped broker; expected here, so kept out of the output
QUIET = logging.getLogger("kafkasim.bench.scale.librdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


@dataclass(frozen=True)
class StateView:
    leader: int
    isr: tuple[int, ...]
    mtime_ms: int      # when the state znode was last written, ZooKeeper's wall clock


@dataclass
class SizeResult:
    partitions: int
    create_s: float = float("nan")           # CreateTopics sent -> every partition led, ISR full (ZooKeeper)
    create_answered_s: float = float("nan")  # CreateTopics sent -> the AdminClient's future done
    idle_cpu_pct: dict[int, float] = field(default_factory=dict)
    idle_cpu_s: dict = field(default_factory=dict)
    rss_mib: dict[int, float] = field(default_factory=dict)
    kill: dict = field(default_factory=dict)
    restart_isr_full_s: float = float("nan")
    shutdown: dict = field(default_factory=dict)
    controller: dict = field(default_factory=dict)


async def _poll(condition: Callable[[], Awaitable], timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        began = time.monotonic()
        result = await condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise ClusterError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        # the looks must not take the brokers' CPU: the figures come from the znodes' mtimes, not from when we looked
        await asyncio.sleep(max(POLL_S, 2 * (time.monotonic() - began)))


async def wait_all(zk: ZkClient, partitions: list[int], ok: Callable[[StateView | None], bool], timeout_s: float,
                   what: str) -> dict[int, StateView | None]:
    """Until ``ok`` holds for every partition at once; returns that look. Only partitions not yet seen ok are read
    again, then one look at all of them confirms (a partition may have left the condition meanwhile)."""
    pending = list(partitions)

    async def done() -> dict[int, StateView | None] | None:
        nonlocal pending
        if pending:
            states = await read_states(zk, pending)
            pending = [p for p, s in states.items() if not ok(s)]
            if pending:
                return None
        states = await read_states(zk, partitions)
        pending = [p for p, s in states.items() if not ok(s)]
        return None if pending else states

    return await _poll(done, timeout_s, what)


def last_write_s(states: dict[int, StateView | None], since_wall: float) -> float:
    """Seconds from ``since_wall`` to the last write among these state znodes."""
    return max(s.mtime_ms for s in states.values() if s is not None) / 1000 - since_wall


async def read_states(zk: ZkClient, partitions: list[int]) -> dict[int, StateView | None]:
    async def one(p: int) -> StateView | None:
        data, stat = await zk.get_or_none(TopicPartitionStateZNode.path(TOPIC, p))
        if data is None:
            return None
        state = TopicPartitionStateZNode.decode(TOPIC, p, data)
        return StateView(state.leader, tuple(state.isr), stat.mtime)

    views = await asyncio.gather(*(one(p) for p in partitions))
    return dict(zip(partitions, views, strict=True))


def _led_and_full(state: StateView | None) -> bool:
    return state is not None and state.leader >= 0 and len(state.isr) == REPLICATION_FACTOR


async def _controller(zk: ZkClient) -> tuple[int, int]:
    data, _ = await zk.get(ControllerZNode.path)
    epoch, _ = await zk.get(ControllerEpochZNode.path)
    return ControllerZNode.decode(data).brokerid, ControllerEpochZNode.decode(epoch)


def _leaders(states: dict[int, StateView | None]) -> dict[int, int]:
    return {p: s.leader for p, s in states.items() if s is not None}


class ScaleRun:
    def __init__(self, spec: ClusterSpec, layout: ClusterLayout, partitions: int, say: Callable[[str], None], *,
                 settle_s: float, idle_s: float, timeout_s: float, idle_only: bool = False) -> None:
        self.idle_only = idle_only
        self.spec, self.layout, self.say = spec, layout, say
        self.all = list(range(partitions))
        self.brokers = [b.broker_id for b in spec.brokers]
        self.settle_s, self.idle_s, self.timeout_s = settle_s, idle_s, timeout_s
        self.result = SizeResult(partitions)

    def pid(self, broker: int) -> int:
        pid = self.layout.broker_pid(broker).read()
        if pid is None:
            raise ClusterError(f"broker {broker} is not running")
        return pid

    async def run(self) -> SizeResult:
        async with connected(self.spec.zookeeper, session_timeout_ms=10000) as zk:
            await self._create(zk)
            await self._idle()
            if self.idle_only:
                return self.result
            await self._kill9(zk)
            await self._controlled_shutdown(zk)
            await self._controller_failover(zk)
        return self.result

    async def _wait_full(self, zk: ZkClient, what: str) -> dict[int, StateView | None]:
        return await wait_all(zk, self.all, _led_and_full, self.timeout_s, what)

    # --- create -----------------------------------------------------------------------------------------

    async def _create(self, zk: ZkClient) -> None:
        n = len(self.all)
        self.say(f"{n} partitions: CreateTopics through the AdminClient ...")
        admin = AdminClient({"bootstrap.servers": self.spec.bootstrap_servers}, logger=QUIET)
        began, began_wall = time.monotonic(), time.time()
        answered: list[float] = []

        def create() -> None:
            futures = admin.create_topics([NewTopic(TOPIC, n, REPLICATION_FACTOR)],
                                          operation_timeout=self.timeout_s, request_timeout=self.timeout_s + 5)
            futures[TOPIC].result(self.timeout_s + 10)
            answered.append(time.monotonic() - began)

        creating = asyncio.get_running_loop().run_in_executor(None, create)
        states = await self._wait_full(zk, f"{n} partitions led with a full ISR")
        self.result.create_s = last_write_s(states, began_wall)
        await creating
        self.result.create_answered_s = answered[0]
        self.say(f"{n} partitions: led with a full ISR after {self.result.create_s:.2f} s "
                 f"(AdminClient answered after {self.result.create_answered_s:.2f} s)")

    # --- idle -------------------------------------------------------------------------------------------

    async def _idle(self) -> None:
        # After creating, brokers open logs and followers start fetching: that start-up work is not idleness.
        await asyncio.sleep(self.settle_s)
        meter = CpuMeter(self.spec, self.layout)
        self.say(f"{len(self.all)} partitions: measuring idle CPU over {self.idle_s:g} s ...")
        before, began = meter.sample(), time.monotonic()
        await asyncio.sleep(self.idle_s)
        after, window = meter.sample(), time.monotonic() - began
        used = after.since(before)
        self.result.idle_cpu_s = used
        self.result.idle_cpu_pct = {b: round(100 * s / window, 2) for b, s in used["brokers"].items()}
        self.result.rss_mib = {b: round(resident_mib(self.pid(b)), 1) for b in self.brokers}

    # --- kill -9 of a broker that leads about a third ---------------------------------------------------

    async def _kill9(self, zk: ZkClient) -> None:
        controller, _ = await _controller(zk)
        leaders = _leaders(await read_states(zk, self.all))
        # not the controller: its failover is measured on its own below
        victim = max((b for b in self.brokers if b != controller), key=lambda b: sum(v == b for v in leaders.values()))
        led = [p for p, leader in leaders.items() if leader == victim]
        self.say(f"{len(self.all)} partitions: kill -9 of broker {victim}, leader of {len(led)} ...")
        pid = self.pid(victim)
        killed_wall, killed = time.time(), time.monotonic()
        os.kill(pid, signal.SIGKILL)

        states = await wait_all(zk, led, lambda s: s is not None and s.leader not in (victim, -1), self.timeout_s,
                                f"new leaders for broker {victim}'s {len(led)} partitions")
        seen_s = time.monotonic() - killed
        moved_s = last_write_s(states, killed_wall)
        self.result.kill = {"broker": victim, "led": len(led), "moved_s": round(moved_s, 3),
                            "seen_s": round(seen_s, 3)}
        self.say(f"{len(self.all)} partitions: all {len(led)} leaders moved {moved_s:.2f} s after the kill "
                 f"(seen after {seen_s:.2f} s); restarting broker {victim} ...")
        began_wall = time.time()
        await asyncio.to_thread(start_broker, self.layout.data_dir, victim, True, lambda _: None)
        states = await self._wait_full(zk, f"broker {victim} back in every ISR")
        self.result.restart_isr_full_s = last_write_s(states, began_wall)

    # --- controlled shutdown ----------------------------------------------------------------------------

    async def _controlled_shutdown(self, zk: ZkClient) -> None:
        controller, _ = await _controller(zk)
        leaders = _leaders(await read_states(zk, self.all))
        victim = max((b for b in self.brokers if b != controller), key=lambda b: sum(v == b for v in leaders.values()))
        led = sum(v == victim for v in leaders.values())
        self.say(f"{len(self.all)} partitions: controlled shutdown of broker {victim}, leader of {led} ...")
        pid_file = self.layout.broker_pid(victim)
        self.pid(victim)
        began = time.monotonic()
        os.kill(self.pid(victim), signal.SIGTERM)
        while pid_file.read() is not None:
            if time.monotonic() - began > self.timeout_s:
                raise ClusterError(f"broker {victim} still running {self.timeout_s:.0f} s after SIGTERM")
            await asyncio.sleep(0.01)
        exited_s = time.monotonic() - began
        survivors = [b for b in self.brokers if b != victim]
        # At the moment it exits: ZooKeeper's leaders, and what each survivor answers a Metadata request alone.
        zk_states, *answers = await asyncio.gather(
            read_states(zk, self.all),
            *(asyncio.to_thread(self._metadata_leaders, b) for b in survivors))
        truth = _leaders(zk_states)
        wrong = {b: sorted(p for p in self.all if answer.get(p) != truth.get(p))
                 for b, answer in zip(survivors, answers, strict=True)}
        naming_stopped = {b: sum(answer.get(p) == victim for p in self.all)
                          for b, answer in zip(survivors, answers, strict=True)}
        self.result.shutdown = {
            "broker": victim, "led": led, "exit_s": round(exited_s, 3),
            "metadata_disagreeing": {b: len(ps) for b, ps in wrong.items()},
            "metadata_naming_stopped_broker": naming_stopped,
            "zookeeper_leader_is_stopped_broker": sum(v == victim for v in truth.values()),
            "examples": {b: ps[:5] for b, ps in wrong.items() if ps}}
        self.say(f"{len(self.all)} partitions: broker {victim} exited {exited_s:.2f} s after SIGTERM; survivors' "
                 f"Metadata disagreeing with ZooKeeper: {self.result.shutdown['metadata_disagreeing']}")
        await asyncio.to_thread(start_broker, self.layout.data_dir, victim, True, lambda _: None)
        await self._wait_full(zk, f"broker {victim} back in every ISR after its controlled shutdown")

    def _metadata_leaders(self, broker: int) -> dict[int, int]:
        """Partition -> leader as this broker alone answers: a fresh client bootstrapped on it alone sends its
        Metadata request there."""
        admin = AdminClient({"bootstrap.servers": self.spec.broker(broker).bootstrap}, logger=QUIET)
        metadata = admin.list_topics(TOPIC, timeout=10)
        topic = metadata.topics.get(TOPIC)
        if topic is None or topic.error is not None:
            return {}
        return {p: meta.leader for p, meta in topic.partitions.items()}

    # --- controller failover ----------------------------------------------------------------------------

    async def _controller_failover(self, zk: ZkClient) -> None:
        controller, epoch = await _controller(zk)
        survivors = [b for b in self.brokers if b != controller]
        offsets = {b: _size(self.layout.trace_file(b)) for b in survivors}
        self.say(f"{len(self.all)} partitions: kill -9 of the controller, broker {controller} ...")
        pid = self.pid(controller)
        killed_wall, killed = time.time(), time.monotonic()
        os.kill(pid, signal.SIGKILL)

        async def loaded() -> dict | None:
            for b in survivors:
                for event in _events_since(self.layout.trace_file(b), offsets[b], "controller_loaded"):
                    if (event.get("controller_epoch") or 0) > epoch:
                        return event
            return None

        event = await _poll(loaded, self.timeout_s, "a new controller to finish loading")
        seen_s = time.monotonic() - killed
        loaded_s = event["ts_ms"] / 1000 - killed_wall
        self.result.controller = {
            "killed": controller, "new": event["broker_id"], "loaded_s": round(loaded_s, 3),
            "load_ms": event["duration_ms"], "partitions_loaded": event["partitions"], "seen_s": round(seen_s, 3)}
        self.say(f"{len(self.all)} partitions: broker {event['broker_id']} loaded {event['partitions']} partitions "
                 f"{loaded_s:.2f} s after the kill ({event['duration_ms']:.0f} ms after its election)")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _events_since(path: Path, offset: int, kind: str) -> list[dict]:
    """Events of one kind written to ``path`` after byte ``offset`` (from the start if the file was rotated)."""
    try:
        with path.open("rb") as f:
            if f.seek(0, os.SEEK_END) < offset:
                offset = 0
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return []
    complete = data[:data.rfind(b"\n") + 1]  # the writer may be half-way through the last line
    needle = f'"event":"{kind}"'.encode()
    return [json.loads(line) for line in complete.splitlines() if needle in line]


def measure_size(spec: ClusterSpec, layout: ClusterLayout, partitions: int, say: Callable[[str], None], *,
                 settle_s: float, idle_s: float, timeout_s: float,
                 idle_only: bool = False) -> tuple[SizeResult, str | None]:
    """The figures measured, and why the run stopped early (None when it did not): a wait that timed out still
    leaves the figures before it."""
    run = ScaleRun(spec, layout, partitions, say, settle_s=settle_s, idle_s=idle_s, timeout_s=timeout_s,
                   idle_only=idle_only)
    try:
        asyncio.run(run.run())
    except ClusterError as exc:
        return run.result, str(exc)
    return run.result, None
