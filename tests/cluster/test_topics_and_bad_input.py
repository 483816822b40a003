"""Topics through the CLI, unclean election as a switch, and bad input: clear errors, nothing changed."""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.processes import write_properties
from tests.cluster.test_controller import SESSION_S, make_topic
from tests.harness import wait_until, zk_call
from zk.server import free_port, port_is_free

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def kafkasim(cluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(cluster.data_dir), *args],
                          capture_output=True, text=True, timeout=timeout)


def test_topics_are_created_described_and_deleted_through_zookeeper(cluster):
    made = kafkasim(cluster, "topic", "create", "events", "--partitions", "4", "--replication-factor", "2",
                    "--config", "retention.ms=1000", "--config", "cleanup.policy=compact,delete")
    assert made.returncode == 0, made.stderr
    wait_until(lambda: all(p.leader >= 0 for p in cluster.state(["events"]).partitions), 15, "leaders")
    described = json.loads(kafkasim(cluster, "topic", "describe", "events", "--json").stdout)
    partitions = described["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2, 3]
    assert all(len(p["replicas"]) == 2 and p["isr"] == p["replicas"] and p["leader"] == p["replicas"][0]
               for p in partitions)
    assert json.loads(cluster.raw("/config/topics/events")[0])["config"] == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete"}

    again = kafkasim(cluster, "topic", "create", "events", "--partitions", "1")
    assert again.returncode == 2 and "already exists" in again.stderr

    deleted = kafkasim(cluster, "topic", "delete", "events")
    assert deleted.returncode == 0, deleted.stderr
    wait_until(lambda: cluster.state().partitions == [] and cluster.state().topics_being_deleted == [], 15,
               "the topic to be deleted")
    assert zk_call(cluster.zk_connect, lambda zk: zk.exists("/config/topics/events")) is None
    missing = kafkasim(cluster, "topic", "delete", "events")
    assert missing.returncode == 2 and "does not exist" in missing.stderr


@pytest.mark.parametrize("args, message", [
    (["bad name!", "--partitions", "1"], "illegal"),
    (["x" * 250, "--partitions", "1"], "at most 249"),
    (["big", "--partitions", "1", "--replication-factor", "4"], "larger than the 3 live brokers"),
    (["none", "--partitions", "0"], "larger than 0"),
    (["shredded", "--partitions", "1", "--config", "cleanup.policy=shred"], "cleanup.policy"),
    (["unknown", "--partitions", "1", "--config", "no.such.config=1"], "Unknown topic config name: no.such.config"),
])
def test_invalid_topic_requests_are_refused_and_change_nothing(cluster, args, message):
    result = kafkasim(cluster, "topic", "create", *args)
    assert result.returncode == 2 and message in result.stderr
    assert zk_call(cluster.zk_connect, lambda zk: zk.get_children("/brokers/topics")) == []


@pytest.mark.parametrize("unclean", [False, True])
def test_partition_with_no_live_isr_member_stays_offline_unless_unclean_election_is_on(cluster_factory, unclean):
    cluster = cluster_factory(overrides={"unclean.leader.election.enable": str(unclean).lower()})
    make_topic(cluster, "u", 1, 2)
    leader, follower = cluster.state(["u"]).partition("u", 0).replicas
    cluster.kill9(follower)
    wait_until(lambda: cluster.state(["u"]).partition("u", 0).isr == [leader], SESSION_S + 15, "ISR to shrink")
    cluster.kill9(leader)
    offline = wait_until(lambda: (p := cluster.state(["u"]).partition("u", 0)).leader == -1 and p,
                         SESSION_S + 15, "the partition to go offline")
    assert offline.isr == [leader]  # the controller never writes an empty ISR
    cluster.start(follower)
    if unclean:
        elected = wait_until(lambda: (p := cluster.state(["u"]).partition("u", 0)).leader == follower and p, 15,
                             "an unclean election")
        assert elected.isr == [follower]
    else:
        wait_until(lambda: follower in {b.broker_id for b in cluster.state(topics=[]).brokers}, 15, "follower up")
        still = cluster.state(["u"]).partition("u", 0)
        assert still.leader == -1 and still.isr == [leader]


def test_junk_json_in_a_znode_is_skipped_and_the_rest_keeps_working(cluster):
    zk_call(cluster.zk_connect, lambda zk: zk.create("/brokers/topics/junk", b"{not json"))
    make_topic(cluster, "good", 1, 3)
    controller = cluster.controller()
    log = cluster.layout.broker_log(controller).read_text()
    assert "skipping topic junk" in log and "/brokers/topics/junk" in log
    # a new controller reads the junk too, at failover, and still takes over
    cluster.kill9(controller)
    wait_until(lambda: cluster.controller() not in (-1, controller), SESSION_S + 15, "a new controller")
    wait_until(lambda: cluster.state(["good"]).partition("good", 0).leader not in (-1, controller), 15, "leader")


def run_broker(tmp_path: Path, props: dict[str, str]) -> subprocess.CompletedProcess:
    config = tmp_path / f"broker-{len(list(tmp_path.glob('*.properties')))}.properties"
    write_properties(config, {"log.dirs": str(tmp_path / "logs"), **props})
    return subprocess.run([sys.executable, "-m", "broker", "--config", str(config)], capture_output=True,
                          text=True, timeout=60)


def listeners() -> str:
    return f"PLAINTEXT://127.0.0.1:{free_port()},CLUSTER://127.0.0.1:{free_port()}"


def test_a_busy_port_fails_at_start_with_a_message(tmp_path, zk_connect):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_broker(tmp_path, {"broker.id": "1", "zookeeper.connect": zk_connect,
                                       "listeners": f"PLAINTEXT://127.0.0.1:{port},CLUSTER://127.0.0.1:{free_port()}"})
    assert result.returncode == 1
    assert f"PLAINTEXT://127.0.0.1:{port} cannot bind" in result.stderr and "change 'listeners'" in result.stderr


def test_a_broker_id_already_registered_fails_at_start(cluster, tmp_path):
    result = run_broker(tmp_path, {"broker.id": "1", "zookeeper.connect": cluster.zk_connect,
                                   "listeners": listeners()})
    assert result.returncode == 1 and "broker.id 1 is already registered" in result.stderr
    assert cluster.pid(1) is not None and 1 in {b.broker_id for b in cluster.state(topics=[]).brokers}


def test_unreachable_zookeeper_is_retried_then_fails_with_a_message(tmp_path):
    result = run_broker(tmp_path, {"broker.id": "1", "zookeeper.connect": f"127.0.0.1:{free_port()}",
                                   "zookeeper.connection.timeout.ms": "2500", "listeners": listeners()})
    assert result.returncode == 1
    assert "waiting for ZooKeeper" in result.stderr and "did not answer" in result.stderr


@pytest.mark.parametrize("props, message", [
    ({"zookeeper.connect": "127.0.0.1:1"}, "broker.id: is required"),
    ({"broker.id": "one", "zookeeper.connect": "127.0.0.1:1"}, "broker.id: Input should be a valid integer"),
    ({"broker.id": "1", "zookeeper.connect": "127.0.0.1:1", "listeners": "PLAINTEXT://127.0.0.1:1"},
     "listeners must include the cluster-plane listener CLUSTER"),
])
def test_bad_configuration_fails_before_anything_starts(tmp_path, props, message):
    result = run_broker(tmp_path, props)
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "logs").exists()


def test_up_starts_zookeeper_and_down_stops_exactly_those_processes(tmp_path):
    data_dir = tmp_path / "own"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        command = [sys.executable, "-m", "cluster.cli", "--data-dir", str(data_dir)]
        started = subprocess.run([*command, "up", "--brokers", "2", "--base-port", "0", "--profile", "classroom"],
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        assert "bootstrap servers: 127.0.0.1:" in started.stdout and "zookeeper.session.timeout.ms=2000" \
            in started.stdout
        pids = [int((data_dir / name).read_text().split()[0])
                for name in ("zookeeper/zookeeper.pid", "broker-1/broker.pid", "broker-2/broker.pid")]
        again = subprocess.run([*command, "up", "--base-port", "0"], capture_output=True, text=True, timeout=60)
        assert again.returncode == 2 and "already running" in again.stderr
        stopped = subprocess.run([*command, "down"], capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        for pid in pids:
            wait_until(lambda p=pid: not os.path.exists(f"/proc/{p}") or
                       open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] == "Z", 10, f"pid {pid} gone")
        assert bystander.poll() is None
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait()
        for name in ("broker-1/broker.pid", "broker-2/broker.pid", "zookeeper/zookeeper.pid"):
            path = data_dir / name
            if path.exists():
                try:
                    os.killpg(int(path.read_text().split()[0]), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass


def test_status_and_kill_through_the_cli(cluster):
    made = kafkasim(cluster, "topic", "create", "cli", "--partitions", "1", "--replication-factor", "3")
    assert made.returncode == 0, made.stderr
    wait_until(lambda: json.loads(kafkasim(cluster, "status", "--json").stdout)["partitions"][0]["leader"] >= 0,
               15, "a leader in status")
    status = json.loads(kafkasim(cluster, "status", "--json").stdout)
    assert status["controller"]["epoch"] == 1 and {b["broker_id"] for b in status["brokers"]} == {1, 2, 3}
    leader = status["partitions"][0]["leader"]
    killed = kafkasim(cluster, "kill", "--leader-of", "cli/0")
    assert killed.returncode == 0 and f"SIGKILL to broker {leader}" in killed.stdout
    wait_until(lambda: json.loads(kafkasim(cluster, "status", "--json").stdout)["partitions"][0]["leader"]
               not in (-1, leader), SESSION_S + 15, "status to show the new leader")
    controller = json.loads(kafkasim(cluster, "status", "--json").stdout)["controller"]["id"]
    stopped = kafkasim(cluster, "kill", "--controller", "--signal", "TERM")
    assert stopped.returncode == 0 and f"SIGTERM to broker {controller}" in stopped.stdout
    wait_until(lambda: cluster.pid(controller) is None, 30, "the controller to shut down")
    assert kafkasim(cluster, "kill", "--leader-of", "nope/0").returncode == 2


def test_the_data_dir_option_is_accepted_after_the_subcommand_too(cluster):
    before = subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(cluster.data_dir), "status",
                             "--json"], capture_output=True, text=True, timeout=60)
    after = subprocess.run([sys.executable, "-m", "cluster.cli", "status", "--json", "--data-dir",
                            str(cluster.data_dir)], capture_output=True, text=True, timeout=60)
    assert before.returncode == 0 and after.returncode == 0, (before.stderr, after.stderr)
    ids = [{b["broker_id"] for b in json.loads(run.stdout)["brokers"]} for run in (before, after)]
    assert ids == [{1, 2, 3}, {1, 2, 3}]
    nested = subprocess.run([sys.executable, "-m", "cluster.cli", "topic", "describe", "--data-dir",
                             str(cluster.data_dir)], capture_output=True, text=True, timeout=60)
    assert nested.returncode == 0, nested.stderr


def test_down_then_up_at_once_on_the_same_ports_works_every_time(tmp_path):
    data_dir = tmp_path / "cycles"
    base = next(p for p in (free_port() for _ in range(200))
                if all(port_is_free("127.0.0.1", q) for q in (p, p + 1, p + 100, p + 101, p + 200, p + 201))
                and p + 201 < 32768)
    command = [sys.executable, "-m", "cluster.cli", "--data-dir", str(data_dir)]
    try:
        for cycle in range(3):
            started = subprocess.run([*command, "up", "--brokers", "2", "--base-port", str(base), "--profile",
                                      "classroom"], capture_output=True, text=True, timeout=120)
            assert started.returncode == 0, f"cycle {cycle}: {started.stderr}"
            assert f"127.0.0.1:{base}" in started.stdout
            assert f"http://127.0.0.1:{base + 201}/metrics" in started.stdout  # bound again after each down
            # replicated partitions give the brokers connections on both planes to close when they stop
            made = subprocess.run([*command, "topic", "create", f"t{cycle}", "--partitions", "2",
                                   "--replication-factor", "2"], capture_output=True, text=True, timeout=60)
            assert made.returncode == 0, made.stderr
            stopped = subprocess.run([*command, "down"], capture_output=True, text=True, timeout=120)
            assert stopped.returncode == 0, stopped.stderr
    finally:
        for path in [*data_dir.glob("broker-*/broker.pid"), data_dir / "zookeeper/zookeeper.pid"]:
            if path.exists():
                try:
                    os.killpg(int(path.read_text().split()[0]), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
