"""``kafkasim bench dashboard``: how fast the dashboard shows a leader change, and what it costs.

A temporary 3-broker cluster (classroom profile) with a topic of ``--partitions`` partitions on 3 replicas, and
``kafkasim dashboard`` as a process of its own with one server-sent-events client reading its stream. (a) Each
repetition kills a partition's leader (kill -9, the CLI's own function), reads the new leader's state znode mtime
(when ZooKeeper took the controller's write; ZooKeeper runs on this machine, so its clock is ours) and takes the
time the stream first carries that leader: the figure is the median delay. The killed broker is started again
and the cluster settles before the next repetition. (b) With the cluster idle and the client connected, the
dashboard process's CPU over ``--cpu-seconds`` as a share of one core."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from cluster.bench.options import positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report

TARGET_DELAY_S = 1.0
TARGET_CPU_FRACTION = 0.05
TOPIC = "dashboard-bench"


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--partitions", type=positive_int, default=100, help="partitions of the topic (default 100)")
    parser.add_argument("--repetitions", type=positive_int, default=5, help="leader kills timed (default 5)")
    parser.add_argument("--cpu-seconds", type=positive_int, default=30,
                        help="how long the dashboard's CPU is measured (default 30)")


class StreamReader:
    """One SSE client on its own thread: keeps, per partition, when each leader was first seen."""

    def __init__(self, url: str) -> None:
        self.first_seen: dict[tuple[str, int, int], float] = {}   # (partition, leader, leader epoch) -> when
        self.updates = 0
        self._lock = threading.Lock()
        self._response = urllib.request.urlopen(url, timeout=30)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for raw in self._response:
                line = raw.decode()
                if not line.startswith("data: "):
                    continue
                now = time.time()
                state = json.loads(line[6:])
                with self._lock:
                    self.updates += 1
                    for p in state["partitions"]:
                        self.first_seen.setdefault((p["name"], p["leader"], p["leader_epoch"]), now)
        except Exception:
            pass

    def seen(self, name: str, leader: int, leader_epoch: int) -> float | None:
        with self._lock:
            return self.first_seen.get((name, leader, leader_epoch))

    def close(self) -> None:
        self._response.close()


def _dashboard(data_dir: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cluster.cli", "--data-dir", str(data_dir), "dashboard",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def run(args: argparse.Namespace, progress: Progress) -> Report:
    import asyncio

    from cluster import commands
    from cluster.bench.cluster_run import cluster_state, create_topic_in_zookeeper, poll_until, temporary_cluster
    from cluster.bench.process_facts import process_cpu_s
    from cluster.lifecycle import start_broker
    from zk.client import connected
    from zk.server import free_port
    from zk.znodes import TopicPartitionStateZNode

    async def state_mtime_s(connect: str, topic: str, partition: int) -> float:
        async with connected(connect) as zk:
            _, stat = await zk.get(TopicPartitionStateZNode.path(topic, partition))
            return stat.mtime / 1000

    delays: list[float] = []
    notes: list[str] = []
    progress.say("starting a 3-broker cluster ...")
    with temporary_cluster(say=lambda _: None, prefix="kafkasim-bench-dashboard-") as (spec, layout):
        data_dir = layout.data_dir
        create_topic_in_zookeeper(spec.zookeeper, TOPIC, args.partitions, 3)
        poll_until(lambda: all(p.leader >= 0 and len(p.isr) == 3 for p in cluster_state(spec.zookeeper, [TOPIC])
                               .partitions), 60, "every partition to have a leader and a full ISR")
        port = free_port()
        process = _dashboard(data_dir, port)
        url = f"http://127.0.0.1:{port}/"
        try:
            def answers() -> bool:
                try:
                    with urllib.request.urlopen(url + "api/state", timeout=2):
                        return True
                except OSError:
                    return False

            poll_until(answers, 30, "the dashboard to answer", 0.1)
            reader = StreamReader(url + "api/events")
            started = time.perf_counter()
            for n in range(args.repetitions):
                partition = n % args.partitions
                name = f"{TOPIC}-{partition}"
                before = cluster_state(spec.zookeeper, [TOPIC]).partition(TOPIC, partition)
                killed = before.leader
                with contextlib.redirect_stdout(io.StringIO()):   # the report may be JSON on stdout
                    asyncio.run(commands.kill(data_dir, spec, killed, False, None, signal.SIGKILL))

                def new_leader(partition: int = partition, killed: int = killed, epoch: int = before.leader_epoch):
                    view = cluster_state(spec.zookeeper, [TOPIC]).partition(TOPIC, partition)
                    return view if view.leader_epoch > epoch and view.leader not in (killed,) else None

                after = poll_until(new_leader, 30, f"a new leader of {name}", 0.05)
                written = asyncio.run(state_mtime_s(spec.zookeeper, TOPIC, partition))
                shown = poll_until(lambda a=after, nm=name: reader.seen(nm, a.leader, a.leader_epoch), 10,
                                   f"the stream to carry leader {after.leader} of {name}", 0.01)
                delays.append(shown - written)
                progress.say(f"repetition {n + 1}: broker {killed} killed, leader {after.leader} of {name} "
                             f"shown {1000 * delays[-1]:.0f} ms after ZooKeeper took it")
                start_broker(data_dir, killed, wait=True, say=lambda _: None)
                poll_until(lambda: all(len(p.isr) == 3 for p in cluster_state(spec.zookeeper, [TOPIC]).partitions),
                           60, "every ISR to be full again", 0.2)
            kills_elapsed = time.perf_counter() - started
            progress.say(f"measuring the dashboard's CPU for {args.cpu_seconds} s ...")
            cpu_before, wall_before = process_cpu_s(process.pid), time.monotonic()
            updates_before = reader.updates
            time.sleep(args.cpu_seconds)
            cpu_s, wall_s = process_cpu_s(process.pid) - cpu_before, time.monotonic() - wall_before
            updates = reader.updates - updates_before
            reader.close()
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
    fraction = cpu_s / wall_s
    figures_delay = [
        Figure("leader_change_to_page_s", f"leader change in ZooKeeper → on the page (median of {len(delays)})",
               statistics.median(delays), "s", TARGET_DELAY_S, at_least=False),
        Figure("leader_change_to_page_max_s", "leader change in ZooKeeper → on the page (max)", max(delays), "s"),
    ]
    figures_cpu = [
        Figure("cpu_fraction", f"dashboard CPU, 3 brokers, {args.partitions} partitions, one page",
               fraction, "of a core", TARGET_CPU_FRACTION, at_least=False),
        Figure("updates_per_s", "updates the page received per second", updates / wall_s, "/s"),
    ]
    notes.append("the delay is measured from the state znode's mtime (ZooKeeper's clock, on this machine) to the "
                 "time the SSE client parsed the first update carrying the new leader")
    return Report("dashboard", f"kafkasim dashboard benchmark: 3 brokers, {args.partitions} partitions RF 3",
                  {"partitions": args.partitions, "repetitions": args.repetitions, "cpu_seconds": args.cpu_seconds},
                  [Phase("leader changes", f"{len(delays)} leader kills: "
                         + ", ".join(f"{1000 * d:.0f} ms" for d in delays), kills_elapsed, figures_delay,
                         {"delays_s": [round(d, 3) for d in delays]}),
                   Phase("idle cost", f"{cpu_s:.2f} CPU s over {wall_s:.1f} s with one page connected", wall_s,
                         figures_cpu, {"cpu_s": round(cpu_s, 3), "updates": updates})],
                  notes)


BENCH = Bench("dashboard", "the dashboard: leader change in ZooKeeper to the page, and its CPU with 3 brokers and "
              "100 partitions", options, run)
