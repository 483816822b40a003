"""Preferred leader election on a real cluster: the controller's periodic imbalance check gives a broker back from
a kill -9 its preferred leaderships; ElectLeaders from confluent-kafka's and kafka-python's admin clients does
it at once, with Kafka's per-partition results; the ZooKeeper tools' /admin/preferred_replica_election znode;
an UNCLEAN election; and `kafkasim leaders elect`."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka.protocol.admin import ElectLeadersRequest

from cluster.cli import main
from tests.client.support import RawConnection, bootstrap, client_port, create_topic
from tests.harness import RunningCluster, module_cluster, start_cluster, wait_until, zk_call
from traces import events as te
from zk.admin import create_topic as zk_create_topic
from zk.znodes import PreferredReplicaElectionZNode

pytestmark = [pytest.mark.processes, pytest.mark.slow]

NOT_CONTROLLER = 41
ELECTION_NOT_NEEDED = 84


# no automatic rebalance here: each test sees a broker back in the ISR but not leading until it asks
cluster = module_cluster("election-cluster", overrides={"auto.leader.rebalance.enable": "false"})


def preferred_partitions(cluster: RunningCluster, topic: str, broker: int) -> list[int]:
    return sorted(p.partition for p in cluster.state([topic]).partitions if p.replicas[0] == broker)


def led_by_preferred(cluster: RunningCluster, topic: str) -> dict[int, bool]:
    return {p.partition: p.leader == p.replicas[0] for p in cluster.state([topic]).partitions}


def followers(cluster: RunningCluster) -> list[int]:
    controller = cluster.controller()
    return [b.broker_id for b in cluster.spec.brokers if b.broker_id != controller]


def bounce(cluster: RunningCluster, broker: int, topic: str) -> None:
    """kill -9, wait for its leaderships to move, start it again and wait until it is back in every ISR."""
    cluster.kill9(broker)
    wait_until(lambda: all(p.leader != broker for p in cluster.state([topic]).partitions), 20,
               f"broker {broker}'s leaderships of {topic} to move")
    cluster.start(broker)
    wait_until(lambda: all(broker in p.isr for p in cluster.state([topic]).partitions), 30,
               f"broker {broker} to rejoin every ISR of {topic}")


def unbalanced_topic(cluster: RunningCluster, topic: str, partitions: int, pick: int = 0) -> tuple[int, list[int]]:
    """A topic whose partitions preferring one follower (``followers(cluster)[pick]``) are led elsewhere after that
    follower's kill -9 and restart: (the follower, those partitions)."""
    create_topic(cluster, topic, partitions, 3)
    broker = followers(cluster)[pick]
    mine = preferred_partitions(cluster, topic, broker)
    bounce(cluster, broker, topic)
    return broker, mine


# confluent-kafka 2.16's elect_leaders results are KafkaError values (its docstring says KafkaException)


def client_leaders(cluster: RunningCluster, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    return {p: info.leader for p, info in admin.list_topics(timeout=10).topics[topic].partitions.items()}


@pytest.mark.parametrize("victim", ["follower", "controller"])
def test_auto_rebalance_gives_a_returning_broker_its_preferred_leaderships_back(tmp_path, zk_server, victim):
    # the controller as victim: its successor must run the imbalance check too (scheduled at its failover)
    interval_s = 3
    cluster = start_cluster(tmp_path, zk_server, overrides={
        "auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": str(interval_s)})
    try:
        create_topic(cluster, "auto", 6, 3)
        broker = cluster.controller() if victim == "controller" else followers(cluster)[0]
        mine = preferred_partitions(cluster, "auto", broker)
        assert mine, "the assignment spreads preferred replicas over every broker"
        epochs = {p.partition: p.leader_epoch for p in cluster.state(["auto"]).partitions}
        cluster.kill9(broker)
        wait_until(lambda: all(p.leader != broker for p in cluster.state(["auto"]).partitions), 20,
                   f"broker {broker}'s leaderships to move")
        cluster.start(broker)
        back = time.monotonic()
        wait_until(lambda: all(led_by_preferred(cluster, "auto").values()), 30,
                   f"broker {broker} to lead {mine} again")
        restored_s = time.monotonic() - back
        print(f"broker {broker} led its preferred partitions again {restored_s:.1f} s after it registered")
        state = cluster.state(["auto"])
        for p in mine:
            # offline election away (+1), then the preferred election back (+1)
            assert state.partition("auto", p).leader_epoch == epochs[p] + 2
        wait_until(lambda: all(client_leaders(cluster, "auto")[p] == broker for p in mine), 10,
                   "clients' metadata to show the preferred leaders")
        assert cluster.controller() != broker  # a returning controller does not take /controller back
        elections = [e for e in cluster.traces(cluster.controller())
                     if isinstance(e, te.LeaderElected) and e.election == "preferred" and e.topic == "auto"]
        assert sorted(e.partition for e in elections) == mine
        assert all(e.leader == broker and e.previous_leader != broker for e in elections)
    finally:
        cluster.stop_all()


def test_confluent_elect_leaders_restores_preferred_leaders_at_once(cluster):
    topic = "el-ck"
    broker, mine = unbalanced_topic(cluster, topic, 6)
    assert not any(led_by_preferred(cluster, topic)[p] for p in mine), "auto.leader.rebalance.enable=false"
    epochs = {p.partition: p.leader_epoch for p in cluster.state([topic]).partitions}

    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    asked = [TopicPartition(topic, p) for p in range(6)] + [TopicPartition("el-missing", 0)]
    results = admin.elect_leaders(ElectionType.PREFERRED, asked).result(30)
    outcome = {(tp.topic, tp.partition): None if error is None else error.code() for tp, error in results.items()}
    assert outcome == {**{(topic, p): None if p in mine else KafkaError.ELECTION_NOT_NEEDED for p in range(6)},
                       ("el-missing", 0): KafkaError.UNKNOWN_TOPIC_OR_PART}

    state = cluster.state([topic])  # in ZooKeeper as soon as the answer is in
    for p in mine:
        assert state.partition(topic, p).leader == broker
        assert state.partition(topic, p).leader_epoch == epochs[p] + 1
    assert all(led_by_preferred(cluster, topic).values())
    wait_until(lambda: all(client_leaders(cluster, topic)[p] == broker for p in mine), 10,
               "clients' metadata to show the preferred leaders")

    again = admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
    assert again == {}  # every partition: those that needed no election are left out


def test_kafka_python_elect_leaders_and_not_controller_on_other_brokers(cluster):
    topic = "el-kp"
    broker, mine = unbalanced_topic(cluster, topic, 6, pick=-1)

    request = ElectLeadersRequest(election_type=0, topic_partitions=[(topic, [0, 1, 2, 3, 4, 5])], timeout_ms=20000)
    with RawConnection(client_port(cluster, broker)) as connection:  # not the controller
        refused = connection.request(request, 1)
    (result,) = refused.replica_election_results
    assert {p.error_code for p in result.partition_result} == {NOT_CONTROLLER}

    client = KafkaAdminClient(bootstrap_servers=bootstrap(cluster).split(","), request_timeout_ms=30000)
    try:
        response = client.elect_leaders(0, {topic: list(range(6))}, timeout_ms=20000, raise_errors=False)
    finally:
        client.close()
    (result,) = response.replica_election_results
    assert {p.partition_id: p.error_code for p in result.partition_result} == {
        p: 0 if p in mine else ELECTION_NOT_NEEDED for p in range(6)}
    assert all(led_by_preferred(cluster, topic).values())

    # v0 (no election type: always preferred), to the controller
    with RawConnection(client_port(cluster, cluster.controller())) as connection:
        v0 = connection.request(ElectLeadersRequest(topic_partitions=[(topic, [0])], timeout_ms=5000), 0)
    assert [p.error_code for p in v0.replica_election_results[0].partition_result] == [ELECTION_NOT_NEEDED]


def test_preferred_replica_election_znode_is_done_and_deleted(cluster):
    topic = "el-zk"
    _, mine = unbalanced_topic(cluster, topic, 3)
    zk_call(cluster.zk_connect, lambda zk: zk.create(
        PreferredReplicaElectionZNode.path, PreferredReplicaElectionZNode.encode([(topic, p) for p in range(3)])))
    wait_until(lambda: zk_call(cluster.zk_connect, lambda zk: zk.exists(PreferredReplicaElectionZNode.path)) is None,
               15, "the controller to delete /admin/preferred_replica_election")
    assert all(led_by_preferred(cluster, topic)[p] for p in mine)


def test_unclean_election_elects_a_replica_out_of_the_isr(cluster):
    a, b = followers(cluster)
    topic = "el-unclean"
    zk_call(cluster.zk_connect, lambda zk: zk_create_topic(zk, topic, 1, 2, assignment={0: [a, b]}))
    wait_until(lambda: cluster.state([topic]).partition(topic, 0).isr == [a, b], 20, f"{topic} to have ISR [a, b]")
    cluster.kill9(b)
    wait_until(lambda: cluster.state([topic]).partition(topic, 0).isr == [a], 20, f"{b} to leave the ISR")
    cluster.kill9(a)
    wait_until(lambda: cluster.state([topic]).partition(topic, 0).leader == -1, 20, f"{topic} to go offline")
    cluster.start(b)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
        tp = TopicPartition(topic, 0)
        preferred = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)
        assert preferred[tp].code() == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE  # broker a is dead
        assert admin.elect_leaders(ElectionType.UNCLEAN, [tp]).result(30) == {tp: None}
        state = cluster.state([topic]).partition(topic, 0)
        assert (state.leader, state.isr) == (b, [b])
    finally:
        cluster.start(a)


def test_cli_elects_and_says_which_partitions_needed_it(cluster, capsys):
    topic = "el-cli"
    _, mine = unbalanced_topic(cluster, topic, 3)

    assert main(["--data-dir", str(cluster.data_dir), "leaders", "elect", "--topic", topic]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "LEADER", "RESULT"]
    rows = {int(line.split()[1]): line for line in lines[1:]}
    assert sorted(rows) == [0, 1, 2]
    for p, line in rows.items():
        assert ("elected" if p in mine else "not needed") in line
    assert all(led_by_preferred(cluster, topic).values())

    # every partition: the earlier tests' bounces left some led elsewhere; once they are elected, none is left
    assert main(["--data-dir", str(cluster.data_dir), "leaders", "elect"]) == 0
    assert "not needed" not in capsys.readouterr().out
    assert main(["--data-dir", str(cluster.data_dir), "leaders", "elect"]) == 0
    assert "no election needed" in capsys.readouterr().out
    assert main(["--data-dir", str(cluster.data_dir), "leaders", "elect", "--topic", "el-nope"]) == 2
    assert "topic el-nope does not exist" in capsys.readouterr().err
    assert main(["--data-dir", str(cluster.data_dir), "leaders", "elect", "--topic", topic, "--partition", "9"]) == 2
    assert "no partition 9" in capsys.readouterr().err

