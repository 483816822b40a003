"""The log side of transactions on real brokers (issue 20): hand-built transactional batches produced raw, markers
written through WriteTxnMarkers (as a coordinator would), and confluent-kafka consumers with
isolation.level=read_committed and read_uncommitted, and the leader's trace of markers and LSO. There is no
transaction coordinator yet: the producer ids are chosen by the test, as the log layer takes them."""

from __future__ import annotations

import time

from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.producer import WriteTxnMarkersRequest

from broker.log.records import Record, build_batch, build_end_txn_marker
from tests.client.support import (
    LATEST,
    RawConnection,
    client_port,
    consume,
    create_topic,
    leader_of,
    produce_request,
    wait_until,
)
from tests.harness import RunningCluster
from traces import events as te

ABORTED, COMMITTED, OPEN = 900_001, 900_002, 900_003  # producer ids of the three transactions
INVALID_RECORD = 87


def batch(values: list[bytes], producer_id: int = -1, sequence: int = -1, transactional: bool = False) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([Record(None, v, now) for v in values], producer_id=producer_id,
                       producer_epoch=0 if producer_id >= 0 else -1, base_sequence=sequence,
                       transactional=transactional)


def produce(connection: RawConnection, topic: str, records: bytes) -> tuple[int, int]:
    reply = connection.request(produce_request(topic, 0, records, acks=-1), 8)
    answer = reply.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def write_marker(connection: RawConnection, topic: str, producer_id: int, *, commit: bool,
                 coordinator_epoch: int = 0) -> int:
    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=0, transaction_result=commit, coordinator_epoch=coordinator_epoch,
        topics=[WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])
    reply = connection.request(WriteTxnMarkersRequest(markers=[marker]), 1)
    return reply.markers[0].topics[0].partitions[0].error_code


def committed_fetch(connection: RawConnection, topic: str) -> object:
    wanted = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                    log_start_offset=-1, partition_max_bytes=1 << 20)
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=1,
                           session_id=0, session_epoch=-1,
                           topics=[FetchRequest.FetchTopic(topic=topic, partitions=[wanted])],
                           forgotten_topics_data=[], rack_id="")
    return connection.request(request, 11).responses[0].partitions[0]


def latest(connection: RawConnection, topic: str, isolation_level: int) -> int:
    wanted = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                      timestamp=LATEST)
    request = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level,
                                 topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[wanted])])
    return connection.request(request, 5).topics[0].partitions[0].offset


def test_read_committed_skips_aborted_records_and_stops_at_the_lso(shared_cluster: RunningCluster):
    topic = "txn-log"
    create_topic(shared_cluster, topic, 1, replication_factor=3)
    with RawConnection(client_port(shared_cluster, leader_of(shared_cluster, topic))) as connection:
        assert produce(connection, topic, batch([b"plain-0"])) == (0, 0)
        assert produce(connection, topic, batch([b"a0", b"a1"], ABORTED, 0, transactional=True)) == (0, 1)
        assert write_marker(connection, topic, ABORTED, commit=False) == 0  # offset 3
        assert produce(connection, topic, batch([b"b0", b"b1"], COMMITTED, 0, transactional=True)) == (0, 4)
        assert write_marker(connection, topic, COMMITTED, commit=True) == 0  # offset 6
        assert produce(connection, topic, batch([b"c0"], OPEN, 0, transactional=True)) == (0, 7)
        assert produce(connection, topic, batch([b"plain-1"])) == (0, 8)

        # clients may not write markers, nor transactional batches without a producer id
        marker = build_end_txn_marker(producer_id=OPEN, producer_epoch=0, abort=True,
                                      timestamp=int(time.time() * 1000))
        assert produce(connection, topic, marker)[0] == INVALID_RECORD
        assert produce(connection, topic, batch([b"x"], transactional=True))[0] == INVALID_RECORD

        wait_until(lambda: committed_fetch(connection, topic).high_watermark == 9, 10, "the HW to reach 9")
        answer = committed_fetch(connection, topic)
        assert answer.last_stable_offset == 7  # OPEN's transaction starts at 7
        assert [(t.producer_id, t.first_offset) for t in answer.aborted_transactions] == [(ABORTED, 1)]
        assert latest(connection, topic, isolation_level=1) == 7
        assert latest(connection, topic, isolation_level=0) == 9

        assert consume(shared_cluster, topic, "read_uncommitted", 7) == [
            b"plain-0", b"a0", b"a1", b"b0", b"b1", b"c0", b"plain-1"]
        assert consume(shared_cluster, topic, "read_committed", 3) == [b"plain-0", b"b0", b"b1"]

        assert write_marker(connection, topic, OPEN, commit=True) == 0  # offset 9: the LSO reaches the HW
        wait_until(lambda: latest(connection, topic, isolation_level=1) == 10, 10, "the LSO to reach 10")
        assert consume(shared_cluster, topic, "read_committed", 5) == [b"plain-0", b"b0", b"b1", b"c0", b"plain-1"]


def test_the_leader_traces_its_markers_and_its_lso_while_transactions_hold_it(shared_cluster: RunningCluster):
    topic = "txn-traced"
    create_topic(shared_cluster, topic, 1, replication_factor=3)
    leader = leader_of(shared_cluster, topic)
    with RawConnection(client_port(shared_cluster, leader)) as connection:
        assert produce(connection, topic, batch([b"plain-0"])) == (0, 0)  # no transaction: nothing traced
        assert produce(connection, topic, batch([b"c0", b"c1"], COMMITTED, 0, transactional=True)) == (0, 1)
        assert write_marker(connection, topic, COMMITTED, commit=True, coordinator_epoch=4) == 0  # offset 3
        assert produce(connection, topic, batch([b"a0"], ABORTED, 0, transactional=True)) == (0, 4)
        assert write_marker(connection, topic, ABORTED, commit=False, coordinator_epoch=4) == 0  # offset 5
        wait_until(lambda: latest(connection, topic, isolation_level=1) == 6, 10, "the LSO to reach 6")

    def traced(kind: type) -> list:
        return [e for e in shared_cluster.all_traces() if isinstance(e, kind) and e.topic == topic]

    def all_released() -> list | None:
        found = traced(te.LastStableOffsetChanged)
        return found if found and found[-1].last_stable_offset == 6 else None

    lso = wait_until(all_released, 10, "the LSO's release at 6 to be traced")
    assert {e.broker_id for e in lso} == {leader}  # the leader's only, never a follower's
    # (LSO, open transactions): opened at the HW, held as the HW passes it, decided, released; twice
    assert [(e.last_stable_offset, e.open_transactions) for e in lso] == [
        (1, 1), (1, 1), (1, 0), (4, 0), (4, 1), (4, 1), (4, 0), (6, 0)]
    high_watermarks = [e.high_watermark for e in lso]
    assert high_watermarks[0] == 1 and high_watermarks[1] in (2, 3)  # the followers may fetch 1 and 2 apart
    assert high_watermarks[2:] == [3, 4, 4, 5, 5, 6]
    markers = wait_until(lambda: traced(te.TxnMarkerWritten) or None, 10, "the markers to be traced")
    assert [(e.broker_id, e.producer_id, e.producer_epoch, e.marker, e.offset, e.coordinator_epoch)
            for e in markers] == [(leader, COMMITTED, 0, "COMMIT", 3, 4), (leader, ABORTED, 0, "ABORT", 5, 4)]
