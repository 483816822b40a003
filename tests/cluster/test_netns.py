"""A ``kafkasim up --netns`` cluster with real namespaces, nftables cuts and real processes: clients on the host
reach the brokers' advertised namespace addresses; a follower cut from the other brokers leaves the ISR and comes
back once healed; a leader cut from ZooKeeper becomes a zombie that clients still reach; down and net clean leave
nothing behind.

CI runs as root, so nothing here is skipped. Every name is checked and removed by this cluster's tag, never by
the bare prefix: other clusters may run on the same machine.
"""

from __future__ import annotations

import ipaddress
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from cluster.lifecycle import down, start_zookeeper, stop_zookeeper, up
from cluster.net import actions, system, topology
from cluster.net.plan import NetworkPlan, overlapping, plan_network
from cluster.processes import ClusterLayout, PidFile
from tests.harness import RunningCluster, read_traces, wait_until
from tests.replication.support import (
    NONE,
    SESSION_S,
    make_topic,
    produce,
    produce_acknowledged,
    replica_log,
    values_by_offset,
    wait_for_event,
    wait_for_identical_replicas,
    wait_for_isr,
    wait_for_leader,
)
from traces import events as te
from traces.faults import TOOLS_TRACE_FILE

pytestmark = [pytest.mark.processes, pytest.mark.netns]
TIMINGS: dict[str, float] = {}


def free_subnet() -> str:
    """A /24 no route of this host covers, so a cluster running elsewhere on the machine is never hit."""
    routed = system.host_routes()
    for _ in range(200):
        subnet = f"10.{random.randint(100, 250)}.{random.randint(0, 255)}.0/24"
        if not overlapping(subnet, routed):
            return subnet
    raise AssertionError("no free /24 under 10.100.0.0/8 on this host")


def names_of(tag: str) -> tuple[list[str], list[str]]:
    """This tag's namespaces and host links, as ``ip netns list`` and ``ip link`` show them."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return ([line.split()[0] for line in namespaces.splitlines() if line.startswith(f"kafkasim-{tag}-")],
            [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()
             if line.split(":")[1].strip().startswith(f"ksim{tag}")])


def remove_by_name(data_dir: Path) -> None:
    """The finalizer: every process by its PID file (SIGKILL to its group), then this cluster's names."""
    for pid_path in [*data_dir.glob("broker-*/broker.pid"), *data_dir.glob("zookeeper/zookeeper.pid")]:
        pid = PidFile(pid_path).read()
        if pid is not None:
            os.killpg(pid, signal.SIGKILL)
            wait_until(lambda p=pid_path: PidFile(p).read() is None, 10, f"{pid_path} to die")
    layout = ClusterLayout(data_dir)
    if layout.spec_path.exists() and (network := layout.load().network) is not None:
        plan = NetworkPlan.from_dict(network)
        wait_until(lambda: not any(system.namespace_pids(ns) for ns in plan.namespaces if ns in system.namespaces()),
                   10, "the namespaces to empty")
        topology.remove(plan)


def start(data_dir: Path, brokers: int) -> RunningCluster:
    started = time.monotonic()
    spec = up(data_dir, brokers=brokers, profile="classroom", tick_time_ms=100, subnet=free_subnet(),
              say=lambda _: None)
    TIMINGS.setdefault("up --netns (s)", round(time.monotonic() - started, 2))
    return RunningCluster(data_dir, spec, spec.zookeeper)


@pytest.fixture(scope="module")
def netns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    data_dir = tmp_path_factory.mktemp("netns") / "cluster"
    try:
        yield start(data_dir, brokers=3)
    finally:
        remove_by_name(data_dir)
        print(f"\nnetns timings: {TIMINGS}")


def plan_of(cluster: RunningCluster) -> NetworkPlan:
    assert cluster.spec.network is not None
    return NetworkPlan.from_dict(cluster.spec.network)


def test_brokers_advertise_their_namespace_addresses_and_clients_on_the_host_produce_and_consume(netns_cluster):
    cluster, plan = netns_cluster, plan_of(netns_cluster)
    namespaces, links = names_of(plan.tag)
    assert sorted(namespaces) == sorted(plan.namespaces) and links == [plan.host_link]
    make_topic(cluster, "hello", [1, 2, 3])
    advertised = AdminClient({"bootstrap.servers": cluster.spec.bootstrap_servers}).list_topics(timeout=10).brokers
    assert {b.id: (b.host, b.port) for b in advertised.values()} == {
        b: (address, 9092) for b, address in plan.broker_addresses.items()}

    producer = Producer({"bootstrap.servers": plan.broker_address(2) + ":9092", "acks": "all"})
    for i in range(20):
        producer.produce("hello", f"m{i}".encode())
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": plan.broker_address(3) + ":9092", "group.id": "netns-test",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("hello", 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(values) < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [f"m{i}".encode() for i in range(20)]


def test_a_follower_cut_from_the_other_brokers_leaves_the_isr_and_rejoins_once_healed(netns_cluster):
    cluster = netns_cluster
    make_topic(cluster, "cut", [1, 2, 3])
    actions.isolate(cluster.data_dir, 3, "brokers", say=lambda _: None)
    assert actions.status(cluster.data_dir, say=lambda _: None) == ["broker 3 drops traffic with broker 1, broker 2"]
    cut = time.monotonic()
    # a caught-up follower stays in the ISR however long it is silent (Kafka's isCaughtUp): the leader must move on
    wait_until(lambda: produce(cluster, 1, "cut", [b"x"], acks=1).error_code == NONE
               and sorted(cluster.state(["cut"]).partition("cut", 0).isr) == [1, 2], SESSION_S + 15,
               "broker 3 to leave the ISR", interval_s=0.2)
    TIMINGS["isr shrink after the cut (s)"] = round(time.monotonic() - cut, 2)
    actions.heal(cluster.data_dir, say=lambda _: None)
    healed = time.monotonic()
    wait_for_isr(cluster, "cut", [1, 2, 3], 45)
    TIMINGS["isr expand after heal (s)"] = round(time.monotonic() - healed, 2)
    faults = [e for e in read_traces(cluster.data_dir / TOOLS_TRACE_FILE) if isinstance(e, te.FaultInjected)]
    assert [(e.action, e.broker_id) for e in faults][-2:] == [("isolate", 3), ("heal", -1)]


def test_a_leader_cut_from_zookeeper_is_a_zombie_until_healed_then_truncates_its_divergent_writes(netns_cluster):
    cluster = netns_cluster
    controller = cluster.controller()
    leader, *followers = [b for b in (1, 2, 3) if b != controller] + [controller]
    make_topic(cluster, "zombie", [leader, *followers])
    produce_acknowledged(cluster, leader, "zombie", [b"before"], acks=-1)

    actions.isolate(cluster.data_dir, leader, "zookeeper", say=lambda _: None)
    cut = time.monotonic()
    zombie_writes: list[tuple[float, int, bytes]] = []
    new_leader = -1
    while new_leader < 0:
        value = f"zombie-{len(zombie_writes)}".encode()
        result = produce(cluster, leader, "zombie", [value], acks=1, timeout_ms=2000)
        assert result.error_code == NONE, f"the cut-off leader refused an acks=1 write: error {result.error_code}"
        zombie_writes.append((time.monotonic() - cut, result.base_offset, value))
        view = cluster.state(["zombie"]).partition("zombie", 0)
        if view.leader not in (leader, -1):
            new_leader = view.leader
        assert time.monotonic() - cut < SESSION_S + 20, "no new leader was elected"
        time.sleep(0.1)
    TIMINGS["new leader elected after the cut (s)"] = round(time.monotonic() - cut, 2)
    wait_for_leader(cluster, "zombie", new_leader, 10)
    # the zombie half: the controller moved the leadership, yet clients that reach the old leader still get acks
    elected = time.monotonic()
    for i in range(5):
        value = b"zombie-after-election" if i == 4 else f"zombie-after-election-{i}".encode()
        result = produce(cluster, leader, "zombie", [value], acks=1, timeout_ms=2000)
        assert result.error_code == NONE, f"the zombie refused an acks=1 write: error {result.error_code}"
        zombie_writes.append((time.monotonic() - cut, result.base_offset, value))
        time.sleep(0.1)
    TIMINGS["zombie acks=1 writes acknowledged after the election for (s)"] = round(time.monotonic() - elected, 2)
    # ...but nothing it takes with acks=all is acknowledged: its followers fetch from the new leader now
    try:
        refused = produce(cluster, leader, "zombie", [b"zombie-acks-all"], acks=-1, timeout_ms=3000).error_code
    except (TimeoutError, ConnectionError):
        refused = "no answer"
    assert refused != NONE, "the zombie leader acknowledged an acks=all write"
    produce_acknowledged(cluster, new_leader, "zombie", [b"after"], acks=-1)

    actions.heal(cluster.data_dir, say=lambda _: None)
    healed = time.monotonic()
    # the other half: back in touch, the old leader learns its session expired, registers again and follows the
    # new leader, cutting its log back to where the new leader's epoch began
    truncated = wait_for_event(cluster, leader, te.FollowerTruncated, 30, topic="zombie", leader=new_leader)
    TIMINGS["old leader truncated after heal (s)"] = round(time.monotonic() - healed, 2)
    wait_for_identical_replicas(cluster, "zombie", [leader, *followers], 30)
    kept = values_by_offset(replica_log(cluster, new_leader, "zombie"))
    # writes taken before the followers stopped fetching from the zombie were replicated, so they survive;
    # the ones taken after are divergent and gone, the latest among them
    divergent = [value for _, offset, value in zombie_writes if offset >= truncated.to_offset]
    assert b"zombie-after-election" in divergent and truncated.from_offset > truncated.to_offset
    assert not set(kept.values()) & set(divergent), "a divergent zombie write survived the truncation"
    assert all(kept[offset] == value for _, offset, value in zombie_writes if offset < truncated.to_offset)
    assert {b"before", b"after"} <= set(kept.values())
    assert kept[truncated.to_offset] == b"after"  # the new leader's first write of its epoch
    TIMINGS["zombie acks=1 writes lost"] = len(divergent)
    TIMINGS["zombie acks=all answer"] = refused


def test_a_slow_broker_gets_netem_on_its_veth_or_a_clear_refusal_where_the_kernel_has_none(netns_cluster):
    cluster = netns_cluster
    traced = len(read_traces(cluster.data_dir / TOOLS_TRACE_FILE))
    try:
        applied = actions.slow(cluster.data_dir, 2, 50, 10, 1.0, say=lambda _: None)
    except system.NetCommandError as exc:
        # this machine's kernel is built without CONFIG_NET_SCH_NETEM: the error says so and nothing changed
        assert "CONFIG_NET_SCH_NETEM" in str(exc) and "tc -n" in str(exc) and "cuts still work" in str(exc)
        assert len(read_traces(cluster.data_dir / TOOLS_TRACE_FILE)) == traced
        return
    assert applied == "netem delay 50ms 10ms loss 1%"
    assert any(line.startswith("broker 2 sends through netem") for line in actions.status(cluster.data_dir,
                                                                                           say=lambda _: None))
    actions.heal(cluster.data_dir, say=lambda _: None)
    assert actions.status(cluster.data_dir, say=lambda _: None) == []


def test_zookeeper_stopped_and_started_again_comes_back_in_its_namespace_where_the_brokers_find_it(netns_cluster):
    cluster = netns_cluster
    plan = plan_of(cluster)
    stop_zookeeper(cluster.data_dir, say=lambda _: None)
    start_zookeeper(cluster.data_dir, say=lambda _: None)
    pid = cluster.layout.zookeeper_pid().read()
    assert pid is not None and pid in system.namespace_pids(plan.zookeeper_namespace)
    # every broker reconnects (or registers again) and a controller is elected: the cluster is whole again
    wait_until(lambda: len((state := cluster.state(topics=[])).brokers) == 3 and state.controller_id > 0, 60,
               "all three brokers registered with a controller after ZooKeeper came back")


def test_down_removes_every_namespace_link_and_table_of_the_cluster(netns_cluster):
    plan = plan_of(netns_cluster)
    actions.isolate(netns_cluster.data_dir, 1, "all", say=lambda _: None)  # down heals first
    started = time.monotonic()
    down(netns_cluster.data_dir, say=lambda _: None)
    TIMINGS["down (s)"] = round(time.monotonic() - started, 2)
    assert names_of(plan.tag) == ([], [])
    host_tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
    assert "kafkasim" not in host_tables


def test_net_clean_after_a_crash_stops_the_processes_and_removes_the_network(tmp_path):
    data_dir = tmp_path / "crashed"
    try:
        cluster = start(data_dir, brokers=1)
        plan = plan_of(cluster)
        actions.isolate(data_dir, 1, "zookeeper", say=lambda _: None)
        run = subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(data_dir), "net", "clean"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert f"removed namespace {plan.broker_namespace(1)}" in run.stdout
        assert names_of(plan.tag) == ([], [])
        assert cluster.pid(1) is None and cluster.layout.zookeeper_pid().read() is None
    finally:
        remove_by_name(data_dir)


def test_leftovers_are_found_by_name_and_removed_only_when_idle():
    plan = plan_network("10.1.2.0/24", [1], uuid.uuid4().hex[:6])
    system.add_namespace(plan.broker_namespace(1))
    sleeper = subprocess.Popen(["ip", "netns", "exec", plan.broker_namespace(1), "sleep", "60"],
                               start_new_session=True)
    try:
        found = topology.find_by_prefix()
        assert found.namespaces[plan.tag] == [plan.broker_namespace(1)]
        assert plan.tag not in topology.idle_tags(found, 0, keep=set())  # a process still runs in it
        os.killpg(sleeper.pid, signal.SIGKILL)
        sleeper.wait()
        assert plan.tag in topology.idle_tags(topology.find_by_prefix(), 0, keep=set())
        assert plan.tag not in topology.idle_tags(topology.find_by_prefix(), 3600, keep=set())  # too young
        topology.remove_names([], [plan.broker_namespace(1)])
        assert names_of(plan.tag) == ([], [])
    finally:
        if sleeper.poll() is None:
            os.killpg(sleeper.pid, signal.SIGKILL)
            sleeper.wait()
        if plan.broker_namespace(1) in system.namespaces():
            system.delete_namespace(plan.broker_namespace(1))


def test_up_netns_without_root_says_so_and_creates_nothing(tmp_path):
    data_dir = tmp_path / "nobody"
    before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    run = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                          "cluster.cli", "--data-dir", str(data_dir), "up", "--netns"],
                         capture_output=True, text=True, timeout=60, cwd="/")
    assert run.returncode == 1, run.stderr
    assert "needs root" in run.stderr and "kafkasim up" in run.stderr
    assert not data_dir.exists()
    after = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert {line for line in after.splitlines() if "kafkasim" in line} <= set(before.splitlines())


def test_net_commands_on_a_loopback_cluster_say_to_use_netns_or_docker(tmp_path):
    from cluster.processes import ClusterSpec

    ClusterLayout(tmp_path).save(ClusterSpec("127.0.0.1:1", False, "kafka", []))
    run = subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(tmp_path), "net", "isolate", "1",
                          "--from", "all"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "kafkasim up --netns" in run.stderr and "--docker" in run.stderr


def test_an_address_plan_keeps_the_subnet_free_of_the_hosts_routes():
    assert not overlapping(free_subnet(), system.host_routes())
    assert ipaddress.ip_network(free_subnet()).prefixlen == 24
