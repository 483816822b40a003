"""disk-full: a leader's log directory (a real, size-limited tmpfs) is filled while an acks=all producer writes
unique values to a topic with replication factor 3 and min.insync.replicas=2. The leader takes its log
directory offline (KAFKA_STORAGE_ERROR, never an acknowledgement, from then on), halts naming the directory
and the error, and the controller elects new leaders from the other ISR members. Every acknowledged value
stays readable; once the space is freed and the broker started again, it recovers its log, rejoins every ISR
and ends with replicas byte-identical to the others'."""

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from cluster import disk
from tests.chaos.test_acknowledged_writes_survive import (
    PARTITIONS,
    TOPIC,
    AckingProducer,
    logs_identical,
    replica_records,
)
from tests.cluster.test_controller import make_topic
from tests.harness import RunningCluster, own_cluster, wait_until
from traces import events as te
from traces.history import HistoryWriter

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos, pytest.mark.timeout(300)]

LOG_DIR_MIB = 32
SETTLE_S = 60


@pytest.fixture
def size_limited_cluster(tmp_path: Path):
    data_dir = tmp_path / "cluster"
    try:
        with own_cluster(data_dir, log_dir_size_mib=LOG_DIR_MIB,
                         overrides={"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}) as cluster:
            yield cluster
    finally:
        # by name, whatever cluster.json says: no test may leave a mount behind
        disk.unmount_named(disk.cluster_mount_prefix(data_dir))
        assert not disk.mounts_named(disk.current_mounts(), disk.cluster_mount_prefix(data_dir))


def leaders(cluster: RunningCluster) -> dict[int, int]:
    return {p.partition: p.leader for p in cluster.state([TOPIC]).partitions}


def read_everything(bootstrap: str) -> dict[int, list[str]]:
    """Every committed value of every partition, in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "disk-full-check", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        values: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while any(len(values[p]) < ends[p] for p in ends) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                assert message.offset() == len(values[message.partition()]), "offsets without compaction have no gaps"
                values[message.partition()].append(message.value().decode())
        return values
    finally:
        consumer.close()


def test_a_full_log_dir_takes_its_broker_down_without_losing_an_acknowledged_write_and_it_recovers(
        size_limited_cluster):
    cluster = size_limited_cluster
    make_topic(cluster, TOPIC, PARTITIONS, 3)
    history = HistoryWriter(cluster.data_dir / "workload-history.jsonl")
    producer = AckingProducer(cluster.spec.bootstrap_servers, history)
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) >= 300, 30, "the producer to get going")
        victim = leaders(cluster)[0]
        led = sorted(p for p, leader in leaders(cluster).items() if leader == victim)
        log_dir = disk.broker_log_dir(cluster.spec, victim, cluster.layout)

        filled_at = time.monotonic()
        disk.fill(cluster.data_dir, victim, say=lambda _: None)
        wait_until(lambda: cluster.pid(victim) is None, 30, f"broker {victim} to halt on its full log dir")
        exited_s = time.monotonic() - filled_at
        wait_until(lambda: all(leaders(cluster)[p] not in (victim, -1) for p in led), 30,
                   f"new leaders for {led}, led by broker {victim} before its disk filled")
        new_leader_s = time.monotonic() - filled_at
        print(f"fill -> broker {victim} halted in {exited_s:.2f} s, -> new leaders of {led} in {new_leader_s:.2f} s")

        broker_log = cluster.layout.broker_log(victim).read_text()
        assert f"Shutdown broker because all log dirs in {log_dir} have failed" in broker_log
        assert "No space left on device" in broker_log
        acked_at_failover = len(producer.acked)
        wait_until(lambda: len(producer.acked) >= acked_at_failover + 300, 60,
                   "acks=all writes acknowledged again by the remaining two replicas")
    finally:
        producer.stop()
        history.close()

    victim_trace = cluster.traces(victim)
    [failed] = [e for e in victim_trace if isinstance(e, te.LogDirFailed)]
    assert failed.log_dir == str(log_dir) and "No space left on device" in failed.error
    assert {f"{TOPIC}-{p}" for p in range(PARTITIONS)} <= set(failed.offline_partitions)
    assert [e.clean for e in victim_trace if isinstance(e, te.BrokerStopped)] == [False]
    answers = [e for e in victim_trace if isinstance(e, te.ProduceAcknowledged) and e.topic == TOPIC]
    late = [e for e in answers if e.ts_ms >= failed.ts_ms and e.error == "none"]
    assert not late, f"broker {victim} acknowledged writes after its log dir went offline: {late[:3]}"
    storage_errors = sum(1 for e in answers if e.error == "kafka_storage_error")
    # either it answered KAFKA_STORAGE_ERROR before halting, or the client found the new leaders: both do
    later_acks = [e for b in cluster.spec.brokers if b.broker_id != victim for e in cluster.traces(b.broker_id)
                  if isinstance(e, te.ProduceAcknowledged) and e.partition in led and e.error == "none"
                  and e.ts_ms > failed.ts_ms]
    assert storage_errors or later_acks

    read = read_everything(cluster.spec.bootstrap_servers)
    for value, (partition, offset) in producer.acked.items():
        assert offset is None or read[partition][offset] == value, f"acknowledged {value} is not readable"
    assert set(producer.acked) <= {v for values in read.values() for v in values}

    disk.free(cluster.data_dir, victim, say=lambda _: None)
    cluster.start(victim)
    wait_until(lambda: all(sorted(p.isr) == [1, 2, 3] for p in cluster.state([TOPIC]).partitions), SETTLE_S,
               f"broker {victim} back in every ISR")
    assert "recovering logs from their recovery points" in cluster.layout.broker_log(victim).read_text()
    wait_until(lambda: logs_identical(cluster), SETTLE_S, "every replica's log to be byte-identical")
    for partition in range(PARTITIONS):
        replicas = [[value for value, _ in replica_records(d)]
                    for d in sorted(cluster.data_dir.glob(f"broker-*/logs/{TOPIC}-{partition}"))]
        assert len(replicas) == 3 and replicas[0] == replicas[1] == replicas[2]
        assert {v for v, (p, _) in producer.acked.items() if p == partition} <= set(replicas[0])
    print(f"{len(producer.acked)} values acknowledged of {producer.sent} sent, {len(producer.failed)} failed, "
          f"{storage_errors} KAFKA_STORAGE_ERROR answers from broker {victim}")
