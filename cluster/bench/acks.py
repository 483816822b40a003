"""Phase (b) of ``kafkasim bench replication``: produce throughput with acks=all against acks=1.

Runs come in pairs, one per acks setting, each into a fresh topic, alternating which goes first so that
neither always meets the machine as the other left it. Figures are medians; the ratio is the median of the
pairs' ratios. acks=1 is also timed until every replica holds its messages, because on a machine whose cores
the brokers share, its followers finish replicating after the last acknowledgement.

Each round runs two pairs: one as the machine is, then one with memory pre-faulted before each run. Every byte a run
produces lands in three page caches, and on a virtual machine whose hypervisor takes freed memory back (free
page reporting), each page the kernel hands out again costs a fault on the host: ten times the cost of the
copy itself, measured here. acks=all pays for all three copies inside its window; acks=1 pays for the
followers' copies partly after it. Touching and freeing enough memory just before a run lets both settings
start from pages the host has backed, as on a machine without a balloon. ``kafkasim bench page-cache``
measures the effect on its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, Producer

from cluster.bench.client_kit import THROUGHPUT_PRODUCER, Deadline, PhaseError, Stopwatch
from cluster.bench.measure import throughput_mib_s
from cluster.bench.page_cache import prefault_memory, prefault_size_mib
from cluster.bench.process_facts import available_memory_bytes
from cluster.bench.report import Figure, Phase

if TYPE_CHECKING:
    from cluster.bench.replication_run import ReplicationRun

THROUGHPUT_RATIO_TARGET = 0.8


@dataclass(frozen=True)
class ThroughputRun:
    acks: str
    produced_s: float     # first message to last acknowledgement
    replicated_s: float   # first message until every replica held every message
    prefault_s: float     # touching memory before the run (0 when not pre-faulted)
    cpu_s: dict


def _produce_timed(run: ReplicationRun, topic: str, acks: str, deadline: Deadline) -> Stopwatch:
    bench = run.bench
    producer = Producer(bench.config({**THROUGHPUT_PRODUCER, "acks": acks}, f"producer-acks-{acks}"))
    try:
        producer.list_topics(topic, timeout=max(0.1, deadline.remaining()))  # connected before the clock
    except KafkaException as exc:
        raise PhaseError(f"the producer got no metadata for {topic}: {exc.args[0]}") from None
    return bench.produce(producer, topic, run.settings.messages, deadline, f"acks={acks}")


def throughput_run(run: ReplicationRun, topic: str, acks: str, deadline: Deadline,
                   prefault_mib: int) -> ThroughputRun:
    run.create_topic(topic, deadline)
    # Right before the clock: the host takes freed memory back after a few seconds.
    prefault_s = prefault_memory(prefault_mib) if prefault_mib else 0.0
    watch = _produce_timed(run, topic, acks, deadline)
    # acks=1 leaves the followers replicating after its last acknowledgement: the time until they are done
    # is reported too, and no run starts while another's backlog still takes CPU.
    run.wait_replicas_in_step(topic, deadline)
    return ThroughputRun(acks, watch.elapsed_s, time.perf_counter() - watch.started, prefault_s, watch.cpu_s)


Pair = dict[str, ThroughputRun]


def run_pairs(run: ReplicationRun, rounds: int, deadline: Deadline,
              prefault_mib: int) -> tuple[list[Pair], list[Pair]]:
    """Each round a pair as the machine is, then a pre-faulted pair: a machine that slows down over the runs
    (more topics, more memory in the page cache) weighs on both conditions alike."""
    fresh: list[Pair] = []
    backed: list[Pair] = []
    for n in range(rounds):
        order = ("1", "all") if n % 2 == 0 else ("all", "1")
        for name, pairs, mib in (("fresh", fresh, 0), ("backed", backed, prefault_mib)):
            pairs.append({acks: throughput_run(run, f"bench-{name}-acks-{acks}-{n}", acks, deadline, mib)
                          for acks in order})
    return fresh, backed


@dataclass(frozen=True)
class PairFigures:
    """Medians over pairs of runs of ``volume`` bytes each."""

    pairs: list[Pair]
    volume: int

    def _rate(self, pair: Pair, acks: str, replicated: bool = False) -> float:
        return throughput_mib_s(self.volume, pair[acks].replicated_s if replicated else pair[acks].produced_s)

    def rate(self, acks: str) -> float:
        return median(self._rate(p, acks) for p in self.pairs)

    def replicated_rate(self) -> float:
        return median(self._rate(p, "1", replicated=True) for p in self.pairs)

    def ratio(self, replicated: bool = False) -> float:
        return median(self._rate(p, "all") / self._rate(p, "1", replicated) for p in self.pairs)

    def runs(self, condition: str) -> list[dict]:
        return [{"condition": condition, "pair": n, "acks": r.acks, "produced_s": round(r.produced_s, 3),
                 "replicated_s": round(r.replicated_s, 3), "prefault_s": round(r.prefault_s, 3), "cpu_s": r.cpu_s}
                for n, pair in enumerate(self.pairs) for r in pair.values()]

    def summary(self) -> str:
        return "; ".join(f"pair {n}: " + ", ".join(f"acks={r.acks} {r.produced_s:.2f} s (replicated "
                                                   f"{r.replicated_s:.2f} s)" for r in pair.values())
                         for n, pair in enumerate(self.pairs))


def throughput_phase(run: ReplicationRun) -> Phase:
    settings = run.settings
    rounds = settings.throughput_rounds
    deadline = Deadline("throughput", 2 * settings.phase_timeout_s * rounds)
    volume = settings.messages * settings.message_bytes
    prefault_mib = prefault_size_mib(volume, settings.replication_factor, available_memory_bytes())
    phase = Stopwatch(run.bench.meter)
    fresh_pairs, backed_pairs = run_pairs(run, rounds, deadline, prefault_mib)
    as_is, backed = PairFigures(fresh_pairs, volume), PairFigures(backed_pairs, volume)
    phase.stop()

    median_of = f"median of {rounds}"
    fresh = "memory as the machine gives it"
    figures = [
        Figure("acks_1_throughput", f"(b) produce, 1 KiB msgs, RF3, acks=1, {median_of}", backed.rate("1"), "MiB/s"),
        Figure("acks_all_throughput", f"(b) produce, 1 KiB msgs, RF3, acks=all, {median_of}", backed.rate("all"),
               "MiB/s"),
        Figure("acks_all_to_acks_1", "(b) acks=all throughput / acks=1 throughput", backed.ratio(), "x",
               THROUGHPUT_RATIO_TARGET),
        Figure("acks_1_throughput_fresh_memory", f"(b) acks=1, {fresh}, {median_of}", as_is.rate("1"), "MiB/s"),
        Figure("acks_all_throughput_fresh_memory", f"(b) acks=all, {fresh}, {median_of}", as_is.rate("all"),
               "MiB/s"),
        Figure("acks_all_to_acks_1_fresh_memory", f"(b) acks=all / acks=1, {fresh}", as_is.ratio(), "x"),
        Figure("acks_all_to_acks_1_replicated_fresh_memory",
               f"(b) acks=all / acks=1 until every replica had it, {fresh}", as_is.ratio(replicated=True), "x"),
    ]
    touched = [r.prefault_s for pair in backed.pairs for r in pair.values()]
    summary = (f"{settings.messages:,} x {settings.message_bytes} B per run. With {prefault_mib:,} MiB pre-faulted "
               f"before each run (in {median(touched):.2f} s, median): {backed.summary()}. With {fresh}: "
               f"{as_is.summary()}")
    details = {"messages": settings.messages, "rounds": rounds, "prefault_mib": prefault_mib,
               "prefault_mib_s": round(prefault_mib / median(touched), 1) if prefault_mib else None,
               "acks_1_replicated_throughput_fresh_memory": round(as_is.replicated_rate(), 1),
               "runs": as_is.runs("fresh") + backed.runs("backed"), "producer": THROUGHPUT_PRODUCER}
    return Phase("produce", summary, phase.elapsed_s, figures, details, phase.cpu_s)
