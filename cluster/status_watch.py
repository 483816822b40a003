"""`kafkasim status --watch`: the status tables redrawn in place (rich Live) as ZooKeeper changes, with
under-replicated and offline partitions marked and brokers that are not registered shown as down. One
ZooKeeper session for the whole watch; a ZooKeeper that does not answer is shown, never waited on."""

from __future__ import annotations

import asyncio
import time

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cluster.admin import ClusterState, min_isr_by_topic, read_cluster_state
from cluster.partition_health import health
from zk.client import ZkClient

READ_TIMEOUT_S = 2.0


def render(state: ClusterState | None, expected_brokers: list[int], min_isr_of: dict[str, int], at: float,
           problem: str | None = None) -> RenderableType:
    """The picture of one poll (pure): ``state`` None when ZooKeeper could not be read this time."""
    clock = time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 10) % 10}"
    if state is None:
        return Group(Text(f"{clock}  ZooKeeper: {problem or 'not answering'}", style="bold red"))
    controller = f"broker {state.controller_id}" if state.controller_id >= 0 else "[bold red]none[/bold red]"
    header = Text.from_markup(f"{clock}  controller: {controller}, controller epoch {state.controller_epoch}")
    registered = {b.broker_id: b for b in state.brokers}
    brokers = Table("broker", "state", "client endpoint", "broker epoch (czxid)", title="brokers",
                    title_justify="left")
    for broker_id in sorted(set(expected_brokers) | set(registered)):
        view = registered.get(broker_id)
        if view is None:
            brokers.add_row(str(broker_id), Text("down", style="bold red"), "", "")
            continue
        role = "controller" if broker_id == state.controller_id else "up"
        brokers.add_row(str(broker_id), Text(role, style="bold green" if role == "controller" else "green"),
                        view.endpoints[0] if view.endpoints else "", str(view.broker_epoch))
    partitions = Table("topic", "partition", "leader", "leader epoch", "replicas", "isr", "health",
                       title="partitions", title_justify="left")
    live = list(registered)
    offline = under = 0
    for p in state.partitions:
        h = health(p, live, min_isr_of.get(p.topic, 1))
        if h.unavailable:
            offline += 1
            style, note = "bold red", "offline"
        elif h.under_min_isr:
            under += 1
            style, note = "red", "under min ISR"
        elif h.under_replicated:
            under += 1
            style, note = "yellow", "under-replicated"
        else:
            style, note = "", ""
        leader = str(p.leader) if p.leader >= 0 else "none"
        partitions.add_row(p.topic, str(p.partition), leader, str(p.leader_epoch), ",".join(map(str, p.replicas)),
                           ",".join(map(str, p.isr)), note, style=style)
    summary = Text(f"{len(state.partitions)} partitions, {under} under-replicated, {offline} offline",
                   style="bold red" if offline else "yellow" if under else "green")
    notes = [Text(f"topic {t} is being deleted") for t in state.topics_being_deleted]
    notes += [Text(f"warning: {problem}", style="yellow") for problem in state.problems]
    return Group(header, brokers, partitions, summary, *notes)


async def poll(zk: ZkClient, broker_min_isr: str | None) -> tuple[ClusterState, dict[str, int]]:
    """The cluster state and every topic's effective min.insync.replicas."""
    state = await read_cluster_state(zk)
    return state, await min_isr_by_topic(zk, {p.topic for p in state.partitions}, broker_min_isr)


async def watch(zk_connect: str, expected_brokers: list[int], broker_min_isr: str | None, interval_s: float,
                console: Console, polls: int | None = None) -> None:
    """Redraws every ``interval_s`` until interrupted (or after ``polls`` polls)."""
    zk: ZkClient | None = None
    done = 0
    with Live(render(None, expected_brokers, {}, time.time(), "connecting"), console=console,
              auto_refresh=False) as live:
        try:
            while polls is None or done < polls:
                try:
                    if zk is None:
                        candidate = ZkClient(zk_connect, session_timeout_ms=6000,
                                             connection_timeout_ms=int(READ_TIMEOUT_S * 1000))
                        try:
                            await candidate.start(say=lambda _: None)
                        except BaseException:
                            await candidate.close()
                            raise
                        zk = candidate
                    state, min_isr_of = await asyncio.wait_for(poll(zk, broker_min_isr), READ_TIMEOUT_S)
                    picture = render(state, expected_brokers, min_isr_of, time.time())
                except Exception as exc:  # shown in the picture; the next poll tries again
                    problem = str(exc) or f"not answering within {READ_TIMEOUT_S:.0f} s"
                    picture = render(None, expected_brokers, {}, time.time(), problem)
                live.update(picture, refresh=True)
                done += 1
                await asyncio.sleep(interval_s)
        finally:
            if zk is not None:
                await zk.close()
