"""What really happened, read after every step: ZooKeeper's view (controller and its epoch, live brokers, each
partition's leader, leader epoch and ISR) and each replica's log end offset (its segment files) and high
watermark (the last HighWatermarkUpdated in its broker's trace). Returned as facts and drawn with rich."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.table import Table

from cluster.scenarios.actions import replica_values
from cluster.scenarios.context import ScenarioRun
from traces import events as te


@dataclass(frozen=True)
class ReplicaState:
    broker: int
    alive: bool
    log_end_offset: int
    high_watermark: int | None


def _from_traces(run: ScenarioRun, broker_id: int, truncations: dict[str, int]) -> dict[str, int]:
    """The last high watermark of each partition 0 the broker traced; counts its truncations into ``truncations``."""
    found: dict[str, int] = {}
    for event in run.traces(broker_id):
        if isinstance(event, te.HighWatermarkUpdated) and event.partition == 0:
            found[event.topic] = event.high_watermark
        elif isinstance(event, te.FollowerTruncated) and event.partition == 0:
            truncations[event.topic] = truncations.get(event.topic, 0) + 1
    return found


def observe(run: ScenarioRun) -> tuple[dict[str, Any], Table]:
    state = run.state()
    facts: dict[str, Any] = {"controller": state.controller_id, "controller_epoch": state.controller_epoch,
                             "live_brokers": sorted(b.broker_id for b in state.brokers)}
    truncations: dict[str, int] = {}
    high_watermarks = {b: _from_traces(run, b, truncations) for b in run.broker_ids()}
    table = Table(title=f"controller: broker {state.controller_id}, controller epoch {state.controller_epoch}; "
                        f"live brokers {facts['live_brokers']}", title_justify="left")
    for column in ("topic", "leader", "leader epoch", "ISR", "replicas: LEO / HW"):
        table.add_column(column)
    for view in state.partitions:
        if view.partition != 0:
            continue  # a scenario's stories are told on partition 0
        topic = view.topic
        facts |= {f"leader:{topic}": view.leader, f"leader_epoch:{topic}": view.leader_epoch,
                  f"isr:{topic}": sorted(view.isr), f"truncations:{topic}": truncations.get(topic, 0)}
        replicas = []
        for broker in view.replicas:
            replica = ReplicaState(broker, run.running(broker), len(replica_values(run, broker, topic)),
                                   high_watermarks[broker].get(topic))
            facts |= {f"leo:{topic}:{broker}": replica.log_end_offset, f"hw:{topic}:{broker}": replica.high_watermark}
            replicas.append(_replica_text(replica, view.leader))
        leader = f"[bold]{view.leader}[/bold]" if view.leader >= 0 else "[red]none[/red]"
        table.add_row(topic, leader, str(view.leader_epoch), ",".join(map(str, view.isr)), "  ".join(replicas))
    return facts, table


def _replica_text(replica: ReplicaState, leader: int) -> str:
    high_watermark = "?" if replica.high_watermark is None else str(replica.high_watermark)
    text = f"{replica.broker}: {replica.log_end_offset}/{high_watermark}"
    if not replica.alive:
        return f"[red]{text} down[/red]"
    return f"[bold]{text}[/bold]" if replica.broker == leader else text
