"""The cluster's state in ZooKeeper, kept by watches: read whole once, then only the znodes whose watch fired.

A full read of 100 partitions is ~200 requests through kazoo's thread (tens of ms of CPU); polled several times a
second that alone would cost a tenth of a core. With watches an idle cluster costs no request at all, and a
change (a new leader written by the controller) wakes the dashboard at once. kazoo reports a lost connection to
every watch as an event without a path and does not restore watches, so such an event (or any session event)
means one full read again; a full read every ``FULL_READ_EVERY_S`` is the safety net."""

from __future__ import annotations

import time
from collections.abc import Callable

from cluster.admin import BrokerView, ClusterState, PartitionView
from zk.client import NoNodeError, SessionEvent, WatchedEvent, ZkClient
from zk.znodes import (
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerTopicsZNode,
    ControllerEpochZNode,
    ControllerZNode,
    TopicPartitionStateZNode,
    TopicZNode,
    ZNodeDecodeError,
)

DELETE_TOPICS = "/admin/delete_topics"
FULL_READ_EVERY_S = 30.0


class WatchedClusterState:
    """``read()`` gives the same ClusterState as cluster.admin.read_cluster_state, from a watched cache. The watch
    handlers run on the asyncio loop (ZkClient hands them over) and only mark paths dirty."""

    def __init__(self, zk: ZkClient, on_change: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.zk = zk
        self.on_change = on_change
        self.clock = clock
        self.full = True
        self.dirty: set[str] = set()
        self._last_full = 0.0
        self.controller_id = -1
        self.controller_epoch = -1
        self.brokers: dict[int, BrokerView] = {}
        self.assignments: dict[str, dict[int, list[int]]] = {}
        # each partition's adding and removing replicas (KIP-455), empty when it is not being reassigned
        self.moving: dict[str, dict[int, tuple[list[int], list[int]]]] = {}
        self.states: dict[tuple[str, int], PartitionView] = {}
        self.deleting: list[str] = []
        self.problems: dict[str, str] = {}
        zk.add_session_listener(self._on_session)

    # --- watch handlers (on the loop) --------------------------------------------------------------

    def _on_watch(self, event: WatchedEvent) -> None:
        if event.type == "NONE" or not event.path:
            self.full = True
        else:
            self.dirty.add(event.path)
        self.on_change()

    def _on_session(self, event: SessionEvent) -> None:
        if event is not SessionEvent.RECONNECTED:
            self.full = True
            self.on_change()

    # --- reads ---------------------------------------------------------------------------------------

    async def read(self) -> ClusterState:
        # a read cut short (ZooKeeper gone, the caller's timeout) leaves what it had not read marked for the next
        if self.full or self.clock() - self._last_full > FULL_READ_EVERY_S:
            self.full, self._last_full = False, self.clock()
            self.dirty.clear()
            self.brokers, self.assignments, self.states, self.problems = {}, {}, {}, {}
            self.moving = {}
            try:
                for path in ("/controller", "/controller_epoch", BrokerIdsZNode.path, BrokerTopicsZNode.path,
                             DELETE_TOPICS):
                    await self._refresh(path)
            except BaseException:
                self.full = True
                raise
        else:
            while self.dirty:
                path = self.dirty.pop()
                try:
                    await self._refresh(path)
                except BaseException:
                    self.dirty.add(path)
                    raise
        return self._state()

    async def _refresh(self, path: str) -> None:
        watch = self._on_watch
        try:
            if path == ControllerZNode.path:
                data, _ = await self.zk.get_or_none(path, watch)
                self.controller_id = self._decode(path, lambda: ControllerZNode.decode(data).brokerid, -1) \
                    if data is not None else -1
            elif path == ControllerEpochZNode.path:
                data, _ = await self.zk.get_or_none(path, watch)
                self.controller_epoch = self._decode(path, lambda: ControllerEpochZNode.decode(data), -1) \
                    if data is not None else -1
            elif path == BrokerIdsZNode.path:
                await self._read_brokers()
            elif path == BrokerTopicsZNode.path:
                topics = set(await self._children(path))
                for gone in set(self.assignments) - topics:
                    self._drop_topic(gone)
                for topic in sorted(topics - set(self.assignments)):
                    await self._read_topic(topic)
            elif path == DELETE_TOPICS:
                self.deleting = sorted(await self._children(path))
            elif path.startswith(BrokerTopicsZNode.path + "/"):
                parts = path.split("/")   # ['', 'brokers', 'topics', t] or [..., t, 'partitions', p, 'state']
                if len(parts) == 4:
                    await self._read_topic(parts[3])
                elif len(parts) == 7 and parts[5].isdigit():
                    await self._read_state(parts[3], int(parts[5]))
        except NoNodeError:
            self.full = True   # a parent went away under us: read everything again next time

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.zk.get_children(path, self._on_watch)
        except NoNodeError:
            await self.zk.exists(path, self._on_watch)   # fires when it is created
            return []

    async def _read_brokers(self) -> None:
        # every registration again: a restarted broker may be back under the same id with a new epoch (czxid)
        brokers = {}
        for child in await self._children(BrokerIdsZNode.path):
            if not child.isdigit():
                continue
            data, stat = await self.zk.get_or_none(BrokerIdZNode.path(int(child)))
            if data is None:
                continue
            registration = self._decode(BrokerIdZNode.path(int(child)),
                                        lambda c=child, d=data: BrokerIdZNode.decode(int(c), d), None)
            if registration is not None:
                brokers[int(child)] = BrokerView(int(child), registration.endpoints, stat.czxid)
        self.brokers = brokers

    async def _read_topic(self, topic: str) -> None:
        data, _ = await self.zk.get_or_none(TopicZNode.path(topic), self._on_watch)
        if data is None:
            self._drop_topic(topic)
            return
        decoded = self._decode(TopicZNode.path(topic), lambda: TopicZNode.decode(topic, data), None)
        if decoded is None:
            return
        assignment = decoded.partitions
        self.assignments[topic] = {p: list(r) for p, r in assignment.items()}
        self.moving[topic] = {p: (list(decoded.adding_replicas.get(p, [])), list(decoded.removing_replicas.get(p, [])))
                              for p in assignment}
        for partition in sorted(assignment):
            await self._read_state(topic, partition)

    async def _read_state(self, topic: str, partition: int) -> None:
        replicas = self.assignments.get(topic, {}).get(partition)
        if replicas is None:
            return
        adding, removing = self.moving.get(topic, {}).get(partition, ([], []))
        view = PartitionView(topic, partition, list(replicas), adding_replicas=list(adding),
                             removing_replicas=list(removing))
        path = TopicPartitionStateZNode.path(topic, partition)
        data, stat = await self.zk.get_or_none(path, self._on_watch)   # missing: watched until it is created
        if data is not None:
            state = self._decode(path, lambda: TopicPartitionStateZNode.decode(topic, partition, data), None)
            if state is not None:
                view.leader, view.leader_epoch, view.isr = state.leader, state.leader_epoch, list(state.isr)
                view.controller_epoch, view.zk_version = state.controller_epoch, stat.version
        self.states[(topic, partition)] = view

    def _drop_topic(self, topic: str) -> None:
        self.assignments.pop(topic, None)
        self.moving.pop(topic, None)
        for key in [k for k in self.states if k[0] == topic]:
            del self.states[key]

    def _decode(self, path: str, decode: Callable, default):
        try:
            value = decode()
        except ZNodeDecodeError as exc:
            self.problems[path] = str(exc)
            return default
        self.problems.pop(path, None)
        return value

    def _state(self) -> ClusterState:
        partitions = [self.states[key] for key in sorted(self.states)]
        return ClusterState(self.controller_id, self.controller_epoch, [self.brokers[b] for b in sorted(self.brokers)],
                            partitions, list(self.deleting), list(self.problems.values()))
