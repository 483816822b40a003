"""``kafkasim bench trace``: what tracing costs produce throughput.

Two 3-broker clusters (classroom profile) run side by side, one with ``kafkasim.trace.enable=true`` and one
with ``false``; rounds alternate between them so a busy machine hurts both alike. Each round produces
``--messages`` 1 KiB messages with confluent-kafka, acks=all, to a fresh topic with 3 partitions on 3
replicas — the tracing-heavy path: every produce is acknowledged and traced, followers fetch, high
watermarks move. The figures are the median throughput with tracing against the median without, and the
brokers' CPU seconds per 10,000 messages (steadier than throughput on a machine shared with others).
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack

from cluster.bench.options import positive_int
from cluster.bench.progress import Progress
from cluster.bench.registry import Bench
from cluster.bench.report import Figure, Phase, Report

TARGET_OVERHEAD = 0.10
PHASE_TIMEOUT_S = 300.0


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=positive_int, default=50_000,
                        help="1 KiB messages produced in each round (default 50000)")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="rounds on each cluster, alternating (default 5)")


def run(args: argparse.Namespace, progress: Progress) -> Report:
    from cluster.bench.client import ClientBenchSettings
    from cluster.bench.client_kit import ClientBench, ClientLog
    from cluster.bench.process_facts import CpuMeter
    from cluster.bench.trace_rounds import PRODUCER, cluster_with, one_round

    settings = ClientBenchSettings(messages=args.messages, partitions=3, phase_timeout_s=PHASE_TIMEOUT_S)
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    with ExitStack() as stack:
        benches = {}
        for tracing in (True, False):
            progress.say(f"starting a cluster with tracing {'on' if tracing else 'off'} ...")
            spec, layout = stack.enter_context(cluster_with(tracing))
            benches[tracing] = ClientBench(spec, settings, CpuMeter(spec, layout), ClientLog(), progress)
        started = time.perf_counter()
        for n in range(args.rounds):
            for tracing in (True, False):
                rate, cpu_s = one_round(benches[tracing], f"trace-bench-{n}", args.messages)
                rates[tracing].append(rate)
                cpu[tracing].append(cpu_s)
                progress.say(f"round {n + 1}, tracing {'on ' if tracing else 'off'}: {rate:,.0f} msg/s, "
                             f"brokers {cpu_s:.2f} CPU s per 10k messages")
        elapsed = time.perf_counter() - started
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    cpu_on, cpu_off = statistics.median(cpu[True]), statistics.median(cpu[False])
    median_of = f"median of {args.rounds}"
    figures = [
        Figure("tracing_on_msg_s", f"produce, 1 KiB, acks=all, RF3, tracing on ({median_of})", on, "msg/s"),
        Figure("tracing_off_msg_s", f"produce, 1 KiB, acks=all, RF3, tracing off ({median_of})", off, "msg/s"),
        Figure("overhead", "trace overhead on produce throughput (1 - on / off)", 1 - on / off, "fraction",
               TARGET_OVERHEAD, at_least=False),
        Figure("broker_cpu_s_per_10k_on", "brokers' CPU per 10,000 messages, tracing on", cpu_on, "s"),
        Figure("broker_cpu_s_per_10k_off", "brokers' CPU per 10,000 messages, tracing off", cpu_off, "s"),
        Figure("cpu_overhead", "brokers' extra CPU with tracing (on / off - 1)", cpu_on / cpu_off - 1, "fraction"),
    ]
    summary = (f"{args.rounds} rounds of {args.messages:,} messages on each cluster: on "
               f"{', '.join(f'{r:,.0f}' for r in rates[True])} msg/s; off "
               f"{', '.join(f'{r:,.0f}' for r in rates[False])} msg/s")
    details = {"all_on": [round(r) for r in rates[True]], "all_off": [round(r) for r in rates[False]],
               "cpu_s_per_10k_on": [round(c, 3) for c in cpu[True]],
               "cpu_s_per_10k_off": [round(c, 3) for c in cpu[False]], "producer": PRODUCER}
    return Report("trace", "kafkasim trace benchmark: two 3-broker clusters (classroom profile), tracing on and off",
                  {"messages": args.messages, "rounds": args.rounds, "phase_timeout_s": PHASE_TIMEOUT_S},
                  [Phase("produce", summary, elapsed, figures, details)])


BENCH = Bench("trace", "what tracing costs produce throughput: two 3-broker clusters, tracing on and off, "
              "alternating rounds", options, run)
