"""An idempotent producer's retry that reaches a new leader (seed 1051's question (a)): the batch (pid P, epoch 0,
sequence S) was appended by leader L and replicated to the other replicas; L is killed, another replica is
elected, and the same batch is re-sent to it. Kafka's new leader knows the producer's last batches from its own
log (ProducerStateManager on followers too) and answers the retry with the original offset, appending nothing.

Two ways the first try ends: acknowledged (acks=all, answered before the kill), and never answered (acks=0, the
client cannot know it was written). Real processes; the test chooses who receives each write.
"""

from __future__ import annotations

import time

import pytest
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from broker.log.records import Record, build_batch
from tests.harness import RunningCluster, wait_until
from tests.replication.support import (
    NONE,
    PRODUCE_VERSION,
    RETRIABLE_ROUTING,
    SESSION_S,
    connect,
    controller_and_others,
    make_topic,
    partition_state,
    replica_log,
    values_by_offset,
    wait_for_identical_replicas,
    wait_for_leader,
)

pytestmark = [pytest.mark.processes, pytest.mark.slow]
TOPIC = "idempotent"
PRODUCER_ID, PRODUCER_EPOCH = 4242, 0


def idempotent_batch(value: bytes, sequence: int) -> bytes:
    return build_batch([Record(None, value, int(time.time() * 1000))], producer_id=PRODUCER_ID,
                       producer_epoch=PRODUCER_EPOCH, base_sequence=sequence)


def send(cluster: RunningCluster, broker_id: int, records: bytes, *, acks: int) -> tuple[int, int] | None:
    """(error code, base offset) of one Produce v8 to the chosen broker; None for acks=0 (no answer)."""
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=20000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    with connect(cluster, broker_id) as conn:
        if acks == 0:
            conn.correlation_id += 1
            request.with_header(correlation_id=conn.correlation_id, client_id="replication-scenarios")
            conn.sock.sendall(request.encode(version=PRODUCE_VERSION, header=True, framed=True))
            return None
        answer = conn.call(request, PRODUCE_VERSION, ProduceResponse).responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def send_until_led(cluster: RunningCluster, broker_id: int, records: bytes, timeout_s: float = 15) -> tuple[int, int]:
    """Retries while the broker has not heard of its election yet, as a client would after a metadata refresh."""
    def attempt() -> tuple[int, int] | None:
        result = send(cluster, broker_id, records, acks=-1)
        return None if result[0] in RETRIABLE_ROUTING else result

    return wait_until(attempt, timeout_s, f"broker {broker_id} to answer a produce as leader")


@pytest.mark.parametrize("first_try", ["acknowledged", "unanswered"])
def test_a_retried_idempotent_batch_is_answered_with_its_original_offset_by_the_new_leader(cluster_factory,
                                                                                           first_try):
    cluster = cluster_factory(brokers=3)
    controller, (leader, other) = controller_and_others(cluster)
    replicas = [leader, controller, other]
    make_topic(cluster, TOPIC, replicas)
    wait_for_leader(cluster, TOPIC, leader, 15)
    assert send_until_led(cluster, leader, idempotent_batch(b"v0", 0)) == (NONE, 0)
    retried = idempotent_batch(b"v1", 1)
    if first_try == "acknowledged":
        assert send(cluster, leader, retried, acks=-1) == (NONE, 1)
    else:
        assert send(cluster, leader, retried, acks=0) is None
    wait_until(lambda: all(len(replica_log(cluster, b, TOPIC)) == 2 for b in replicas) or None, 15,
               "every replica to hold both batches")

    cluster.kill9(leader)
    new_leader = wait_until(lambda: (b := partition_state(cluster, TOPIC).leader) in (controller, other) and b,
                            SESSION_S + 15, "another replica to be elected")
    wait_for_leader(cluster, TOPIC, new_leader, 10)

    assert send_until_led(cluster, new_leader, retried) == (NONE, 1), "the retry is answered with its offset"
    # the batch after it continues the sequence: the producer's state moved with the data
    assert send_until_led(cluster, new_leader, idempotent_batch(b"v2", 2)) == (NONE, 2)
    survivors = [b for b in replicas if b != leader]
    wait_for_identical_replicas(cluster, TOPIC, survivors, 15)
    assert values_by_offset(replica_log(cluster, new_leader, TOPIC)) == {0: b"v0", 1: b"v1", 2: b"v2"}

