"""The transaction jobs on a real run: confluent-kafka's transactional producer commits a transaction over two
partitions and aborts one over a single partition, on real brokers with the transaction coordinator; the traces
the coordinator and the partition leaders wrote become those two transactions, with their markers where the
leaders wrote them and the LSO held behind the HW while each was open."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from analysis import transactions as tx
from analysis.load import load_events
from tests.client.support import bootstrap, create_topic
from tests.harness import RunningCluster, module_cluster, wait_until
from traces import events as te

pytestmark = pytest.mark.spark
cluster = module_cluster("txn-analysis")
TOPIC, TXN_ID = "txn-analysed", "analysed-txn"


def test_a_committed_and_an_aborted_transaction_become_their_timelines(cluster: RunningCluster, spark):
    create_topic(cluster, TOPIC, 2, replication_factor=3)
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": TXN_ID, "linger.ms": 5})
    producer.init_transactions(60)
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(TOPIC, b"committed", partition=partition)
    producer.flush(30)  # acknowledged (acks=all) before the commit: the HW passes them, the LSO stays
    producer.commit_transaction(60)
    producer.begin_transaction()
    producer.produce(TOPIC, b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(60)

    def traced() -> bool:
        events = cluster.all_traces()
        markers = [e for e in events if isinstance(e, te.TxnMarkerWritten) and e.topic == TOPIC]
        done = [e for e in events if isinstance(e, te.TransactionStateChanged) and e.transactional_id == TXN_ID
                and e.new_state == "CompleteAbort"]
        released = [e for e in events if isinstance(e, te.LastStableOffsetChanged) and e.topic == TOPIC
                    and e.partition == 0 and e.open_transactions == 0 and e.last_stable_offset == e.high_watermark]
        return len(markers) == 3 and bool(done) and len(released) == 2
    wait_until(traced, 20, "the markers, the abort's completion and the LSO's releases to be traced")

    events = load_events(spark, cluster.data_dir)
    rows = [r for r in tx.transaction_summary(events).collect() if r.transactional_id == TXN_ID]
    assert [(r.outcome, list(r.partitions), r.markers) for r in rows] == [
        ("commit", [f"{TOPIC}-0", f"{TOPIC}-1"], 2), ("abort", [f"{TOPIC}-0"], 1)]
    for row in rows:
        assert row.ongoing_ms >= 0 and 0 <= row.markers_ms <= row.completion_ms
        assert row.total_ms == pytest.approx(row.ongoing_ms + row.completion_ms)
    committed, aborted = rows
    # the commit marker of partition 0 comes after the committed record (offset 0), the abort's after both
    offsets = {m.split("@")[0]: int(m.split(":")[1]) for m in committed.marker_offsets}
    assert offsets == {f"{TOPIC}-0": 1, f"{TOPIC}-1": 1}
    assert [m.split(":")[1] for m in aborted.marker_offsets] == ["3"]

    lag = {(r.topic, r.partition): r for r in tx.lso_lag_summary(tx.lso_lag(events), 0.0).collect()
           if r.topic == TOPIC}
    # each transaction's record was acknowledged before its end: the HW passed it while the LSO stayed
    assert lag[(TOPIC, 0)].lag_offsets_max >= 1 and lag[(TOPIC, 1)].lag_offsets_max >= 1
