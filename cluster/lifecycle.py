"""``kafkasim up`` / ``down`` / ``start``: bring a whole cluster up in a data directory and take it down."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

from broker.config import PROFILES, ConfigError, KafkaConfig
from broker.log.cleaner.cpu_group import remove_groups_of_stopped_brokers
from cluster.admin import read_cluster_state
from cluster.net.plan import DEFAULT_SUBNET
from cluster.readiness import wait_until_serving
from cluster.disk import broker_log_dir, mount_log_dir, recorded_mounts, require_root, unmount_log_dirs
from cluster.processes import (
    BrokerSpec,
    ClusterError,
    ClusterLayout,
    ClusterSpec,
    broker_properties,
    choose_ports,
    metrics_url,
    spawn_broker,
    spawn_zookeeper,
    stop_process,
    write_properties,
)
from cluster.waiting import poll_until
from traces.faults import TOOLS_TRACE_FILE, record_fault
from zk.client import ZkClient, connected
from zk.server import ZooKeeperSetupError, free_port, port_is_free

Say = Callable[[str], None]


# how long a ZooKeeper brought back after the zk-down fault waits for its old port to be bindable again
ZOOKEEPER_PORT_WAIT_S = 10.0

# A one-broker cluster gets what Kafka's single-node examples set (its config/server.properties, Confluent's quick
# starts): with the defaults (3, 3, 2) its brokers refuse to create __consumer_offsets and __transaction_state
# (COORDINATOR_NOT_AVAILABLE, KIP-115), so no group or transaction would ever start. The user's overrides win.
SINGLE_BROKER_OVERRIDES = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


def with_single_broker_settings(brokers: int, overrides: dict[str, str] | None) -> dict[str, str]:
    """The overrides a cluster of ``brokers`` starts with: the user's, under SINGLE_BROKER_OVERRIDES for one broker."""
    return {**(SINGLE_BROKER_OVERRIDES if brokers == 1 else {}), **(overrides or {})}


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


async def wait_for_cluster(zk_connect: str, broker_ids: list[int], layout: ClusterLayout | None = None,
                           timeout_s: float = 60.0, newer_than: dict[int, int] | None = None) -> tuple[int, int]:
    """Waits until every broker is registered (with a broker epoch above ``newer_than``'s, for restarts)
    and a controller is elected; returns (controller, epoch)."""
    zk = ZkClient(zk_connect, session_timeout_ms=10000, connection_timeout_ms=int(timeout_s * 1000))
    await zk.start()
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            state = await read_cluster_state(zk, topics=[])
            registered = {b.broker_id for b in state.brokers}
            fresh = {b.broker_id for b in state.brokers if b.broker_epoch > (newer_than or {}).get(b.broker_id, -1)}
            if set(broker_ids) <= fresh and state.controller_id in registered:
                return state.controller_id, state.controller_epoch
            if layout is not None:
                for broker_id in broker_ids:
                    if broker_id not in fresh and layout.broker_pid(broker_id).read() is None:
                        raise ClusterError(f"broker {broker_id} exited during start-up; the end of its log "
                                           f"({layout.broker_log(broker_id)}):\n"
                                           f"{_tail(layout.broker_log(broker_id))}")
            if time.monotonic() > deadline:
                raise ClusterError(f"cluster not ready after {timeout_s:.0f} s: registered {sorted(registered)}, "
                                   f"controller {state.controller_id}; see the broker logs "
                                   f"in {layout and layout.data_dir}")
            await asyncio.sleep(0.05)
    finally:
        await zk.close()


def wait_until_ready(spec: ClusterSpec, broker_ids: list[int], layout: ClusterLayout, timeout_s: float = 60.0,
                     newer_than: dict[int, int] | None = None) -> tuple[int, int]:
    """Every named broker registered (newer than ``newer_than``'s epochs, for restarts), a controller elected, and each
    of them serving (its Metadata names the controller, cluster/readiness.py); returns (controller, epoch)."""
    controller, epoch = asyncio.run(wait_for_cluster(spec.zookeeper, broker_ids, layout, timeout_s, newer_than))
    wait_until_serving([b for b in spec.brokers if b.broker_id in broker_ids])
    return controller, epoch


def up(data_dir: Path, brokers: int = 3, zookeeper: str | None = None, profile: str = "kafka",
       overrides: dict[str, str] | None = None, base_port: int = 9092, zookeeper_port: int = 0,
       tick_time_ms: int = 200, say: Say = print, netns: bool = False, subnet: str | None = None,
       log_dir_size_mib: int | None = None) -> ClusterSpec:
    """``subnet`` or ``netns``: every process in its own network namespace on a bridge (cluster/net/), as root.
    ``log_dir_size_mib``: a tmpfs of that size on each broker's log directory (root only), for the disk-full
    fault (`kafkasim fill`)."""
    netns = netns or subnet is not None
    if netns:
        from cluster.net import system as net_system

        net_system.require_root("kafkasim up --netns")
        if zookeeper is not None:
            raise ClusterError("--netns starts its own ZooKeeper in a namespace of its own, so links to it can be "
                               "cut: leave out --zookeeper")
    if profile not in PROFILES:
        raise ClusterError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    if brokers < 1:
        raise ClusterError("--brokers must be at least 1")
    overrides = with_single_broker_settings(brokers, overrides)
    if log_dir_size_mib is not None:
        require_root()
    layout = ClusterLayout(data_dir)
    if layout.spec_path.exists():
        old = layout.load()
        running = [b.broker_id for b in old.brokers if layout.broker_pid(b.broker_id).read() is not None]
        if running or layout.zookeeper_pid().read() is not None:
            raise ClusterError(f"a cluster is already running in {data_dir} (brokers {running}): "
                               "'kafkasim down' first, or use another --data-dir")
        unmount_log_dirs(recorded_mounts(old), say)  # left behind by a cluster that crashed
    if netns:
        return _up_netns(layout, brokers, profile, overrides, base_port, zookeeper_port, tick_time_ms, say,
                         subnet or DEFAULT_SUBNET, log_dir_size_mib)
    ports = choose_ports(brokers, base_port)
    if zookeeper is None and zookeeper_port == 0:
        # chosen now, away from the brokers' ports: none is bound before the brokers start, so a probe alone could
        # hand ZooKeeper one of them and that broker would then fail to bind it
        zookeeper_port = free_port(avoid={port for one in ports for port in one})
    spec = ClusterSpec(zookeeper=zookeeper or "", external_zookeeper=zookeeper is not None, profile=profile,
                       brokers=[BrokerSpec(i + 1, client, cluster, metrics_port=metrics)
                                for i, (client, cluster, metrics) in enumerate(ports)],
                       overrides=dict(overrides or {}), tick_time_ms=tick_time_ms)
    _validate(spec, layout)
    say(f"profile {profile}" + "".join(f"\n  {k}={v}" for k, v in PROFILES[profile].items()))
    _say_internal_topics(spec, layout, say)
    # before anything starts: a refused mount (a log dir holding logs already) leaves nothing running
    _mount_log_dirs(spec, layout, log_dir_size_mib, say)
    started = time.monotonic()
    try:
        if zookeeper is None:
            server = spawn_zookeeper(layout, zookeeper_port, tick_time_ms)
            spec.zookeeper = server.connect
            say(f"ZooKeeper on {server.connect} (tickTime {tick_time_ms} ms), data in {layout.zookeeper_dir()}")
        layout.save(spec)
        for broker in spec.brokers:
            write_properties(layout.broker_config(broker.broker_id), broker_properties(spec, broker, layout))
            spawn_broker(layout, broker.broker_id)
        controller, epoch = wait_until_ready(spec, [b.broker_id for b in spec.brokers], layout)
    except BaseException:
        # a cluster that did not come up leaves nothing running: no ZooKeeper, broker or mount behind the error
        for broker in spec.brokers:
            stop_process(layout.broker_pid(broker.broker_id), 5.0, signal.SIGKILL)
        if zookeeper is None:
            stop_process(layout.zookeeper_pid(), 5.0, signal.SIGKILL)
        unmount_log_dirs(recorded_mounts(spec), lambda _: None)
        raise
    say(f"{brokers} brokers registered, controller is broker {controller} (epoch {epoch}), "
        f"ready in {time.monotonic() - started:.1f} s")
    say(f"bootstrap servers: {spec.bootstrap_servers}")
    _say_metrics(spec, say)
    return spec


def _say_metrics(spec: ClusterSpec, say: Say) -> None:
    urls = [f"  broker {b.broker_id}: {url}" for b in spec.brokers if (url := metrics_url(b))]
    if urls:
        say("Prometheus metrics (docs/metrics.md):\n" + "\n".join(urls))


def _mount_log_dirs(spec: ClusterSpec, layout: ClusterLayout, size_mib: int | None, say: Say) -> None:
    if size_mib is None:
        return
    try:
        for broker in spec.brokers:
            log_dir = broker_log_dir(spec, broker.broker_id, layout)
            mount = mount_log_dir(layout.data_dir, broker.broker_id, log_dir, size_mib)
            spec.log_dir_mounts.append(mount.as_json())
    finally:
        if spec.log_dir_mounts:
            layout.save(spec)  # even after a failed mount: `down` unmounts the ones made
    say(f"log directories on {size_mib} MiB tmpfs mounts ({len(spec.log_dir_mounts)}): "
        f"`kafkasim fill BROKER` fills one")


def _say_internal_topics(spec: ClusterSpec, layout: ClusterLayout, say: Say) -> None:
    """The internal topics' replication, when a cluster this size would not give them what their configs ask for
    (or gets the single-broker settings): the brokers refuse to create a topic with fewer live brokers than its
    replication factor, so groups or transactions would wait for brokers that never come."""
    props = broker_properties(spec, spec.brokers[0], layout) | {"zookeeper.connect": spec.zookeeper or "127.0.0.1:1"}
    config = KafkaConfig.from_properties(props, "broker configuration")
    brokers = len(spec.brokers)
    if brokers == 1:
        chosen = {k: v for k, v in spec.overrides.items() if k in SINGLE_BROKER_OVERRIDES}
        say("one broker: internal topics with " + ", ".join(f"{k}={v}" for k, v in chosen.items()))
    for prop, factor, what in (
            ("offsets.topic.replication.factor", config.offsets_topic_replication_factor, "consumer groups"),
            ("transaction.state.log.replication.factor", config.transaction_state_log_replication_factor,
             "transactions")):
        if factor > brokers:
            say(f"warning: {prop} is {factor} but the cluster has {brokers} brokers: {what} will get "
                f"COORDINATOR_NOT_AVAILABLE until {factor} brokers are up; use --override {prop}={brokers}")


def _validate(spec: ClusterSpec, layout: ClusterLayout) -> None:
    """Every broker's configuration, before anything starts."""
    for broker in spec.brokers:
        props = broker_properties(spec, broker, layout) | {"zookeeper.connect": spec.zookeeper or "127.0.0.1:1"}
        try:
            KafkaConfig.from_properties(props, f"broker {broker.broker_id} configuration")
        except ConfigError as exc:
            raise ClusterError(str(exc)) from None


def _up_netns(layout: ClusterLayout, brokers: int, profile: str, overrides: dict[str, str] | None, base_port: int,
              zookeeper_port: int, tick_time_ms: int, say: Say, subnet: str,
              log_dir_size_mib: int | None) -> ClusterSpec:
    """Each broker and ZooKeeper in a namespace of their own, at the plan's addresses; every broker binds and
    advertises its namespace address, so clients on the host reach it over the bridge. Anything started is
    stopped and the network removed again when start-up fails. Log-directory mounts are made on the host before
    the brokers start, so a broker in its namespace and `kafkasim fill` on the host see the same tmpfs."""
    from cluster.net import topology
    from cluster.net.plan import ZOOKEEPER_PORT, PlanError, new_tag, plan_network

    broker_ids = list(range(1, brokers + 1))
    try:
        plan = plan_network(subnet, broker_ids, new_tag())
    except PlanError as exc:
        raise ClusterError(str(exc)) from None
    topology.check_free(plan)
    # each broker has the namespace's address to itself, so all use the same two ports
    client_port = base_port or 9092
    zk_port = zookeeper_port or ZOOKEEPER_PORT
    spec = ClusterSpec(zookeeper=f"{plan.zookeeper_address}:{zk_port}", external_zookeeper=False, profile=profile,
                       brokers=[BrokerSpec(b, client_port, client_port + 100, host=plan.broker_address(b),
                                           metrics_port=client_port + 200)
                                for b in broker_ids],
                       overrides=dict(overrides or {}), tick_time_ms=tick_time_ms, network=plan.as_dict())
    _validate(spec, layout)
    say(f"profile {profile}" + "".join(f"\n  {k}={v}" for k, v in PROFILES[profile].items()))
    _say_internal_topics(spec, layout, say)
    _mount_log_dirs(spec, layout, log_dir_size_mib, say)
    started = time.monotonic()
    try:
        topology.build(plan)
    except BaseException:
        unmount_log_dirs(recorded_mounts(spec), lambda _: None)
        raise
    say(f"network {plan.subnet} (tag {plan.tag}): namespaces {', '.join(plan.namespaces)}; the host is "
        f"{plan.host_address} on {plan.host_link}")
    try:
        # saved first: a crash from here on leaves a spec that 'kafkasim net clean' and 'down' can read
        layout.save(spec)
        spawn_zookeeper(layout, zk_port, tick_time_ms, host=plan.zookeeper_address,
                        namespace=plan.zookeeper_namespace)
        say(f"ZooKeeper on {spec.zookeeper} (tickTime {tick_time_ms} ms) in {plan.zookeeper_namespace}")
        for broker in spec.brokers:
            write_properties(layout.broker_config(broker.broker_id), broker_properties(spec, broker, layout))
            spawn_broker(layout, broker.broker_id)
        controller, epoch = wait_until_ready(spec, broker_ids, layout)
    except BaseException:
        for broker_id in broker_ids:
            stop_process(layout.broker_pid(broker_id), 5.0, signal.SIGKILL)
        stop_process(layout.zookeeper_pid(), 5.0, signal.SIGKILL)
        topology.remove(plan)
        unmount_log_dirs(recorded_mounts(spec), lambda _: None)
        raise
    say(f"{brokers} brokers registered, controller is broker {controller} (epoch {epoch}), "
        f"ready in {time.monotonic() - started:.1f} s")
    say(f"bootstrap servers: {spec.bootstrap_servers}")
    _say_metrics(spec, say)
    return spec


def start_broker(data_dir: Path, broker_id: int, wait: bool = True, say: Say = print) -> int:
    layout = ClusterLayout(data_dir)
    spec = layout.load()
    spec.broker(broker_id)
    previous = asyncio.run(_broker_epochs(spec.zookeeper))
    pid = spawn_broker(layout, broker_id)
    record_fault(data_dir / TOOLS_TRACE_FILE, "start", f"broker {broker_id} (pid {pid})", broker_id=broker_id)
    if wait:
        wait_until_ready(spec, [broker_id], layout, newer_than=previous)
    say(f"broker {broker_id} started (pid {pid})")
    return pid


def down(data_dir: Path, say: Say = print, timeout_s: float = 60.0, unmount: bool = True,
         controlled: bool = True) -> None:
    """Stops the brokers one at a time, the controller last (each does a controlled shutdown, so
    leadership moves once per broker instead of bouncing around), then ZooKeeper. ``unmount=False`` keeps the
    tmpfs log directories (and the records in them) for the caller to read and then unmount. ``controlled=False``
    kills the brokers instead: for a cluster whose logs were read already and that is removed next, moving its
    leaderships would only cost seconds."""
    layout = ClusterLayout(data_dir)
    spec = layout.load()
    if spec.network is not None:
        from cluster.net.actions import heal_plan
        from cluster.net.system import require_root
        from cluster.net.topology import plan_from_spec

        require_root("kafkasim down of a --netns cluster")
        # healed first: a broker cut off from ZooKeeper or the controller could not shut down in a controlled way
        heal_plan(plan_from_spec(spec.network))
    running = [b.broker_id for b in spec.brokers if layout.broker_pid(b.broker_id).read() is not None]
    controller = -1
    if running:
        try:
            controller = asyncio.run(_controller_id(spec.zookeeper))
        except Exception:
            pass  # ZooKeeper gone: the brokers just stop
    for broker_id in sorted(running, key=lambda b: (b == controller, b)):
        if stop_process(layout.broker_pid(broker_id), timeout_s, signal.SIGTERM if controlled else signal.SIGKILL):
            say(f"broker {broker_id} stopped")
    if not spec.external_zookeeper and stop_process(layout.zookeeper_pid(), 10.0):
        say("ZooKeeper stopped")
    if spec.network is not None:
        from cluster.net import topology

        for removed in topology.remove(topology.plan_from_spec(spec.network)):
            say(f"removed {removed}")
    if unmount:
        unmount_log_dirs(recorded_mounts(spec), say)
    # a broker's shutdown removes its cleaner workers' CPU group; a killed one cannot
    remove_groups_of_stopped_brokers(wait_s=1.0)


async def _broker_epochs(zk_connect: str) -> dict[int, int]:
    async with connected(zk_connect) as zk:
        return {b.broker_id: b.broker_epoch for b in (await read_cluster_state(zk, topics=[])).brokers}


async def _controller_id(zk_connect: str) -> int:
    async with connected(zk_connect, connection_timeout_ms=3000) as zk:
        return (await read_cluster_state(zk, topics=[])).controller_id


def stop_zookeeper(data_dir: Path, signum: int = signal.SIGKILL, say: Say = print) -> None:
    """The zk-down fault: the cluster's own ZooKeeper dies (kill -9 unless told otherwise). Its data directory
    stays, so a start brings back every znode and every session it had granted, as a restarted ensemble does."""
    layout = ClusterLayout(data_dir)
    spec = layout.load()
    if spec.external_zookeeper:
        raise ClusterError(f"this cluster uses an external ZooKeeper ({spec.zookeeper}); kafkasim stops only the "
                           "ZooKeeper it started itself")
    pid = layout.zookeeper_pid().read()
    if pid is None:
        raise ClusterError(f"the ZooKeeper of {data_dir} is not running")
    record_fault(data_dir / TOOLS_TRACE_FILE, "zk-stop", f"zookeeper (pid {pid})",
                 detail=f"signal {signal.Signals(signum).name}")
    stop_process(layout.zookeeper_pid(), 10.0, signum)
    say(f"ZooKeeper (pid {pid}) stopped with {signal.Signals(signum).name}")


def start_zookeeper(data_dir: Path, say: Say = print) -> None:
    """ZooKeeper back on its old port with its old data, after `stop_zookeeper`."""
    layout = ClusterLayout(data_dir)
    spec = layout.load()
    if spec.external_zookeeper:
        raise ClusterError(f"this cluster uses an external ZooKeeper ({spec.zookeeper}); start it yourself")
    address, port = spec.zookeeper.split("/", 1)[0].rsplit(":", 1)
    namespace = spec.namespace(None)
    if namespace is None:
        # The killed server's port can stay unbindable for a moment after its death (a chaos run's restart 4.5 s
        # later found it so on a loaded machine, then free): wait a little before calling it taken.
        waited_from = time.monotonic()
        try:
            poll_until(lambda: port_is_free(address, int(port)), ZOOKEEPER_PORT_WAIT_S, lambda _: TimeoutError())
        except TimeoutError:
            pass  # spawn_zookeeper says what holds it
        if time.monotonic() - waited_from > 0.2:
            say(f"ZooKeeper's port {port} could be bound again only after {time.monotonic() - waited_from:.1f} s")
    try:
        # a --netns cluster's ZooKeeper comes back in its own namespace at its own address, where the brokers look
        server = spawn_zookeeper(layout, int(port), spec.tick_time_ms, host=address, namespace=spec.namespace(None))
    except ZooKeeperSetupError as exc:
        raise ClusterError(f"ZooKeeper cannot come back on {spec.zookeeper}, where every broker looks for it: "
                           f"{exc}") from None
    record_fault(data_dir / TOOLS_TRACE_FILE, "zk-start", f"zookeeper (pid {layout.zookeeper_pid().read()})")
    say(f"ZooKeeper started again on {server.connect}")
