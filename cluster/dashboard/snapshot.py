"""One poll of the cluster, as plain data for the page: ZooKeeper's state (controller, brokers, partitions), each
broker's own view of its replicas (DescribeBroker over gRPC, LEO and high watermark), the broker processes (PID
files: running, paused, down) and, on a ``--netns`` cluster, the cuts in force.

Every source has a short timeout and the sources are asked concurrently, so a paused broker or a dead ZooKeeper
costs one timeout and is shown as "not answering"; the poll itself never waits longer."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import psutil

from cluster.admin import ClusterState
from cluster.dashboard.zk_watch import WatchedClusterState
from cluster.processes import ClusterLayout, ClusterSpec
from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import AdminStub
from zk.client import ZkClient
from zk.znodes import BrokerRegistration

DESCRIBE_TIMEOUT_S = 0.4
ZOOKEEPER_TIMEOUT_S = 0.3
CLUSTER_LISTENER = "CLUSTER"


def process_state(layout: ClusterLayout | None, broker_id: int) -> str:
    """"running", "paused" (SIGSTOP: kafkasim's loopback pause), "down", or "unknown" (no PID files here:
    a docker-compose cluster seen from its dashboard container)."""
    if layout is None:
        return "unknown"
    pid = layout.broker_pid(broker_id).read()
    if pid is None:
        return "down"
    try:
        return "paused" if psutil.Process(pid).status() == psutil.STATUS_STOPPED else "running"
    except psutil.Error:
        return "down"


@dataclass
class BrokerViews:
    """The brokers' own answers: broker id -> DescribeBrokerResponse, and who did not answer (with why)."""

    answers: dict[int, pb.DescribeBrokerResponse] = field(default_factory=dict)
    silent: dict[int, str] = field(default_factory=dict)


class BrokerAsker:
    """DescribeBroker to every broker at once, one gRPC channel per address kept between polls."""

    def __init__(self, timeout_s: float = DESCRIBE_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, address: str) -> AdminStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address)
        return AdminStub(channel)

    async def _ask(self, address: str) -> pb.DescribeBrokerResponse:
        return await self._stub(address).DescribeBroker(pb.DescribeBrokerRequest(), timeout=self.timeout_s)

    async def ask(self, addresses: dict[int, str]) -> BrokerViews:
        views = BrokerViews()
        ids = sorted(addresses)
        results = await asyncio.gather(*(self._ask(addresses[b]) for b in ids), return_exceptions=True)
        for broker_id, result in zip(ids, results, strict=True):
            if isinstance(result, pb.DescribeBrokerResponse):
                views.answers[broker_id] = result
            elif isinstance(result, grpc.aio.AioRpcError):
                code = result.code()
                views.silent[broker_id] = ("not answering" if code == grpc.StatusCode.DEADLINE_EXCEEDED
                                           else "unreachable" if code == grpc.StatusCode.UNAVAILABLE
                                           else code.name.lower())
            else:
                views.silent[broker_id] = f"error: {result}"
        return views

    async def close(self) -> None:
        for channel in self._channels.values():
            with contextlib.suppress(Exception):
                await channel.close()
        self._channels.clear()


def cluster_addresses(spec: ClusterSpec | None, state: ClusterState | None) -> dict[int, str]:
    """Where each broker's cluster plane listens: from cluster.json when there is one (so a broker that lost its
    registration is still asked), else from its registration's CLUSTER listener in ZooKeeper."""
    addresses = {}
    if state is not None:
        for broker in state.brokers:
            endpoint = BrokerRegistration(endpoints=broker.endpoints).endpoint(CLUSTER_LISTENER)
            if endpoint is not None:
                addresses[broker.broker_id] = f"{endpoint[0]}:{endpoint[1]}"
    if spec is not None:
        for broker in spec.brokers:
            addresses[broker.broker_id] = f"{broker.host}:{broker.cluster_port}"
    return addresses


def _replica_offsets(views: BrokerViews) -> dict[tuple[str, int], dict]:
    """(topic, partition) -> each replica's own LEO, the leader's HW, and the leader's view of its followers."""
    found: dict[tuple[str, int], dict] = {}
    for broker_id, answer in views.answers.items():
        for view in answer.replicas:
            entry = found.setdefault((view.topic, view.partition), {"leo": {}, "hw": None, "leader_view": {}})
            if view.hosted:
                entry["leo"][broker_id] = view.log_end_offset
            if view.is_leader and view.hosted:
                entry["hw"] = view.high_watermark
                entry["leader_view"] = {f.replica: f.log_end_offset for f in view.followers}
    return found


def build_snapshot(state: ClusterState | None, zookeeper_error: str | None, views: BrokerViews,
                   processes: dict[int, str], cuts: dict[int, list[str]], known_ids: list[int],
                   now_s: float) -> dict:
    """The page's data from the sources' answers (pure: tested on hand-made answers)."""
    registered = {b.broker_id: b for b in state.brokers} if state is not None else {}
    controller = state.controller_id if state is not None else -1
    ids = sorted(set(known_ids) | set(registered) | set(views.answers) | set(views.silent))
    brokers = []
    for broker_id in ids:
        process = processes.get(broker_id, "unknown")
        answer = views.answers.get(broker_id)
        registration = registered.get(broker_id)
        brokers.append({
            "id": broker_id,
            "process": process,
            "registered": registration is not None,
            "broker_epoch": registration.broker_epoch if registration is not None else None,
            "answering": answer is not None,
            "silent_why": views.silent.get(broker_id),
            "controller": broker_id == controller,
            "cut_off": cuts.get(broker_id, []),
            "state": _broker_state(process, registration is not None, answer is not None, cuts.get(broker_id)),
        })
    offsets = _replica_offsets(views)
    partitions = []
    for p in state.partitions if state is not None else []:
        found = offsets.get((p.topic, p.partition), {"leo": {}, "hw": None, "leader_view": {}})
        leo = dict(found["leader_view"])
        leo.update(found["leo"])   # a replica's own answer beats what its leader last heard of it
        alive = {b for b in registered}
        partitions.append({
            "name": f"{p.topic}-{p.partition}", "topic": p.topic, "partition": p.partition,
            "leader": p.leader, "leader_epoch": p.leader_epoch, "isr": p.isr, "replicas": p.replicas,
            "controller_epoch": p.controller_epoch,
            "high_watermark": found["hw"],
            "leo": {str(r): leo.get(r) for r in p.replicas},
            "offline": p.leader < 0 or p.leader not in alive,
            "under_replicated": len(p.isr) < len(p.replicas),
        })
    return {
        "time": now_s,
        "zookeeper": {"answering": zookeeper_error is None, "error": zookeeper_error},
        "controller": {"id": controller, "epoch": state.controller_epoch if state is not None else -1},
        "brokers": brokers,
        "partitions": partitions,
        "topics_being_deleted": state.topics_being_deleted if state is not None else [],
        "problems": state.problems if state is not None else [],
    }


def _broker_state(process: str, registered: bool, answering: bool, cuts: list[str] | None) -> str:
    """One word for the broker's badge, the most telling first."""
    if process == "down":
        return "down"
    if process == "paused":
        return "paused"
    if cuts:
        return "cut off"
    if not registered and not answering:
        return "down"
    if not answering:
        return "not answering"
    if not registered:
        return "not registered"
    return "up"


class Snapshotter:
    """Polls every source of one cluster; ``snapshot()`` is one poll."""

    def __init__(self, zookeeper: str, spec: ClusterSpec | None, layout: ClusterLayout | None,
                 describe_timeout_s: float = DESCRIBE_TIMEOUT_S, on_change: Callable[[], None] = lambda: None) -> None:
        self.zookeeper = zookeeper
        self.spec = spec
        self.layout = layout
        self.asker = BrokerAsker(describe_timeout_s)
        self.cuts: dict[int, list[str]] = {}   # refreshed by the poller, less often (nft runs as a process)
        # broker id -> process state where no PID files tell it (compose containers), refreshed by the poller
        self.process_states: dict[int, str] = {}
        self._zk: ZkClient | None = None
        self._watched: WatchedClusterState | None = None
        self._zk_read: asyncio.Future | None = None
        self.on_change = on_change   # a ZooKeeper watch fired: the poller polls at once
        self.last_state: ClusterState | None = None
        self.views = BrokerViews()
        self.views_asked = False

    async def _zookeeper_state(self) -> ClusterState:
        if self._zk is None:
            zk = ZkClient(self.zookeeper, session_timeout_ms=6000, connection_timeout_ms=3000)
            await zk.start()
            self._zk = zk
            self._watched = WatchedClusterState(zk, self.on_change)
        assert self._watched is not None
        return await self._watched.read()

    async def refresh_views(self) -> None:
        """Every broker asked at once (the poller runs this on its own timer, so a busy or paused broker never
        holds back what ZooKeeper says)."""
        self.views = await self.asker.ask(cluster_addresses(self.spec, self.last_state))
        self.views_asked = True

    async def snapshot(self) -> dict:
        error = None
        if not self.views_asked:
            await self.refresh_views()
        # a read that takes longer than the timeout is not cancelled (a full read would start again and again on a
        # slow machine): it goes on, the page shows ZooKeeper as not answering, and the next poll waits for it again
        if self._zk_read is None:
            self._zk_read = asyncio.ensure_future(self._zookeeper_state())
        done, _ = await asyncio.wait({self._zk_read}, timeout=ZOOKEEPER_TIMEOUT_S)
        state: ClusterState | None = None
        if not done:
            error = f"no answer within {ZOOKEEPER_TIMEOUT_S:.1f} s"
        else:
            read, self._zk_read = self._zk_read, None
            try:
                state = self.last_state = read.result()
            except Exception as exc:  # connection lost, session expired: shown, and a new client next poll
                error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                await self._close_zk()
        known = [b.broker_id for b in self.spec.brokers] if self.spec is not None else list(self.process_states)
        processes = {b: process_state(self.layout, b) for b in known} if self.layout is not None \
            else dict(self.process_states)
        # while ZooKeeper does not answer, its last known state is shown, marked as such in the header
        return build_snapshot(state or self.last_state, error, self.views, processes, self.cuts, known, time.time())

    async def _close_zk(self) -> None:
        zk, self._zk, self._watched = self._zk, None, None
        if zk is not None:
            with contextlib.suppress(Exception):
                await zk.close()

    async def close(self) -> None:
        if self._zk_read is not None:
            self._zk_read.cancel()
        await self._close_zk()
        await self.asker.close()


def read_cuts(spec: ClusterSpec | None) -> dict[int, list[str]]:
    """broker id -> what it is cut off from, on a --netns cluster (blocking: runs nft; call it in a thread).
    Empty on loopback, or when the namespaces cannot be read (not root)."""
    if spec is None or spec.network is None:
        return {}
    from cluster.net.actions import current_cuts
    from cluster.net.topology import plan_from_spec

    plan = plan_from_spec(spec.network)
    try:
        cuts = current_cuts(plan)
    except Exception:
        return {}
    by_namespace = {namespace: broker_id for broker_id in plan.broker_addresses
                    for namespace in [plan.broker_namespace(broker_id)]}
    return {by_namespace[ns]: sorted(plan.who(a) for a in peers) for ns, peers in cuts.items() if ns in by_namespace}
