"""Produce latency with and without the log cleaner (issue 21's target: p99 with it under 1.5x the figure without).

``python -m cluster.bench.compaction_latency [--seconds 30] [--interval-ms 2] [--rounds 1]``
``python -m cluster.bench.compaction_latency --alternate 10 --seconds 120`` (see ``run_alternating``)
``--timeline`` (rounds mode): which records make the p99 (sent in a cleaning on the leader, a follower, near a roll).

For each setting (``log.cleaner.enable=false``, then true), a fresh 3-broker cluster (classroom profile: the cleaner
looks for dirty logs every second), one compacted partition (RF 3, 1 MiB segments, min.cleanable.dirty.ratio 0.5),
and one confluent-kafka producer with acks=all and linger.ms=0 sending a 500-byte record over 100 keys every
``--interval-ms`` for ``--seconds``. Latency is send -> delivery callback. The cleanings are counted from the
brokers' logs. Prints p50, p99 and max of each setting and the ratio of the p99s.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import re
import statistics
import time

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from cluster.bench.cluster_run import temporary_cluster
from cluster.bench.measure import percentile

TOPIC = "compaction-latency"
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(1 << 20), "min.cleanable.dirty.ratio": "0.5",
                "min.insync.replicas": "2"}
CLEANED = re.compile(r"cleaned offsets \[")
ON_LOOP = re.compile(r"on the loop: choice and plan ([0-9.]+) ms, swap ([0-9.]+) ms")
# a broker's log line: its time (asctime, local time) and what happened
EVENT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?(cleaned offsets \[.*?([0-9]+) ms in process|"
                   r"rolled new segment)", re.M)


def _create_topic(bootstrap: str, timeout_s: float = 60.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config=TOPIC_CONFIG)])[TOPIC].result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        topic = admin.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
        if topic is not None and topic.error is None and all(
                p.leader >= 0 and len(p.isrs) == 3 for p in topic.partitions.values()) and topic.partitions:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{TOPIC} has no leader with a full ISR after {timeout_s:.0f} s")


def run_once(cleaner: bool, seconds: float, interval_ms: float, value_bytes: int = 500, keys: int = 100) -> dict:
    overrides = {"log.cleaner.enable": "true" if cleaner else "false"}
    load_before = os.getloadavg()[0]
    with temporary_cluster(3, "classroom", overrides=overrides, prefix="kafkasim-compaction-latency-") as (
            spec, layout):
        _create_topic(spec.bootstrap_servers)
        producer = Producer({"bootstrap.servers": spec.bootstrap_servers, "acks": "all", "linger.ms": 0,
                             "enable.idempotence": False})
        latencies: list[float] = []
        sends: list[tuple[float, float]] = []  # (wall-clock time sent, latency ms), for --timeline
        failures = []
        wall_offset = time.time() - time.perf_counter()

        def delivered(sent: float):
            def callback(error, _message) -> None:
                if error is None:
                    latencies.append((time.perf_counter() - sent) * 1000)
                    sends.append((sent + wall_offset, latencies[-1]))
                else:
                    failures.append(error)
            return callback

        value = os.urandom(value_bytes // 2).hex().encode()
        for i in range(20):  # connection and metadata up before the clock
            producer.produce(TOPIC, value, key=f"key-{i % keys}".encode())
        producer.flush(30)
        interval = interval_ms / 1000
        started = time.perf_counter()
        count = int(seconds / interval)
        for i in range(count):
            due = started + i * interval
            while (now := time.perf_counter()) < due:
                producer.poll(due - now)
            producer.produce(TOPIC, value, key=f"key-{i % keys}".encode(), on_delivery=delivered(time.perf_counter()))
            producer.poll(0)
        remaining = producer.flush(60)
        del producer
        broker_cpu, worker_cpu = _cpu_seconds(layout, spec)
        leader = _leader(spec.bootstrap_servers)
        texts = {b.broker_id: layout.broker_log(b.broker_id).read_text(errors="replace") for b in spec.brokers
                 if layout.broker_log(b.broker_id).exists()}
        logs = list(texts.values())
        events = [(broker_id, kind, when) for broker_id, text in texts.items() for kind, when in _events(text)]
        cleanings = sum(len(CLEANED.findall(text)) for text in logs)
        on_loop = [(float(plan), float(swap)) for text in logs for plan, swap in ON_LOOP.findall(text)]
    if remaining or failures:
        raise RuntimeError(f"{remaining} records not delivered, {len(failures)} failed: {failures[:3]}")
    return {"cleaner": cleaner, "records": len(latencies), "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99), "max": max(latencies), "cleanings": cleanings,
            "load": os.getloadavg()[0], "load_before": load_before, "latencies": latencies,
            "plan_max": max((p for p, _ in on_loop), default=0.0),
            "swap_max": max((s for _, s in on_loop), default=0.0), "broker_cpu": broker_cpu, "worker_cpu": worker_cpu,
            "sends": sends, "events": events, "leader": leader}


def _leader(bootstrap: str) -> int:
    topic = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10).topics[TOPIC]
    return topic.partitions[0].leader


def _events(text: str) -> list[tuple[str, tuple[float, float]]]:
    """("clean", (start, end)) of each cleaning (end = its log line, start = end - its duration in the worker, so
    the span covers the work and the swap) and ("roll", (t, t)) of each roll, wall-clock seconds."""
    out = []
    for stamp, what, duration in EVENT.findall(text):
        when = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if what.startswith("cleaned"):
            out.append(("clean", (when - float(duration) / 1000, when)))
        else:
            out.append(("roll", (when, when)))
    return out


def timeline(r: dict, margin_s: float = 0.2) -> str:
    """p99 of the records sent while a cleaning ran (or within margin_s after it) on the leader, on a follower, near
    a roll on any replica, and of the others: which of them makes the p99."""
    spans: dict[str, list[tuple[float, float]]] = {"leader cleaning": [], "follower cleaning": [], "roll": []}
    for broker_id, kind, (start, end) in r["events"]:
        key = "roll" if kind == "roll" else ("leader cleaning" if broker_id == r["leader"] else "follower cleaning")
        spans[key].append((start - (margin_s if kind == "roll" else 0), end + margin_s))
    groups: dict[str, list[float]] = {k: [] for k in (*spans, "none")}
    slow = sorted(r["sends"], key=lambda s: s[1])[-max(1, len(r["sends"]) // 100):]  # the top 1 %
    slow_in: dict[str, int] = {k: 0 for k in groups}
    threshold = slow[0][1] if slow else 0.0
    for sent, latency in r["sends"]:
        hit = [k for k, ss in spans.items() if any(a <= sent <= b for a, b in ss)] or ["none"]
        for k in hit:
            groups[k].append(latency)
            if latency >= threshold:
                slow_in[k] += 1
    return "; ".join(f"{k}: {len(v)} records, p99 {percentile(v, 99):.1f} ms, {slow_in[k]} of the top 1 %"
                     for k, v in groups.items() if v)


def _cpu_seconds(layout, spec) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by the broker processes, and by their cleaner worker processes."""
    brokers = workers = 0.0
    for b in spec.brokers:
        pid = layout.broker_pid(b.broker_id).read()
        if pid is None:
            continue
        with contextlib.suppress(psutil.Error):
            broker = psutil.Process(pid)
            times = broker.cpu_times()
            brokers += times.user + times.system
            for child in broker.children():
                with contextlib.suppress(psutil.Error):
                    if "broker.log.cleaner.worker" in " ".join(child.cmdline()):
                        times = child.cpu_times()
                        workers += times.user + times.system
    return brokers, workers


def run_alternating(seconds: float, interval_ms: float, window_s: float, settle_s: float, value_bytes: int = 500,
                    keys: int = 100) -> dict:
    """One cluster (cleaner on) and one producer; the compacted topic's min.cleanable.dirty.ratio switches between
    1 (no log is ever above it: the cleaner has nothing to do) and 0.5 every ``window_s`` (AlterConfigs), so the
    cleaner works in every other window only. Each record counts for the window it was sent in, the first
    ``settle_s`` of a window left out (the switch reaching the brokers, a cleaning begun before it ending). Both
    kinds of window see the same machine at nearly the same moments; the topic stays compacted throughout (a
    compacted topic's produce checks every record's key, whether the cleaner runs or not)."""
    load_before = os.getloadavg()[0]
    with temporary_cluster(3, "classroom", prefix="kafkasim-compaction-latency-") as (spec, layout):
        _create_topic(spec.bootstrap_servers)
        admin = AdminClient({"bootstrap.servers": spec.bootstrap_servers})
        producer = Producer({"bootstrap.servers": spec.bootstrap_servers, "acks": "all", "linger.ms": 0,
                             "enable.idempotence": False})
        latencies: dict[str, list[float]] = {"cleaning": [], "idle": []}
        failures = []

        def delivered(sent: float, mode: str | None):
            def callback(error, _message) -> None:
                if error is not None:
                    failures.append(error)
                elif mode is not None:
                    latencies[mode].append((time.perf_counter() - sent) * 1000)
            return callback

        def set_mode(mode: str) -> None:
            ratio = "0.5" if mode == "cleaning" else "1"
            admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, TOPIC,
                                                set_config={**TOPIC_CONFIG, "min.cleanable.dirty.ratio": ratio})])

        value = os.urandom(value_bytes // 2).hex().encode()
        for i in range(20):
            producer.produce(TOPIC, value, key=f"key-{i % keys}".encode())
        producer.flush(30)
        interval = interval_ms / 1000
        started = time.perf_counter()
        window = -1
        mode = "idle"
        for i in range(int(seconds / interval)):
            due = started + i * interval
            while (now := time.perf_counter()) < due:
                producer.poll(due - now)
            elapsed = now - started
            if int(elapsed // window_s) != window:
                window = int(elapsed // window_s)
                mode = "cleaning" if window % 2 else "idle"  # the first window settles the cluster
                set_mode(mode)
            counted = mode if elapsed - window * window_s >= settle_s else None
            producer.produce(TOPIC, value, key=f"key-{i % keys}".encode(),
                             on_delivery=delivered(time.perf_counter(), counted))
            producer.poll(0)
        remaining = producer.flush(60)
        del producer
        logs = [layout.broker_log(b.broker_id).read_text(errors="replace") for b in spec.brokers
                if layout.broker_log(b.broker_id).exists()]
        cleanings = sum(len(CLEANED.findall(text)) for text in logs)
    if remaining or failures:
        raise RuntimeError(f"{remaining} records not delivered, {len(failures)} failed: {failures[:3]}")
    return {"latencies": latencies, "cleanings": cleanings, "load_before": load_before, "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval-ms", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=1, help="pairs of runs (cleaner off, on)")
    parser.add_argument("--alternate", type=float, metavar="WINDOW_S", default=0.0,
                        help="one cluster, min.cleanable.dirty.ratio switched between 1 and 0.5 every WINDOW_S")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds left out after each switch")
    parser.add_argument("--timeline", action="store_true",
                        help="which records make the p99: sent during a cleaning on the leader, on a follower, near a "
                             "roll, or none of these")
    args = parser.parse_args()
    if args.alternate:
        for _ in range(args.rounds):
            r = run_alternating(args.seconds, args.interval_ms, args.alternate, args.settle)
            by = {mode: (len(values), percentile(values, 50), percentile(values, 99), max(values))
                  for mode, values in r["latencies"].items()}
            for mode, what in (("idle", "min.cleanable.dirty.ratio 1, nothing to clean"),
                               ("cleaning", "min.cleanable.dirty.ratio 0.5, cleaning")):
                n, p50, p99, top = by[mode]
                print(f"windows with {what}: {n} records, p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {top:.1f} ms",
                      flush=True)
            print(f"{r['cleanings']} cleanings, load average {r['load_before']:.1f} -> {r['load']:.1f}; p99 while "
                  f"the cleaner works / while it has nothing to do: {by['cleaning'][2] / by['idle'][2]:.2f}x "
                  f"(target < 1.5x)", flush=True)
        return
    ratios: list[float] = []
    pooled: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        results = [run_once(cleaner, args.seconds, args.interval_ms) for cleaner in (False, True)]
        for r in results:
            pooled[r["cleaner"]].extend(r["latencies"])
            print(f"cleaner {'on ' if r['cleaner'] else 'off'}: {r['records']} records, p50 {r['p50']:.1f} ms, "
                  f"p99 {r['p99']:.1f} ms, max {r['max']:.1f} ms, {r['cleanings']} cleanings, load average "
                  f"{r['load_before']:.1f} -> {r['load']:.1f}, CPU s: brokers {r['broker_cpu']:.1f}, cleaner workers "
                  f"{r['worker_cpu']:.1f}"
                  + (f"; longest on a broker's loop: choice+plan {r['plan_max']:.1f} ms, swap {r['swap_max']:.1f} ms"
                     if r["cleanings"] else ""),
                  flush=True)
            if args.timeline:
                print(f"  {timeline(r)}", flush=True)
        ratios.append(results[1]["p99"] / results[0]["p99"])
        print(f"p99 with the cleaner / without: {ratios[-1]:.2f}x (target < 1.5x)", flush=True)
    if args.rounds > 1:
        off, on = percentile(pooled[False], 99), percentile(pooled[True], 99)
        print(f"{args.rounds} rounds: median of the ratios {statistics.median(ratios):.2f}x; all records pooled: p99 "
              f"{off:.1f} ms without, {on:.1f} ms with the cleaner, {on / off:.2f}x", flush=True)

if __name__ == "__main__":
    main()
