"""Every replica the controller assigns gets Kafka's on-disk log, recovered after a crash and removed with
its topic."""

import signal

import pytest

from tests.cluster.test_controller import SESSION_S, make_topic
from tests.cluster.test_topics_and_bad_input import listeners, run_broker
from tests.harness import wait_until, zk_call

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def log_dir(cluster, broker_id):
    return cluster.layout.broker_dir(broker_id) / "logs"


def epoch_entries(cluster, broker_id, tp):
    lines = (log_dir(cluster, broker_id) / tp / "leader-epoch-checkpoint").read_text().split("\n")
    assert lines[0] == "0"  # format version
    return [tuple(map(int, line.split())) for line in lines[2:2 + int(lines[1])]]


def test_each_replica_gets_a_kafka_log_and_a_new_leader_records_its_epoch(cluster):
    make_topic(cluster, "disk", 2, 3)
    for broker in cluster.spec.brokers:
        for partition in (0, 1):
            directory = log_dir(cluster, broker.broker_id) / f"disk-{partition}"
            wait_until(lambda d=directory: (d / "00000000000000000000.log").exists(), 10, f"{directory}")
            assert (directory / "00000000000000000000.index").exists()
            assert (directory / "00000000000000000000.timeindex").exists()
    first = cluster.state(["disk"]).partition("disk", 0)
    wait_until(lambda: epoch_entries(cluster, first.leader, "disk-0") == [(0, 0)], 10, "epoch 0 recorded")
    victim = first.leader
    cluster.kill9(victim)
    moved = wait_until(lambda: (p := cluster.state(["disk"]).partition("disk", 0)).leader not in (-1, victim) and p,
                       SESSION_S + 15, "a new leader")
    wait_until(lambda: epoch_entries(cluster, moved.leader, "disk-0")[-1] == (moved.leader_epoch, 0), 10,
               "the new leader's epoch recorded in its leader-epoch-checkpoint")


def test_clean_shutdown_skips_recovery_and_a_crash_recovers(cluster):
    make_topic(cluster, "rec", 1, 3)
    broker = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != cluster.controller())
    wait_until(lambda: (log_dir(cluster, broker) / "rec-0").exists(), 10, "the log")
    cluster.signal(broker, signal.SIGTERM)
    wait_until(lambda: cluster.pid(broker) is None, 30, "a clean exit")
    assert (log_dir(cluster, broker) / ".kafka_cleanshutdown").exists()
    assert (log_dir(cluster, broker) / "recovery-point-offset-checkpoint").exists()
    broker_log = cluster.layout.broker_log(broker)
    seen = len(broker_log.read_text())
    cluster.start(broker)
    assert "no clean shutdown marker" not in broker_log.read_text()[seen:]
    assert not (log_dir(cluster, broker) / ".kafka_cleanshutdown").exists()  # removed once loaded
    cluster.kill9(broker)
    seen = len(broker_log.read_text())
    cluster.start(broker)
    assert "no clean shutdown marker; recovering" in broker_log.read_text()[seen:]
    assert (log_dir(cluster, broker) / "rec-0" / "00000000000000000000.log").exists()


def test_deleting_a_topic_removes_its_logs_everywhere(cluster):
    make_topic(cluster, "gone", 2, 2)
    zk_call(cluster.zk_connect, lambda zk: zk.create("/admin/delete_topics/gone"))
    for broker in cluster.spec.brokers:
        wait_until(lambda b=broker.broker_id: not any(log_dir(cluster, b).glob("gone-*")), 15,
                   f"broker {broker.broker_id} to delete the logs")


def test_a_second_broker_on_the_same_log_dirs_fails_at_start(cluster, tmp_path):
    result = run_broker(tmp_path, {"broker.id": "9", "zookeeper.connect": cluster.zk_connect,
                                   "listeners": listeners(), "log.dirs": str(log_dir(cluster, 1))})
    assert result.returncode == 1 and "same log.dirs" in result.stderr
