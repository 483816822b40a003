"""transactional.id.expiration.ms on real brokers: an id idle past it is removed with a tombstone, and its next
InitProducerId starts afresh with a new producer id at epoch 0 (not the next epoch of the old one)."""

from __future__ import annotations

from kafka.protocol.producer import InitProducerIdRequest

from broker.group.coordinator import partition_for
from tests.client.support import RawConnection, client_port, leader_of, wait_until
from tests.harness import RunningCluster, module_cluster
from tests.transaction.test_transactions_cluster import STATE_PARTITIONS, transactional_producer

EXPIRATION_MS = 2000
cluster = module_cluster("txn-expiry", overrides={
    "transactional.id.expiration.ms": str(EXPIRATION_MS),
    "transaction.remove.expired.transaction.cleanup.interval.ms": "300"})
TXN = "expiring-tx"


def test_an_idle_transactional_id_expires_and_comes_back_as_a_new_producer(cluster: RunningCluster):
    transactional_producer(cluster, "expiry-probe")  # creates __transaction_state
    coordinator = leader_of(cluster, "__transaction_state", partition_for(TXN, STATE_PARTITIONS))

    def init() -> tuple[int, int, int]:
        with RawConnection(client_port(cluster, coordinator)) as connection:
            reply = connection.request(InitProducerIdRequest(transactional_id=TXN, transaction_timeout_ms=60_000), 4)
        return reply.error_code, reply.producer_id, reply.producer_epoch

    error, first_pid, epoch = init()
    assert (error, epoch) == (0, 0)
    assert init() == (0, first_pid, 1)  # known: the next epoch

    def expired() -> bool:
        return any(e.event == "transaction_state_changed" and e.transactional_id == TXN and e.new_state == "Dead"
                   for e in cluster.traces(coordinator))
    wait_until(expired, 20, f"{TXN} to expire after {EXPIRATION_MS} ms idle")
    error, second_pid, epoch = init()
    assert (error, epoch) == (0, 0) and second_pid != first_pid
