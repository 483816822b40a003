"""`kafkasim chaos run --bootstrap HOST:PORT`: the workload and the checker against a cluster kafkasim did not
start — another kafkasim, or Apache Kafka itself. kafkasim cannot break what it does not run, so there are no
faults of its own (break it by other means meanwhile); the final reads come from a fresh consumer reading
every partition from its leader, since the replicas' files are out of reach."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.chaos.checker import check
from cluster.chaos.history import (
    FINAL_READS_FILE,
    NEMESIS_FILE,
    OPERATIONS_FILE,
    FinalReads,
    JsonLinesWriter,
    Recorder,
    ReplicaRead,
    read_nemesis,
    read_operations,
)
from cluster.chaos.runner import RESULTS_FILE, ChaosRun, ChaosSettings, compacted_topics, finish_run
from cluster.chaos.workload import Workload, WorkloadSettings
from cluster.processes import ClusterError


def run_against(settings: ChaosSettings, bootstrap: str, out: Path, say: Callable[[str], None] = print) -> ChaosRun:
    if settings.nemesis:
        raise ClusterError("with --bootstrap kafkasim applies no faults (it did not start that cluster): "
                           "use --nemesis none, or let `kafkasim chaos run` start its own cluster")
    if not isinstance(settings.workload, WorkloadSettings):
        raise ClusterError("with --bootstrap only the queue workload runs (the txn workload needs the run's own "
                           "cluster): leave --workload out")
    if (out / RESULTS_FILE).exists() or (out / OPERATIONS_FILE).exists():
        raise ClusterError(f"{out} already holds a chaos run: choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    # topics of this run only: values left by an earlier run would read as unexpected values
    suffix = f"{settings.seed}-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}"
    workload_settings = WorkloadSettings(**{**asdict(settings.workload),
                                            "topics": tuple(f"{t}-{suffix}" for t in settings.workload.topics)})
    leaders = _create_topics(bootstrap, workload_settings, settings.overrides)
    say(f"chaos run against {bootstrap}: topics {', '.join(workload_settings.topics)}, no faults of kafkasim's")
    with JsonLinesWriter(out / OPERATIONS_FILE) as operations, JsonLinesWriter(out / NEMESIS_FILE) as faults:
        recorder = Recorder(operations.append, faults.append, lambda: time.time() * 1000, time.monotonic_ns)
        workload = Workload(bootstrap, workload_settings, recorder)
        workload.start()
        started = time.monotonic()
        time.sleep(settings.duration_s)
        workload.stop_producers(timeout_s=30)
        sending_s = time.monotonic() - started
        workload.stop_readers()
    final = _read_to_the_end(bootstrap, workload_settings, leaders)
    (out / FINAL_READS_FILE).write_text(final.model_dump_json() + "\n")
    result = check(read_operations(out / OPERATIONS_FILE), final, read_nemesis(out / NEMESIS_FILE),
                   compacted=compacted_topics(workload_settings))
    ops_per_s = workload.counters.acknowledged / sending_s
    return finish_run(out, result, [], ops_per_s, None, {
        "seed": settings.seed, "duration_s": settings.duration_s, "nemesis": [], "bootstrap": bootstrap,
        "settings": {"workload": asdict(workload_settings)}})


def _create_topics(bootstrap: str, workload: WorkloadSettings, overrides: dict[str, str]) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = len(admin.list_topics(timeout=10).brokers)
    config = {k: v for k, v in overrides.items() if k in ("min.insync.replicas", "unclean.leader.election.enable")}
    futures = admin.create_topics([NewTopic(t, workload.partitions, min(3, brokers),
                                            config=config | workload.topic_config(t)) for t in workload.topics])
    for topic, future in futures.items():
        try:
            future.result(30)
        except KafkaException as exc:
            raise ClusterError(f"cannot create topic {topic} on {bootstrap}: {exc}") from None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        metadata = admin.list_topics(timeout=10).topics
        leaders = {(t, p): part.leader for t in workload.topics if t in metadata
                   for p, part in metadata[t].partitions.items()}
        if len(leaders) == len(workload.topics) * workload.partitions and all(v >= 0 for v in leaders.values()):
            return leaders
        time.sleep(0.2)
    raise ClusterError(f"the chaos topics on {bootstrap} got no leaders within 30 s")


def _read_to_the_end(bootstrap: str, workload: WorkloadSettings, leaders: dict[tuple[str, int], int]) -> FinalReads:
    """Every partition from offset 0 to its high watermark, as its leader serves it now, with the records' keys
    (a compacted topic's tombstones are known by them). A compacted partition's last record is never cleaned (it is
    in the active segment), so reading up to the high watermark still ends on a record."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafkasim-chaos-final-read",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        ends = {tp: consumer.get_watermark_offsets(KafkaTopicPartition(*tp), timeout=10)[1] for tp in leaders}
        consumer.assign([KafkaTopicPartition(t, p, 0) for (t, p) in leaders])
        records: dict[tuple[str, int], list[tuple[int, str | None]]] = {tp: [] for tp in leaders}
        keys: dict[tuple[str, int], list[tuple[int, str]]] = {tp: [] for tp in leaders}
        deadline = time.monotonic() + 120
        while any((records[tp][-1][0] + 1 if records[tp] else 0) < ends[tp] for tp in leaders):
            if time.monotonic() > deadline:
                raise ClusterError(f"could not read every partition of {bootstrap} to its end within 120 s")
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    value, key = message.value(), message.key()
                    tp = (message.topic(), message.partition())
                    records[tp].append((message.offset(), None if value is None else value.decode("utf-8", "replace")))
                    if key is not None:
                        keys[tp].append((message.offset(), key.decode("utf-8", "replace")))
        read_ts_ms = time.time() * 1000
    finally:
        consumer.close()
    return FinalReads(replicas=tuple(ReplicaRead(broker=leaders[tp], topic=tp[0], partition=tp[1], leader=True,
                                                 records=tuple(records[tp]), keys=tuple(keys[tp]))
                                     for tp in sorted(leaders)), read_ts_ms=read_ts_ms)
