"""Consumer groups with real clients against a real 3-broker cluster: members as separate processes share
a topic's partitions, a kill -9'd member's partitions move to the others after its session timeout, and
committed offsets survive the coordinator's kill -9."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from cluster.group_consumer import GroupConsumerProcess, owned_exactly_once
from tests.cluster.test_controller import make_topic
from tests.groups.support import CommitWatcher, committed_offsets, coordinator_of, produce
from tests.harness import RunningCluster, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.slow]
SESSION_MS = 6000  # group.min.session.timeout.ms: the shortest session a member may ask for


def consumed_offsets(consumers: list[GroupConsumerProcess]) -> dict[int, set[int]]:
    found: dict[int, set[int]] = {}
    for consumer in consumers:
        for partition, offset, _ in consumer.consumed():
            found.setdefault(partition, set()).add(offset)
    return found


@pytest.mark.parametrize(("client", "assignor"), [
    ("confluent", "range"), ("confluent", "roundrobin"), ("confluent", "cooperative-sticky"),
    ("kafka-python", "range"),
])
def test_members_share_partitions_and_take_over_a_killed_members_partitions(
        shared_cluster: RunningCluster, tmp_path, client, assignor):
    topic, group = f"g-{client}-{assignor}", f"group-{client}-{assignor}"
    bootstrap = shared_cluster.spec.bootstrap_servers
    make_topic(shared_cluster, topic, 6, 3)
    produce(bootstrap, topic, dict.fromkeys(range(6), 30))
    consumers = [GroupConsumerProcess(client, bootstrap, group, topic, tmp_path / f"c{i}.jsonl", assignor=assignor,
                                 session_timeout_ms=SESSION_MS) for i in range(3)]
    watcher = CommitWatcher(bootstrap, group)
    try:
        wait_until(lambda: owned_exactly_once(consumers, 6), 90, "each partition owned by exactly one member")
        wait_until(lambda: all(len(consumed_offsets(consumers).get(p, ())) == 30 for p in range(6)), 60,
                   "every record consumed")
        victim, survivors = consumers[0], consumers[1:]
        orphaned = victim.assignment()
        victim.kill9()
        killed_at = time.time()
        produce(bootstrap, topic, dict.fromkeys(range(6), 10))

        def orphans_consumed_again() -> bool:
            return all(any(p == o and offset >= 30 for c in survivors for p, offset, _ in c.consumed())
                       for o in orphaned)
        wait_until(orphans_consumed_again, 90, f"partitions {sorted(orphaned)} consumed by the survivors")
        wait_until(lambda: owned_exactly_once(survivors, 6), 30, "the survivors to own all partitions")
        resumed_after = min(t for c in survivors for p, offset, t in c.consumed() if p in orphaned and offset >= 30)
        # the survivors can only take over once the coordinator expired the victim's session
        assert resumed_after - killed_at >= SESSION_MS / 1000 * 0.8
        offsets = consumed_offsets(consumers)
        assert all(offsets[p] >= set(range(40)) for p in range(6)), "a record was never consumed"
        wait_until(lambda: watcher.highest == dict.fromkeys(range(6), 40), 30, "all offsets committed")
    finally:
        watcher.stop()
        for consumer in consumers:
            consumer.stop()
    assert watcher.backwards == [], f"committed offsets moved backwards: {watcher.backwards}"


def test_committed_offsets_survive_the_coordinators_kill9_and_a_restarted_member_resumes_there(
        shared_cluster: RunningCluster):
    topic, group = "resume", "resume-group"
    bootstrap = shared_cluster.spec.bootstrap_servers
    make_topic(shared_cluster, topic, 3, 3)
    produce(bootstrap, topic, dict.fromkeys(range(3), 20))
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": SESSION_MS}
    first = Consumer(config)
    first.subscribe([topic])
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    while len(seen) < 60 and time.monotonic() < deadline:
        for message in first.consume(100, timeout=0.5):
            if message.error() is None:
                seen.append((message.partition(), message.offset()))
        if seen:
            first.commit(asynchronous=False)
    first.close()
    assert len(seen) == 60
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert committed_offsets(admin, group) == dict.fromkeys(range(3), 20)

    coordinator = coordinator_of(admin, group)
    shared_cluster.kill9(coordinator)
    try:
        produce(bootstrap, topic, dict.fromkeys(range(3), 5))
        wait_until(lambda: committed_offsets(admin, group) == dict.fromkeys(range(3), 20), 60,
                   "the new coordinator to answer with the committed offsets")
        assert coordinator_of(admin, group) != coordinator
        second = Consumer(config)
        second.subscribe([topic])
        resumed: list[tuple[int, int]] = []
        deadline = time.monotonic() + 60
        while len(resumed) < 15 and time.monotonic() < deadline:
            resumed += [(m.partition(), m.offset()) for m in second.consume(100, timeout=0.5) if m.error() is None]
        second.commit(asynchronous=False)
        second.close()
        # exactly the records produced after the commit: nothing lost, nothing read twice
        assert sorted(resumed) == sorted((p, o) for p in range(3) for o in range(20, 25))
        assert committed_offsets(admin, group) == dict.fromkeys(range(3), 25)
    finally:
        shared_cluster.start(coordinator)
