"""The one poller a dashboard runs, whatever the number of open pages: it polls the cluster every
``interval_s``, follows the trace files, keeps the rates and (less often) the consumer groups, and publishes
each result as one JSON text that every connected page receives."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path

from cluster.dashboard.feed import Feed, TraceFollower
from cluster.dashboard.rates import CommitRates, LeoRates, MetricRates, leader_offsets, parse_counters, scrape
from cluster.dashboard.snapshot import Snapshotter, read_cuts
from cluster.processes import ClusterLayout, ClusterSpec
from traces.faults import TOOLS_TRACE_FILE

log = logging.getLogger(__name__)

GROUPS_INTERVAL_S = 2.0
GROUPS_TIMEOUT_S = 1.5
CUTS_INTERVAL_S = 2.0
METRICS_INTERVAL_S = 1.0
FEED_LINES = 60
MIN_SPACING_S = 0.05


def trace_followers(layout: ClusterLayout | None, spec: ClusterSpec | None) -> list[TraceFollower]:
    if layout is None or spec is None:
        return []
    followers = [TraceFollower(layout.trace_file(b.broker_id), f"broker {b.broker_id}", start_at_end=True)
                 for b in spec.brokers]
    followers.append(TraceFollower(layout.data_dir / TOOLS_TRACE_FILE, "tools", start_at_end=True))
    return followers


class Poller:
    def __init__(self, zookeeper: str, spec: ClusterSpec | None, layout: ClusterLayout | None, allow_faults: bool,
                 interval_s: float = 0.25, extra_traces: list[Path] | None = None,
                 docker_tools_dir: Path | None = None) -> None:
        self.spec = spec
        self.layout = layout
        self.allow_faults = allow_faults
        self.interval_s = interval_s
        self._wake = asyncio.Event()   # set by a ZooKeeper watch: poll now rather than at the next tick
        self.snapshotter = Snapshotter(zookeeper, spec, layout, on_change=self._wake.set)
        followers = trace_followers(layout, spec)
        followers += [TraceFollower(path, str(path), start_at_end=True) for path in extra_traces or []]
        self.docker_tools_dir = docker_tools_dir
        self.feed = Feed(followers)
        self.leo_rates = LeoRates()
        self.metric_rates = MetricRates()
        self.commit_rates = CommitRates()
        self.groups: dict = {"groups": [], "updated": None, "error": None}
        self.seq = 0
        self.latest: str | None = None
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task] = []
        self._last_snapshot: dict | None = None
        self._admin = None   # confluent-kafka's AdminClient for the groups, made at the first ask
        self._poll_lock = asyncio.Lock()   # a poll out of turn never overlaps the timer's

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._poll_forever(), name="dashboard-poll"),
                       asyncio.create_task(self._every(self.interval_s, self.snapshotter.refresh_views,
                                                       minimum_s=0.0), name="brokers"),
                       asyncio.create_task(self._every(GROUPS_INTERVAL_S, self._refresh_groups), name="groups"),
                       asyncio.create_task(self._every(METRICS_INTERVAL_S, self._scrape_metrics), name="metrics")]
        if self.docker_tools_dir is not None:
            self._tasks.append(asyncio.create_task(self._every(METRICS_INTERVAL_S, self._refresh_containers),
                                                   name="containers"))
        if self.spec is not None and self.spec.network is not None:
            self._tasks.append(asyncio.create_task(self._every(CUTS_INTERVAL_S, self._refresh_cuts), name="cuts"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        await self.snapshotter.close()

    # --- what pages read ---------------------------------------------------------------------------

    async def wait_newer(self, seq: int) -> tuple[int, str]:
        """The first published state after ``seq``."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.seq > seq and self.latest is not None)
            return self.seq, self.latest  # type: ignore[return-value]

    async def publish_now(self) -> None:
        """One poll out of turn (after a fault button), so its effect shows without waiting for the timer."""
        await self._poll_once()

    # --- the loops ---------------------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        while True:
            started = time.monotonic()
            self._wake.clear()
            try:
                await self._poll_once()
            except Exception:
                log.exception("dashboard poll failed")
            # at most every MIN_SPACING_S however busy ZooKeeper is; at least every interval_s
            await asyncio.sleep(max(0.0, MIN_SPACING_S - (time.monotonic() - started)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(),
                                       max(0.0, self.interval_s - (time.monotonic() - started)))

    async def _poll_once(self) -> None:
        async with self._poll_lock:
            await self._poll_locked()

    async def _poll_locked(self) -> None:
        started = time.monotonic()
        snapshot = await self.snapshotter.snapshot()
        self._last_snapshot = snapshot
        self.feed.poll()
        produce = self.leo_rates.update(snapshot["time"], leader_offsets(snapshot))
        snapshot["rates"] = {
            "produce_messages_per_s": produce,
            "produce_messages_per_s_total": sum(produce.values()),
            "consumed_messages_per_s": self.commit_rates.per_group,
            "metrics": {str(b): r for b, r in self.metric_rates.per_broker.items()},
            "metrics_total": self.metric_rates.totals(),
        }
        snapshot["groups"] = self.groups
        snapshot["feed"] = [line.as_dict() for line in self.feed.lines[-FEED_LINES:]]
        snapshot["allow_faults"] = self.allow_faults
        snapshot["poll_ms"] = round((time.monotonic() - started) * 1000, 1)
        async with self._changed:
            self.seq += 1
            snapshot["seq"] = self.seq
            self.latest = json.dumps(snapshot, separators=(",", ":"))
            self._changed.notify_all()

    async def _every(self, interval_s: float, work, minimum_s: float = 0.1) -> None:
        while True:
            started = time.monotonic()
            try:
                await work()
            except Exception as exc:
                log.debug("dashboard background work failed: %s", exc)
            await asyncio.sleep(max(minimum_s, interval_s - (time.monotonic() - started)))

    def _bootstrap(self) -> str | None:
        if self.spec is not None:
            return self.spec.bootstrap_servers
        state = self.snapshotter.last_state
        if state is None:
            return None
        found = [e.partition("://")[2] for b in state.brokers for e in b.endpoints if e.startswith("PLAINTEXT://")]
        return ",".join(found) or None

    async def _refresh_groups(self) -> None:
        from cluster.groups import groups_overview

        bootstrap = self._bootstrap()
        if bootstrap is None:
            return
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            # one client for the dashboard's life: a new one every poll would reconnect to every broker
            self._admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        try:
            # sequential (the loop waits for it), so a slow coordinator never piles up threads; each ask inside has
            # its own timeout
            groups = await asyncio.to_thread(groups_overview, bootstrap, GROUPS_TIMEOUT_S, self._admin)
            self.commit_rates.update(time.time(), groups)
            self.groups = {"groups": groups, "updated": time.time(), "error": None}
        except Exception as exc:  # KafkaException(_TIMED_OUT) while a coordinator is gone or paused
            self.groups = {**self.groups, "error": f"the group coordinators did not all answer: {exc}"}

    async def _refresh_containers(self) -> None:
        from cluster.dashboard.faults import docker_process_states

        states, tools_trace = await asyncio.to_thread(docker_process_states, self.docker_tools_dir)
        self.snapshotter.process_states = states
        if all(f.path != tools_trace for f in self.feed.followers):
            self.feed.followers.append(TraceFollower(tools_trace, "tools", start_at_end=True))

    async def _refresh_cuts(self) -> None:
        self.snapshotter.cuts = await asyncio.to_thread(read_cuts, self.spec)

    async def _scrape_metrics(self) -> None:
        brokers = [b for b in (self.spec.brokers if self.spec is not None else []) if getattr(b, "metrics_port", 0)]
        if not brokers:
            return

        async def one(broker) -> None:
            text = await asyncio.to_thread(scrape, f"http://{broker.host}:{broker.metrics_port}/metrics")
            counters = parse_counters(text) if text is not None else None
            self.metric_rates.update(broker.broker_id, time.time(), counters)

        await asyncio.gather(*(one(b) for b in brokers))
