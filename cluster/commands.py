"""The bodies of the kafkasim commands that talk to a running cluster or run a process in the foreground."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

from cluster.admin import ClusterState, min_isr_by_topic, read_cluster_state
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec
from zk.admin import AdminError, add_partitions, create_topic, delete_topic
from zk.assignment import InvalidPartitionsError, InvalidReplicationFactorError, InvalidTopicError
from traces.faults import TOOLS_TRACE_FILE, record_fault
from zk.client import ZkClient, ZkUnavailableError, connected


@contextlib.asynccontextmanager
async def _zk(connect: str) -> AsyncIterator[ZkClient]:
    try:
        async with connected(connect) as zk:
            yield zk
    except ZkUnavailableError as exc:
        raise ClusterError(f"{exc} (is the cluster up? 'kafkasim up')") from None


def run_zookeeper(data_dir: Path, port: int, tick_time_ms: int) -> int:
    from zk.server import ZooKeeperServer, ZooKeeperSetupError

    server = ZooKeeperServer(data_dir / "zookeeper", port=port, tick_time_ms=tick_time_ms)
    try:
        server.data_dir.mkdir(parents=True, exist_ok=True)
        server.write_config()
        command = server.command()
    except ZooKeeperSetupError as exc:
        raise ClusterError(str(exc)) from None
    print(f"ZooKeeper on {server.connect} (tickTime {tick_time_ms} ms), data in {server.data_dir}", flush=True)
    process = subprocess.Popen(command, start_new_session=True)
    try:
        return process.wait()
    except KeyboardInterrupt:
        os.killpg(process.pid, signal.SIGTERM)
        return process.wait()


def _replicas(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def print_state(state: ClusterState, as_json: bool, brokers: bool = True) -> None:
    if as_json:
        print(json.dumps(state.as_dict(), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if brokers:
        controller = f"broker {state.controller_id}" if state.controller_id >= 0 else "none"
        console.print(f"controller: {controller}, epoch {state.controller_epoch}")
        table = Table("broker", "endpoints", "broker epoch (czxid)")
        for broker in state.brokers:
            table.add_row(str(broker.broker_id), " ".join(broker.endpoints), str(broker.broker_epoch))
        console.print(table)
    table = Table("topic", "partition", "leader", "leader epoch", "replicas", "isr")
    for p in state.partitions:
        leader = str(p.leader) if p.leader >= 0 else "[red]none[/red]"
        table.add_row(p.topic, str(p.partition), leader, str(p.leader_epoch), _replicas(p.replicas), _replicas(p.isr))
    console.print(table)
    for p in state.partitions:
        if p.adding_replicas or p.removing_replicas:
            console.print(f"partition {p.topic}-{p.partition} is being reassigned: adding "
                          f"{_replicas(p.adding_replicas) or '-'}, removing {_replicas(p.removing_replicas) or '-'}")
    for topic in state.topics_being_deleted:
        console.print(f"topic {topic} is being deleted")
    for problem in state.problems:
        console.print(f"[yellow]warning[/yellow]: {problem}")


async def status(zk_connect: str, as_json: bool) -> int:
    async with _zk(zk_connect) as zk:
        print_state(await read_cluster_state(zk), as_json)
    return 0


async def topic_create(zk_connect: str, name: str, partitions: int, replication_factor: int,
                       config: dict[str, str]) -> int:
    from broker.dynamic_config import ConfigError, validate_topic_overrides
    from broker.log.config import LogConfig

    try:
        # the brokers' own check (CreateTopics, AlterConfigs): a config no broker could apply is never written
        validate_topic_overrides(name, config, LogConfig())
    except ConfigError as exc:
        raise ClusterError(f"{exc}; topic {name} not created") from None
    async with _zk(zk_connect) as zk:
        try:
            assignment = await create_topic(zk, name, partitions, replication_factor, config)
        except (AdminError, InvalidTopicError, InvalidReplicationFactorError, InvalidPartitionsError) as exc:
            raise ClusterError(str(exc)) from None
    print(f"created topic {name}: " + ", ".join(f"{p}:[{_replicas(r)}]" for p, r in assignment.items()))
    return 0


async def topic_describe(zk_connect: str, name: str | None, as_json: bool, report: str | None = None,
                         broker_min_isr: str | None = None) -> int:
    """``report``: only the partitions one of kafka-topics' report filters names (cluster/partition_health.py);
    ``broker_min_isr`` is the brokers' min.insync.replicas, for topics that do not set their own."""
    async with _zk(zk_connect) as zk:
        if name is not None and await zk.exists(f"/brokers/topics/{name}") is None:
            raise ClusterError(f"topic {name!r} does not exist")
        state = await read_cluster_state(zk, [name] if name else None)
        if report is not None:
            from cluster.partition_health import select

            min_isr_of = await min_isr_by_topic(zk, {p.topic for p in state.partitions}, broker_min_isr)
            state.partitions = select(state.partitions, report, [b.broker_id for b in state.brokers], min_isr_of)
        print_state(state, as_json, brokers=False)
    return 0


async def topic_alter(zk_connect: str, name: str, partitions: int) -> int:
    """Adds partitions through ZooKeeper, as `kafka-topics.sh --zookeeper ... --alter --partitions N` does."""
    async with _zk(zk_connect) as zk:
        try:
            added = await add_partitions(zk, name, partitions)
        except AdminError as exc:
            raise ClusterError(str(exc)) from None
    print(f"topic {name}: added partitions " + ", ".join(f"{p}:[{_replicas(r)}]" for p, r in added.items()))
    return 0


async def topic_delete(zk_connect: str, name: str) -> int:
    async with _zk(zk_connect) as zk:
        try:
            await delete_topic(zk, name)
        except AdminError as exc:
            raise ClusterError(str(exc)) from None
    print(f"topic {name} marked for deletion")
    return 0


async def resolve_target(spec: ClusterSpec, broker_id: int | None, controller: bool, leader_of: str | None) -> int:
    if broker_id is not None:
        spec.broker(broker_id)
        return broker_id
    async with _zk(spec.zookeeper) as zk:
        if controller:
            state = await read_cluster_state(zk, topics=[])
            if state.controller_id < 0:
                raise ClusterError("there is no controller right now")
            return state.controller_id
        topic, _, partition = (leader_of or "").rpartition("/")
        if not topic or not partition.isdigit():
            raise ClusterError(f"--leader-of takes TOPIC/PARTITION, got {leader_of!r}")
        state = await read_cluster_state(zk, topics=[topic])
        view = state.partition(topic, int(partition))
        if view is None:
            raise ClusterError(f"partition {topic}/{partition} does not exist")
        if view.leader < 0:
            raise ClusterError(f"partition {topic}/{partition} has no leader right now")
        return view.leader


async def kill(data_dir: Path, spec: ClusterSpec, broker_id: int | None, controller: bool, leader_of: str | None,
               signum: int) -> int:
    target = await resolve_target(spec, broker_id, controller, leader_of)
    pid = ClusterLayout(data_dir).broker_pid(target).read()
    if pid is None:
        raise ClusterError(f"broker {target} is not running")
    # recorded first, so the fault precedes every effect it has in the brokers' traces
    record_fault(data_dir / TOOLS_TRACE_FILE, signal.Signals(signum).name.lower(), f"broker {target} (pid {pid})",
                 broker_id=target)
    os.kill(pid, signum)
    print(f"sent {signal.Signals(signum).name} to broker {target} (pid {pid})")
    return 0
