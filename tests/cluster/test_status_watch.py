"""`kafkasim status --watch` and kafka-topics' report filters on `topic describe`: the rules directly, the
picture on hand-made states, and both against a real cluster losing a broker (the watch in a real terminal)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest
from rich.console import Console

from cluster.admin import BrokerView, ClusterState, PartitionView
from cluster.partition_health import REPORTS, effective_min_isr, health, select as select_partitions
from cluster.status_watch import render
from tests.harness import RunningCluster, wait_until

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def partition(p: int, leader: int, isr: list[int], replicas: list[int] = [1, 2, 3]) -> PartitionView:  # noqa: B006
    return PartitionView("t", p, list(replicas), leader=leader, leader_epoch=3, isr=list(isr))


def test_the_report_rules_are_kafka_topics_rules():
    live = [1, 2]
    full, shrunk, at_one, leaderless, dead_leader = (
        partition(0, 1, [1, 2, 3]), partition(1, 1, [1, 2]), partition(2, 2, [2]), partition(3, -1, []),
        partition(4, 3, [3]))
    assert health(full, [1, 2, 3], 2) == health(full, [1, 2, 3], 2).__class__(False, False, False, False)
    assert health(shrunk, live, 2).under_replicated and health(shrunk, live, 2).at_min_isr
    assert not health(shrunk, live, 2).under_min_isr and not health(shrunk, live, 2).unavailable
    assert health(at_one, live, 2).under_min_isr and not health(at_one, live, 2).at_min_isr
    assert health(leaderless, live, 2).unavailable and health(leaderless, live, 2).under_min_isr
    # a leader the ZooKeeper state still names but that is not a live broker is unavailable (TopicCommand)
    assert health(dead_leader, live, 1).unavailable and not health(dead_leader, live, 1).under_min_isr
    everything = [full, shrunk, at_one, leaderless, dead_leader]
    picked = {r: [p.partition for p in select_partitions(everything, r, live, {"t": 2})] for r in REPORTS}
    assert picked == {"under-replicated-partitions": [1, 2, 3, 4], "unavailable-partitions": [3, 4],
                      "under-min-isr-partitions": [2, 3, 4], "at-min-isr-partitions": [1]}
    with pytest.raises(ValueError, match="unknown report"):
        select_partitions(everything, "slow-partitions", live, {})


def test_min_isr_comes_from_the_topic_then_the_brokers_then_kafkas_default():
    assert effective_min_isr({"min.insync.replicas": "3"}, "2") == 3
    assert effective_min_isr({}, "2") == 2
    assert effective_min_isr({}, None) == 1


def text_of(renderable) -> str:
    console = Console(record=True, width=140, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_picture_marks_down_brokers_and_unhealthy_partitions():
    state = ClusterState(2, 7, [BrokerView(1, ["PLAINTEXT://h:1"], 40), BrokerView(2, ["PLAINTEXT://h:2"], 41)],
                         [partition(0, 1, [1, 2, 3]), partition(1, 2, [2, 1]), partition(2, -1, [])], [], [])
    text = text_of(render(state, [1, 2, 3], {"t": 2}, time.time()))
    assert "controller: broker 2, controller epoch 7" in text
    assert re.search(r"3\s+│\s+down", text), text
    assert re.search(r"2\s+│\s+controller", text), text
    assert "under-replicated" in text and "offline" in text
    assert "3 partitions, 1 under-replicated, 1 offline" in text


def test_the_picture_says_when_zookeeper_does_not_answer():
    assert "ZooKeeper: connection refused" in text_of(render(None, [1], {}, time.time(), "connection refused"))


def kafkasim(cluster: RunningCluster, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(cluster.data_dir), *argv],
                          capture_output=True, text=True, timeout=60)


class Terminal:
    """A real pseudo-terminal, as a teacher's terminal is: rich redraws in place only on one."""

    def __init__(self, argv: list[str]) -> None:
        self.master, slave = pty.openpty()
        env = dict(os.environ, COLUMNS="140", LINES="60", TERM="xterm")
        self.process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                        start_new_session=True)
        os.close(slave)
        self.output = ""

    def read(self) -> str:
        while select.select([self.master], [], [], 0.05)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.output += chunk.decode(errors="replace")
        return ANSI.sub("", self.output)

    def last_frame(self) -> str:
        text = self.read()
        start = text.rfind("controller:")
        return text[text.rfind("\n", 0, start) + 1:] if start >= 0 else ""

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        os.close(self.master)


def partition_row(frame: str, p: int) -> list[str] | None:
    for line in frame.splitlines():
        cells = [c.strip() for c in line.split("│") if c.strip()]
        if len(cells) >= 6 and cells[0] == "t" and cells[1] == str(p):
            return cells
    return None


@pytest.mark.processes
@pytest.mark.slow
def test_the_watch_redraws_a_leader_change_and_the_filters_report_it(cluster_factory):
    cluster = cluster_factory(overrides={"min.insync.replicas": "2"})
    assert kafkasim(cluster, "topic", "create", "t", "--partitions", "3", "--replication-factor", "3").returncode == 0
    wait_until(lambda: all(len(p.isr) == 3 for p in cluster.state(["t"]).partitions), 30, "full ISRs")
    victim = cluster.state(["t"]).partition("t", 0).leader
    terminal = Terminal([sys.executable, "-m", "cluster.cli", "--data-dir", str(cluster.data_dir), "status",
                         "--watch", "--interval", "0.2"])
    try:
        wait_until(lambda: (row := partition_row(terminal.last_frame(), 0)) and row[2] == str(victim), 30,
                   f"the watch to show broker {victim} leading t-0")
        polls_before = terminal.read().count("controller:")
        cluster.kill9(victim)

        def moved() -> bool:
            frame = terminal.last_frame()
            row = partition_row(frame, 0)
            return (row is not None and row[2] not in (str(victim), "none") and str(victim) not in row[5].split(",")
                    and "under-replicated" in frame and re.search(rf"{victim}\s+│\s+down", frame) is not None)

        # one process, one ZooKeeper session: the picture changes in place, not by running status again
        wait_until(moved, 30, f"the watch to show t-0 led by another broker without {victim} in its ISR")
        assert terminal.read().count("controller:") > polls_before
        assert terminal.process.poll() is None
        os.killpg(terminal.process.pid, signal.SIGINT)
        assert terminal.process.wait(10) == 0
    finally:
        terminal.close()

    def report(name: str) -> list[int]:
        run = kafkasim(cluster, "topic", "describe", "t", f"--{name}", "--json")
        assert run.returncode == 0, run.stderr
        return [p["partition"] for p in json.loads(run.stdout)["partitions"]]

    assert report("under-replicated-partitions") == [0, 1, 2]
    assert report("at-min-isr-partitions") == [0, 1, 2]
    assert report("under-min-isr-partitions") == []
    assert report("unavailable-partitions") == []
    refused = kafkasim(cluster, "topic", "describe", "--under-replicated-partitions", "--unavailable-partitions")
    assert refused.returncode == 2 and "not allowed with argument" in refused.stderr
