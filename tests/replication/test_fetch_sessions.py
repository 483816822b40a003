"""Incremental fetch sessions (KIP-227) on the replica Fetch stream, with real brokers and ZooKeeper (issue 18).

First the leader's side as a follower sees it, through a Fetch stream of the test's own (a replica id that is no
replica, so the leader's view of the real followers is untouched): the full request opens a session, an idle one
names nothing and is answered by nothing after max_wait_ms, a partition with new records is the only one named,
a forgotten partition is not named any more, and a request out of step with the session is refused.

Then replication through sessions: acks=all to many partitions, a kill -9 of their leader moves them (they leave
the followers' sessions with the old leader and join those with the new one), writes still commit, and the old
leader, restarted, fetches in new, full sessions until every replica is the same again and every ISR is full."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import ReplicationStub
from tests.replication.support import (
    controller_and_others,
    make_topic,
    partition_state,
    produce_acknowledged,
    values_by_offset,
    batches,
    wait_for_identical_replicas,
    wait_for_isr,
)

pytestmark = [pytest.mark.processes, pytest.mark.slow]
NOT_A_REPLICA = 99
INVALID_FETCH_SESSION_EPOCH = 71


class FetchStream:
    """A Fetch stream to one broker, one request and answer at a time."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self._requests: list[pb.ReplicaFetchRequest] = []
        self._ready = threading.Condition()
        self._responses = ReplicationStub(self.channel).Fetch(self._iterate())

    def _iterate(self):
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._requests)
                request = self._requests.pop(0)
            if request is None:
                return
            yield request

    def fetch(self, request: pb.ReplicaFetchRequest | None) -> tuple[pb.ReplicaFetchResponse, float]:
        began = time.monotonic()
        with self._ready:
            self._requests.append(request)
            self._ready.notify()
        return next(self._responses), time.monotonic() - began

    def close(self) -> None:
        with self._ready:
            self._requests.append(None)
            self._ready.notify()
        self.channel.close()


def request(topic: str, offsets: dict[int, int], epochs: dict[int, int], *, session_id: int = 0,
            session_epoch: int = 0, forgotten: tuple[int, ...] = (), max_wait_ms: int = 300) -> pb.ReplicaFetchRequest:
    return pb.ReplicaFetchRequest(
        replica_id=NOT_A_REPLICA, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
        session_id=session_id, session_epoch=session_epoch,
        partitions=[pb.ReplicaFetchPartition(topic=topic, partition=p, fetch_offset=o, log_start_offset=0,
                                             current_leader_epoch=epochs[p],
                                             partition_max_bytes=1 << 20, high_watermark=o)
                    for p, o in offsets.items()],
        forgotten=[pb.TopicPartition(topic=topic, partition=p) for p in forgotten])


def test_a_fetch_session_names_only_partitions_with_something_new(cluster_factory):
    topic, count = "session-view", 6
    cluster = cluster_factory(brokers=3)
    leader, followers = controller_and_others(cluster)
    make_topic(cluster, topic, [leader, *followers], partitions=count)
    for p in range(count):
        produce_acknowledged(cluster, leader, topic, [f"first-{p}".encode()], acks=-1, partition=p)
    epochs = {p: partition_state(cluster, topic, p).leader_epoch for p in range(count)}
    spec = next(b for b in cluster.spec.brokers if b.broker_id == leader)
    stream = FetchStream(f"{spec.host}:{spec.cluster_port}")
    try:
        # full: every partition is at the leader's LEO and HW (1), so nothing is new, after max_wait_ms
        opened, _ = stream.fetch(request(topic, {p: 1 for p in range(count)}, epochs))
        assert opened.error_code == 0 and opened.session_id > 0
        session = opened.session_id
        assert [d.partition for d in opened.partitions] == []
        idle, waited = stream.fetch(request(topic, {}, epochs, session_id=session, session_epoch=1))
        assert (idle.error_code, list(idle.partitions)) == (0, []) and waited >= 0.25

        produce_acknowledged(cluster, leader, topic, [b"second"], acks=1, partition=2)
        named, waited = stream.fetch(request(topic, {}, epochs, session_id=session, session_epoch=2, max_wait_ms=5000))
        assert [d.partition for d in named.partitions] == [2] and waited < 4
        assert values_by_offset(batches(named.partitions[0].records)) == {1: b"second"}

        # partition 2 moves on, partition 3 leaves the session: a write to 3 is not named any more
        produce_acknowledged(cluster, leader, topic, [b"unseen"], acks=1, partition=3)
        after, _ = stream.fetch(request(topic, {2: 2}, epochs, session_id=session, session_epoch=3, forgotten=(3,)))
        assert 3 not in [d.partition for d in after.partitions]

        refused, _ = stream.fetch(request(topic, {}, epochs, session_id=session, session_epoch=9))
        assert refused.error_code == INVALID_FETCH_SESSION_EPOCH
    finally:
        stream.close()


def test_replication_through_sessions_survives_a_leader_move_and_a_restart(cluster_factory):
    topic, count = "session-replication", 30
    cluster = cluster_factory(brokers=3)
    controller, (old_leader, other) = controller_and_others(cluster)
    # the leader is not the controller, so its kill -9 moves only its partitions, to the controller
    make_topic(cluster, topic, [old_leader, controller, other], partitions=count)
    for p in range(count):
        produce_acknowledged(cluster, old_leader, topic, [f"before-{p}".encode()], acks=-1, partition=p)
    for p in range(count):
        wait_for_identical_replicas(cluster, topic, [old_leader, controller, other], 15, partition=p)

    cluster.kill9(old_leader)
    for p in range(count):
        wait_for_isr(cluster, topic, [controller, other], 20, partition=p)
    for p in range(count):  # committed only if `other` fetches them from the new leader, in its session there
        produce_acknowledged(cluster, controller, topic, [f"moved-{p}".encode()], acks=-1, partition=p)

    cluster.start(old_leader)  # a new process: new streams, each opening with a full request
    for p in range(count):
        wait_for_isr(cluster, topic, [old_leader, controller, other], 30, partition=p)
    for p in range(count):
        produce_acknowledged(cluster, controller, topic, [f"after-{p}".encode()], acks=-1, partition=p)
    for p in range(count):
        settled = wait_for_identical_replicas(cluster, topic, [old_leader, controller, other], 15, partition=p)
        assert values_by_offset(batches(settled)) == {0: f"before-{p}".encode(), 1: f"moved-{p}".encode(),
                                                      2: f"after-{p}".encode()}
