"""What tracing costs produce throughput:

    python -m cluster.bench_trace [--messages 50000] [--rounds 5]

Two 3-broker clusters (classroom profile) run side by side, one with ``kafkasim.trace.enable=true`` and one
with ``false``; rounds alternate between them so a busy machine hurts both alike. Each round produces
``--messages`` 1 KiB messages with confluent-kafka, acks=all, to a fresh topic with 3 partitions on 3
replicas — the tracing-heavy path: every produce is acknowledged and traced, followers fetch, high
watermarks move. The figures are the median throughput with tracing against the median without, and the
brokers' CPU seconds per 10,000 messages (steadier than throughput on a machine shared with others).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import AbstractContextManager, ExitStack

from confluent_kafka import Producer

from cluster.bench import temporary_cluster
from cluster.bench_client import Bench, ClientBenchSettings, ClientLog, CpuMeter, Deadline
from cluster.processes import ClusterLayout, ClusterSpec

TARGET_OVERHEAD = 0.10
# small produce requests (16 messages at most): the path where a trace event per request weighs most
PRODUCER = {"acks": "all", "linger.ms": 1, "batch.size": 16384, "compression.type": "none"}


def cluster_with(tracing: bool, say) -> AbstractContextManager[tuple[ClusterSpec, ClusterLayout]]:
    return temporary_cluster(3, "classroom", say, overrides={"kafkasim.trace.enable": "true" if tracing else "false"},
                             prefix=f"kafkasim-trace-{'on' if tracing else 'off'}-")


def one_round(bench: Bench, topic: str, messages: int) -> tuple[float, float]:
    """(messages per second, broker CPU seconds per 10,000 messages)"""
    deadline = Deadline(f"produce to {topic}", bench.settings.phase_timeout_s)
    bench.create_topic(topic, deadline, replication_factor=3)
    producer = Producer(bench.config(PRODUCER, "producer"))
    producer.list_topics(topic, timeout=30)
    watch = bench.produce(producer, topic, messages, deadline, "produced")
    return messages / watch.elapsed_s, sum(watch.cpu_s["brokers"].values()) / messages * 10_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.bench_trace", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    settings = ClientBenchSettings(messages=args.messages, partitions=3, phase_timeout_s=300.0)
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    with ExitStack() as stack:
        benches = {}
        for tracing in (True, False):
            say(f"starting a cluster with tracing {'on' if tracing else 'off'} ...")
            spec, layout = stack.enter_context(cluster_with(tracing, lambda _: None))
            benches[tracing] = Bench(spec, settings, CpuMeter(spec, layout), ClientLog(), say)
        for n in range(args.rounds):
            for tracing in (True, False):
                rate, cpu_s = one_round(benches[tracing], f"trace-bench-{n}", args.messages)
                rates[tracing].append(rate)
                cpu[tracing].append(cpu_s)
                say(f"round {n + 1}, tracing {'on ' if tracing else 'off'}: {rate:,.0f} msg/s, "
                    f"brokers {cpu_s:.2f} CPU s per 10k messages")
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    overhead = 1 - on / off
    cpu_on, cpu_off = statistics.median(cpu[True]), statistics.median(cpu[False])
    cpu_overhead = cpu_on / cpu_off - 1
    figures = {"broker_cpu_s_per_10k_on": round(cpu_on, 3), "broker_cpu_s_per_10k_off": round(cpu_off, 3),
               "cpu_overhead": round(cpu_overhead, 4), "messages": args.messages, "rounds": args.rounds,
               "tracing_on_msg_s": round(on),
               "tracing_off_msg_s": round(off), "overhead": round(overhead, 4), "target": TARGET_OVERHEAD,
               "all_on": [round(r) for r in rates[True]], "all_off": [round(r) for r in rates[False]]}
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"produce throughput, 1 KiB, acks=all, RF 3 (median of {args.rounds}): tracing on {on:,.0f} msg/s, "
              f"off {off:,.0f} msg/s")
        print(f"brokers' CPU per 10,000 messages: tracing on {cpu_on:.2f} s, off {cpu_off:.2f} s "
              f"(+{cpu_overhead:.1%})")
        print(f"trace overhead on produce throughput: {overhead:.1%} (target: under {TARGET_OVERHEAD:.0%}) "
              f"{'OK' if overhead < TARGET_OVERHEAD else 'MISSED'}")
    return 0 if overhead < TARGET_OVERHEAD else 1


if __name__ == "__main__":
    sys.exit(main())
