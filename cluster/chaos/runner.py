"""`kafkasim chaos run`: start a cluster, run the recorded workload, apply the seed's nemesis schedule, heal,
let the cluster settle, read every replica's log, check, and write the run's folder:

    results.json      the verdict, counts per anomaly, examples with their operations, availability
    history.jsonl     every client operation, invoke and completion
    nemesis.jsonl     every fault start and stop, on the same clocks
    schedule.json     the steps the seed gave (same seed, same steps)
    final-reads.json  every replica's records after settling (and final-logs/, the same as `traces collect`)
    cluster/          the cluster's data, traces and logs (for `kafkasim traces collect` and `analyze`)
    *.png             acknowledged throughput and latency over time with faults shaded, offsets per partition
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException

from cluster.admin import read_cluster_state
from cluster.chaos.checker import CheckResult, check
from cluster.chaos.history import (
    FINAL_READS_FILE,
    NEMESIS_FILE,
    OPERATIONS_FILE,
    FinalReads,
    JsonLinesWriter,
    Recorder,
    read_nemesis,
    read_operations,
)
from cluster.chaos.nemesis import Nemesis, NemesisError, unsupported_kinds
from cluster.chaos.schedule import NemesisStep, ScheduleSettings, nemesis_schedule
from cluster.chaos.txn_workload import TxnWorkload, TxnWorkloadSettings
from cluster.chaos.workload import (
    CLIENT_LOGGER,
    CLOSE_TIMEOUT_S,
    DEFAULT_COMPACTED_TOPICS,
    Workload,
    WorkloadSettings,
)
from cluster.final_logs import broker_records, log_end_offset
from cluster.disk import recorded_mounts, unmount_log_dirs
from cluster.lifecycle import down, up
from cluster.processes import ClusterError, ClusterLayout
from traces.history import FINAL_LOGS_DIR
from zk.admin import create_topic
from zk.client import connected

RESULTS_FILE = "results.json"
SCHEDULE_FILE = "schedule.json"
CLIENT_LOG_FILE = "clients.log"   # the producers' idempotence log (librdkafka's "eos" debug lines)
EXIT_VALID, EXIT_INVALID, EXIT_ERROR = 0, 1, 2
EXIT_KAFKA_KNOWN = 3   # only anomalies Apache Kafka 2.8 itself has under the same faults (checker.KAFKA_KNOWN)


@dataclass
class ChaosSettings:
    seed: int
    duration_s: float = 60.0
    nemesis: tuple[str, ...] = ("kill", "pause", "controller", "bounce", "zk-down")
    brokers: int = 3
    overrides: dict[str, str] = field(default_factory=lambda: {
        "min.insync.replicas": "2", "unclean.leader.election.enable": "false"})
    # WorkloadSettings: the queue workload (producers, readers, group members); TxnWorkloadSettings: the txn one
    workload: WorkloadSettings | TxnWorkloadSettings = field(
        default_factory=lambda: WorkloadSettings(compacted=DEFAULT_COMPACTED_TOPICS))
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    settle_s: float = 90.0
    profile: str = "classroom"
    netns: bool = False       # brokers in network namespaces (root): partition, zk-isolate and slow need it
    subnet: str | None = None  # the namespaces' subnet (None: the default); implies netns
    log_dir_size_mib: int | None = None   # tmpfs log directories (root): disk-full needs them


@dataclass
class ChaosRun:
    out: Path
    result: CheckResult
    steps: list[NemesisStep]
    ops_per_s: float
    heal_to_settled_s: float | None

    @property
    def exit_code(self) -> int:
        if self.result.verdict == "kafka-known":
            return EXIT_KAFKA_KNOWN
        return EXIT_VALID if self.result.valid else EXIT_INVALID


# A fault script instead of the seed's schedule (the replication matrix): it runs while the workload does and
# returns when its faults are over; it records its own nemesis events.
FaultScript = Callable[["Nemesis", Recorder], None]


def run_chaos(settings: ChaosSettings, out: Path, say: Callable[[str], None] = print,
              script: FaultScript | None = None) -> ChaosRun:
    """One seeded run in ``out`` (created; must not hold an earlier run). Raises ClusterError on trouble of its
    own (the cluster would not start, a fault could not be applied); anomalies are in the result instead."""
    if (out / RESULTS_FILE).exists() or (out / OPERATIONS_FILE).exists():
        raise ClusterError(f"{out} already holds a chaos run: choose another --out")
    steps = [] if script is not None else nemesis_schedule(
        settings.seed, settings.duration_s, settings.nemesis, range(1, settings.brokers + 1), settings.schedule)
    out.mkdir(parents=True, exist_ok=True)
    (out / SCHEDULE_FILE).write_text(json.dumps([s.model_dump() for s in steps], indent=1) + "\n")
    data_dir = out / "cluster"
    if script is None:
        say(f"chaos run seed {settings.seed}: {len(steps) - 1} faults over {settings.duration_s:.0f} s, "
            f"data in {out}")
    spec = up(data_dir, brokers=settings.brokers, profile=settings.profile, base_port=0,
              overrides=settings.overrides, say=lambda _: None, netns=settings.netns, subnet=settings.subnet,
              log_dir_size_mib=settings.log_dir_size_mib)
    try:
        reasons = unsupported_kinds(settings.nemesis, spec)
        if reasons:
            raise NemesisError("; ".join(reasons))
        _create_topics(spec.zookeeper, settings)
        with (JsonLinesWriter(out / OPERATIONS_FILE) as operations, JsonLinesWriter(out / NEMESIS_FILE) as faults,
              _client_log(out / CLIENT_LOG_FILE)):
            recorder = Recorder(operations.append, faults.append, lambda: time.time() * 1000, time.monotonic_ns)
            workload = (TxnWorkload(spec.bootstrap_servers, settings.workload, recorder)
                        if isinstance(settings.workload, TxnWorkloadSettings)
                        else Workload(spec.bootstrap_servers, settings.workload, recorder))
            workload.start()
            started = time.monotonic()
            nemesis = Nemesis(data_dir, say=lambda _: None)
            settle = _Settle(spec.zookeeper, data_dir, settings)
            try:
                if script is None:
                    _play(steps, nemesis, recorder, started, say, settle)
                else:
                    _wait_for_acks(workload, 100, 30)
                    script(nemesis, recorder)
                    settle.healed_at = time.monotonic()
                    nemesis.heal()
                    _sleep_until(started + settings.duration_s)
            except BaseException:
                # the clients write to the history files this block closes: they stop first
                workload.stop_producers(timeout_s=5)
                if isinstance(workload, TxnWorkload):
                    workload.stop_transformers()   # no drain: the run failed
                else:
                    workload.stop_readers()
                raise
            unknown = workload.stop_producers(timeout_s=30)
            sending_s = time.monotonic() - started
            settled_s = settle.wait(time.monotonic() + settings.settle_s)
            workload.stop_readers()
            say(f"workload stopped: {workload.counters.sent} sent, {workload.counters.acknowledged} acknowledged, "
                f"{unknown} still unknown; cluster settled "
                + (f"{settled_s:.1f} s after the heal" if settled_s is not None else "NOT within the settle time"))
            if isinstance(workload, TxnWorkload):
                say(f"transformers stopped{'' if workload.drained else ' WITHOUT having caught up with the input'}: "
                    f"{workload.outcomes()}")
            if workload.counters.unclosed:
                say(f"warning: {', '.join(workload.counters.unclosed)} still closing after "
                    f"{CLOSE_TIMEOUT_S:.0f} s (a librdkafka destroy that does not end), left behind")
        read_back = _read_back(workload) if isinstance(workload, TxnWorkload) else {}
        if isinstance(workload, TxnWorkload) and not workload.stable:
            say("warning: a transaction on the output stayed open (its last stable offset below its high watermark); "
                "the read_committed read ends there")
        leaders = _leaders(spec.zookeeper, settings.workload.topics)
    except BaseException:
        _take_down_after_failure(data_dir, spec)
        raise
    try:
        # tmpfs log directories stay mounted until their records are read: unmounted, they are gone
        down(data_dir, say=lambda _: None, timeout_s=30, unmount=False)
    except BaseException:
        unmount_log_dirs(recorded_mounts(spec), lambda _: None)
        raise
    try:
        read_ts_ms = time.time() * 1000   # the brokers are down: no cleaning after this
        stored = [record for broker in spec.brokers
                  for record in broker_records(broker.broker_id,
                                               [ClusterLayout(data_dir).broker_dir(broker.broker_id) / "logs"])
                  if record.topic in settings.workload.topics]
    finally:
        unmount_log_dirs(recorded_mounts(spec), lambda _: None)
    # the same records as `traces collect` dumps them, so `kafkasim analyze` finds the missing writes here too
    (out / FINAL_LOGS_DIR).mkdir(exist_ok=True)
    for broker in spec.brokers:
        (out / FINAL_LOGS_DIR / f"broker-{broker.broker_id}.jsonl").write_text("".join(
            record.model_dump_json() + "\n" for record in stored if record.broker == broker.broker_id))
    final = FinalReads.from_stored_records(stored, leaders, read_ts_ms).model_copy(update=read_back)
    (out / FINAL_READS_FILE).write_text(final.model_dump_json() + "\n")
    result = check(read_operations(out / OPERATIONS_FILE), final, read_nemesis(out / NEMESIS_FILE),
                   compacted=compacted_topics(settings.workload))
    return finish_run(out, result, steps, workload.counters.acknowledged / sending_s, settled_s, {
        "seed": settings.seed, "duration_s": settings.duration_s, "nemesis": list(settings.nemesis),
        "workload": "txn" if isinstance(settings.workload, TxnWorkloadSettings) else "queue",
        "settings": {"overrides": settings.overrides, "workload": asdict(settings.workload)}})


def _read_back(workload: TxnWorkload) -> dict:
    """The txn workload's output through consumers (read_committed and read_uncommitted) and its group's offsets,
    while the cluster still runs; FinalReads' fields."""
    try:
        isolated, offsets = workload.read_back()
    except KafkaException as exc:
        raise ClusterError(f"could not read the txn workload's output back after healing: {exc}") from None
    return {"isolated": isolated, "group_offsets": offsets}


def finish_run(out: Path, result: CheckResult, steps: list[NemesisStep], ops_per_s: float,
               settled_s: float | None, facts: dict) -> ChaosRun:
    """results.json (the run's ``facts``, its figures and the check) and the plots."""
    (out / RESULTS_FILE).write_text(json.dumps({
        **facts, "ops_per_s": round(ops_per_s, 1),
        "heal_to_settled_s": None if settled_s is None else round(settled_s, 2),
        **result.model_dump()}, indent=1) + "\n")
    write_plots_if_possible(out)
    return ChaosRun(out, result, steps, ops_per_s, settled_s)


def write_plots_if_possible(out: Path) -> None:
    """The plots need matplotlib, which the broker's image leaves out: there a run ends without them."""
    try:
        from cluster.chaos.plots import write_plots
    except ImportError:
        return
    write_plots(out)


def _take_down_after_failure(data_dir: Path, spec) -> None:
    """A run that failed or was interrupted (Ctrl-C, SIGTERM) reads nothing: its cluster, namespaces and mounts go.
    Trouble doing so is told, not raised: raised, it would replace the interrupt, and a campaign would go on
    to its next run instead of stopping."""
    try:
        down(data_dir, say=lambda _: None, timeout_s=30)
    except Exception as exc:
        print(f"warning: the run's cluster in {data_dir} was not entirely taken down ({exc}); "
              f"'kafkasim net clean --data-dir {data_dir}' removes what is left", file=sys.stderr)
        try:
            unmount_log_dirs(recorded_mounts(spec), lambda _: None)
        except ClusterError as unmount_error:
            print(f"warning: {unmount_error}", file=sys.stderr)


@contextmanager
def _client_log(path: Path) -> Iterator[None]:
    """The workload's librdkafka log lines in ``path`` for the length of the block."""
    logger = logging.getLogger(CLIENT_LOGGER)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    previous = logger.level, logger.propagate
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous[0])
        logger.propagate = previous[1]
        handler.close()


def compacted_topics(workload: WorkloadSettings | TxnWorkloadSettings) -> dict[str, int]:
    """The workload's compacted topics and their delete.retention.ms, as the checker takes them."""
    if not isinstance(workload, WorkloadSettings):
        return {}
    return {topic: workload.delete_retention_ms for topic in workload.compacted_topics}


def _create_topics(zookeeper: str, settings: ChaosSettings) -> None:
    workload = settings.workload

    async def create() -> None:
        async with connected(zookeeper) as zk:
            for topic in workload.topics:
                await create_topic(zk, topic, workload.partitions, min(3, settings.brokers),
                                   workload.topic_config(topic) if isinstance(workload, WorkloadSettings) else None)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                state = await read_cluster_state(zk, list(settings.workload.topics))
                if (len(state.partitions) == len(settings.workload.topics) * settings.workload.partitions
                        and all(p.leader >= 0 for p in state.partitions)):
                    return
                await asyncio.sleep(0.1)
            raise ClusterError("the chaos topics got no leaders within 30 s")
    asyncio.run(create())


def _play(steps: list[NemesisStep], nemesis: Nemesis, recorder: Recorder, started: float,
          say: Callable[[str], None], settle: _Settle) -> None:
    """Each step starts at its time and ends at its heal time, measured from ``started``. Between the last
    fault's end and the final heal the workload runs on a whole cluster, and the settle time is measured."""
    for step in steps:
        if step.kind == "heal":
            settle.wait(started + step.at_s)
            _sleep_until(started + step.at_s)
            recorder.nemesis("start", "heal", step.targets, step.detail, step.step)
            nemesis.heal()
            recorder.nemesis("stop", "heal", step.targets, step.detail, step.step)
            continue
        _sleep_until(started + step.at_s)
        say(f"  {step.at_s:6.1f} s  {step.kind} {list(step.targets) or ''} for {step.hold_s:.1f} s")
        victims = nemesis.victims(step)
        # recorded before it is applied, so the fault precedes its effects in the history (as in the traces)
        recorder.nemesis("start", step.kind, victims, step.detail, step.step)
        nemesis.start(step, victims)
        _sleep_until(started + step.heal_at_s)
        nemesis.stop(step)
        recorder.nemesis("stop", step.kind, victims, step.detail, step.step)
        settle.healed_at = time.monotonic()


def _wait_for_acks(workload: Workload | TxnWorkload, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while workload.counters.acknowledged < count and time.monotonic() < deadline:
        time.sleep(0.05)


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


class _Settle:
    """Seconds from the end of the last fault until every partition has a leader, its whole replica set in the
    ISR and every replica's log at the same length: the same size, or for a compacted topic, whose replicas each
    clean their own segments when they like, the same log end offset."""

    def __init__(self, zookeeper: str, data_dir: Path, settings: ChaosSettings) -> None:
        self.zookeeper = zookeeper
        self.layout = ClusterLayout(data_dir)
        self.topics = list(settings.workload.topics)
        self.compacted = set(compacted_topics(settings.workload))
        self.healed_at = time.monotonic()
        self.settled_s: float | None = None

    async def _settled(self) -> bool:
        async with connected(self.zookeeper, connection_timeout_ms=5000) as zk:
            state = await read_cluster_state(zk, self.topics)
        if not state.partitions or any(p.leader < 0 or sorted(p.isr) != sorted(p.replicas) for p in state.partitions):
            return False
        return all(len({self._length(p.topic, self.layout.broker_dir(b) / "logs" / f"{p.topic}-{p.partition}")
                        for b in p.replicas}) == 1 for p in state.partitions)

    def _length(self, topic: str, directory: Path) -> int:
        return log_end_offset(directory) if topic in self.compacted else _log_bytes(directory)

    def wait(self, deadline: float) -> float | None:
        """Polls until settled or ``deadline`` (monotonic); the settle time once known, else None."""
        while self.settled_s is None and time.monotonic() < deadline:
            try:
                if asyncio.run(self._settled()):
                    self.settled_s = time.monotonic() - self.healed_at
            except Exception:  # ZooKeeper may still be coming back; ask again until the deadline
                pass
            if self.settled_s is None:
                time.sleep(0.2)
        return self.settled_s


def _log_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log")) if directory.is_dir() else -1


def _leaders(zookeeper: str, topics: tuple[str, ...]) -> dict[tuple[str, int], int]:
    async def read() -> dict[tuple[str, int], int]:
        async with connected(zookeeper, connection_timeout_ms=5000) as zk:
            state = await read_cluster_state(zk, list(topics))
        return {(p.topic, p.partition): p.leader for p in state.partitions}
    try:
        return asyncio.run(read())
    except Exception:
        return {}
