"""CreatePartitions on a real cluster: confluent-kafka's AdminClient grows a topic, the controller's data watch on
/brokers/topics/<t> takes the new partitions online with Kafka's placement, clients write to and read from them;
Kafka's errors (also through kafka-python); a topic being deleted; a controller failover after the growth;
`kafkasim topic alter`."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka.protocol.admin import CreatePartitionsRequest

from tests.client.support import RawConnection, bootstrap, client_port, confluent_consume, create_topic
from tests.harness import RunningCluster, module_cluster, wait_until, zk_call, znode_json
from traces import events as te
from zk.admin import create_topic as zk_create_topic
from zk.admin import delete_topic as zk_delete_topic
from zk.assignment import assign_added_partitions
from zk.znodes import TopicZNode

pytestmark = [pytest.mark.processes, pytest.mark.slow]

INVALID_REQUEST = 42
NOT_CONTROLLER = 41


# its own cluster: the failover test kills the controller
cluster = module_cluster("partitions-cluster")


@pytest.fixture
def admin(cluster):
    # one per test: a client kept across the controller failover test would send to the controller it knew
    return AdminClient({"bootstrap.servers": bootstrap(cluster)})


def grow(admin: AdminClient, topic: str, count: int, assignment: list[list[int]] | None = None,
         validate_only: bool = False) -> None:
    # confluent-kafka refuses replica_assignment=None
    new = NewPartitions(topic, count, **({} if assignment is None else {"replica_assignment": assignment}))
    futures = admin.create_partitions([new], request_timeout=30, validate_only=validate_only)
    futures[topic].result(timeout=60)


def refused(admin: AdminClient, topic: str, count: int, assignment: list[list[int]] | None = None) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        grow(admin, topic, count, assignment)
    return raised.value.args[0]


def assignment_in_zookeeper(cluster: RunningCluster, topic: str) -> dict[int, list[int]]:
    return {int(p): r for p, r in znode_json(cluster, f"/brokers/topics/{topic}")["partitions"].items()}


def produce(cluster: RunningCluster, topic: str, partition: int, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


def fully_replicated(cluster: RunningCluster, topic: str, count: int) -> bool:
    partitions = cluster.state([topic]).partitions
    return len(partitions) == count and all(p.leader >= 0 and sorted(p.isr) == sorted(p.replicas)
                                            for p in partitions)


def test_a_topic_grows_from_3_to_6_partitions_with_kafkas_placement_and_carries_data(cluster, admin):
    topic = "grow"
    create_topic(cluster, topic, 3, 3)
    for p in range(3):
        produce(cluster, topic, p, [f"old-{p}-{i}".encode() for i in range(5)])
    before = assignment_in_zookeeper(cluster, topic)
    old_leaders = {p.partition: p.leader for p in cluster.state([topic]).partitions}

    grow(admin, topic, 6)

    # the answer waited for the new partitions' leaders in the answering broker's metadata
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 6
    brokers = [b.broker_id for b in cluster.spec.brokers]
    after = assignment_in_zookeeper(cluster, topic)
    assert {p: after[p] for p in range(3)} == before
    assert {p: after[p] for p in range(3, 6)} == assign_added_partitions(brokers, before, 6)
    wait_until(lambda: fully_replicated(cluster, topic, 6), 30, f"{topic}'s 6 partitions with a full ISR")
    state = {p.partition: p for p in cluster.state([topic]).partitions}
    assert {p: state[p].leader for p in range(3)} == old_leaders
    assert all(state[p].leader == after[p][0] and state[p].leader_epoch == 0 for p in range(3, 6))

    produce(cluster, topic, 5, [b"new-0", b"new-1"])
    assert [v for _, v in confluent_consume(cluster, topic, [5], 2)[5]] == [b"new-0", b"new-1"]
    old = confluent_consume(cluster, topic, [0, 1, 2], 15)
    assert {p: [v for _, v in records] for p, records in old.items()} == {
        p: [f"old-{p}-{i}".encode() for i in range(5)] for p in range(3)}
    added = [e for e in cluster.all_traces() if isinstance(e, te.PartitionsAdded) and e.topic == topic]
    assert [sorted(e.assignment) for e in added] == [[3, 4, 5]]


def test_fewer_or_as_many_partitions_are_refused_with_kafkas_words(cluster, admin):
    create_topic(cluster, "no-shrink", 3, 3)
    fewer = refused(admin, "no-shrink", 2)
    assert fewer.code() == KafkaError.INVALID_PARTITIONS
    assert "Topic currently has 3 partitions, which is higher than the requested 2." in fewer.str()
    same = refused(admin, "no-shrink", 3)
    assert same.code() == KafkaError.INVALID_PARTITIONS and "Topic already has 3 partitions." in same.str()


def test_validate_only_changes_nothing(cluster, admin):
    create_topic(cluster, "validated", 2, 3)
    before = znode_json(cluster, "/brokers/topics/validated")
    grow(admin, "validated", 5, validate_only=True)
    assert znode_json(cluster, "/brokers/topics/validated") == before
    assert len(cluster.state(["validated"]).partitions) == 2
    # a bad request is refused under validate_only as well
    with pytest.raises(KafkaException) as raised:
        grow(admin, "validated", 1, validate_only=True)
    assert raised.value.args[0].code() == KafkaError.INVALID_PARTITIONS


@pytest.mark.parametrize(("assignment", "words"), [
    ([[1, 2, 9]], "Unknown broker(s) in replica assignment: 9."),
    ([[1, 1, 2]], "Duplicate brokers not allowed"),
    ([[1, 2]], "partition 0 has 3 while partition 2 has 2"),
    ([[1, 2, 3], [2, 3, 1]], "Increasing the number of partitions by 1 but 2 assignments provided."),
])
def test_a_bad_explicit_assignment_is_refused(cluster, admin, assignment, words):
    if "bad-assignment" not in admin.list_topics(timeout=10).topics:
        create_topic(cluster, "bad-assignment", 2, 3)
    error = refused(admin, "bad-assignment", 3, assignment)
    assert error.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, error
    assert words in error.str()
    assert len(assignment_in_zookeeper(cluster, "bad-assignment")) == 2


def test_an_explicit_assignment_is_written_as_given(cluster, admin):
    create_topic(cluster, "placed", 1, 2)
    grow(admin, "placed", 3, [[3, 1], [2, 3]])
    assert {p: r for p, r in assignment_in_zookeeper(cluster, "placed").items() if p > 0} == {1: [3, 1], 2: [2, 3]}
    wait_until(lambda: fully_replicated(cluster, "placed", 3), 30, "placed's 3 partitions with a full ISR")
    assert [p.leader for p in cluster.state(["placed"]).partitions][1:] == [3, 2]


def test_kafka_python_grows_a_topic_and_reads_kafkas_errors(cluster):
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KafkaNewPartitions
    from kafka.errors import InvalidPartitionsError

    create_topic(cluster, "kp-grow", 2, 2)
    client = KafkaAdminClient(bootstrap_servers=bootstrap(cluster).split(","), request_timeout_ms=30000)
    try:
        client.create_partitions({"kp-grow": KafkaNewPartitions(total_count=4)}, timeout_ms=30000)
        assert len(assignment_in_zookeeper(cluster, "kp-grow")) == 4
        wait_until(lambda: fully_replicated(cluster, "kp-grow", 4), 30, "kp-grow's 4 partitions with a full ISR")
        with pytest.raises(InvalidPartitionsError, match=r"Topic already has 4 partitions\."):
            client.create_partitions({"kp-grow": KafkaNewPartitions(total_count=4)})
    finally:
        client.close()


def test_an_unknown_topic_is_refused(cluster, admin):
    assert refused(admin, "never-created", 4).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_only_the_controller_answers_and_a_topic_named_twice_is_an_invalid_request(cluster):
    create_topic(cluster, "twice", 1, 1)
    request = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name="twice", count=2, assignments=None)] * 2, timeout_ms=10000, validate_only=False)
    controller = cluster.controller()
    with RawConnection(client_port(cluster, controller)) as connection:
        reply = connection.request(request, 1)
        assert [(r.name, r.error_code) for r in reply.results] == [("twice", INVALID_REQUEST)] * 2
        flexible = connection.request(request, 3)  # v2-3: the flexible encoding, v3 may say THROTTLING_QUOTA_EXCEEDED
        assert [(r.name, r.error_code) for r in flexible.results] == [("twice", INVALID_REQUEST)] * 2
    other = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != controller)
    with RawConnection(client_port(cluster, other)) as connection:
        reply = connection.request(request, 0)
    assert {r.error_code for r in reply.results} == {NOT_CONTROLLER}
    assert len(assignment_in_zookeeper(cluster, "twice")) == 1


def test_after_a_controller_failover_the_added_partitions_are_led_and_the_topic_grows_again(cluster, admin):
    topic = "grow-failover"
    create_topic(cluster, topic, 3, 3)
    grow(admin, topic, 6)
    wait_until(lambda: fully_replicated(cluster, topic, 6), 30, f"{topic}'s 6 partitions with a full ISR")
    old_controller = cluster.controller()
    cluster.kill9(old_controller)
    wait_until(lambda: cluster.controller() not in (-1, old_controller), 30, "a new controller")
    wait_until(lambda: all(p.leader not in (-1, old_controller) for p in cluster.state([topic]).partitions), 30,
               f"every partition of {topic} led by a live broker")
    cluster.start(old_controller)
    wait_until(lambda: fully_replicated(cluster, topic, 6), 60, f"broker {old_controller} back in every ISR")
    # the new controller armed the data watch when it loaded the topic
    grow(AdminClient({"bootstrap.servers": bootstrap(cluster)}), topic, 8)
    wait_until(lambda: fully_replicated(cluster, topic, 8), 30, f"{topic}'s 8 partitions with a full ISR")
    produce(cluster, topic, 7, [b"after-failover"])
    assert confluent_consume(cluster, topic, [7], 1)[7][0][1] == b"after-failover"


def test_kafkasim_topic_alter_adds_partitions_through_zookeeper(cluster, capsys):
    from cluster.cli import main

    create_topic(cluster, "cli-grow", 2, 3)
    assert main(["--data-dir", str(cluster.data_dir), "topic", "alter", "cli-grow", "--partitions", "4"]) == 0
    assert "added partitions 2:[" in capsys.readouterr().out
    wait_until(lambda: fully_replicated(cluster, "cli-grow", 4), 30, "cli-grow's 4 partitions with a full ISR")
    assert main(["--data-dir", str(cluster.data_dir), "topic", "alter", "cli-grow", "--partitions", "3"]) == 2
    assert "Topic currently has 4 partitions, which is higher than the requested 3." in capsys.readouterr().err


def test_a_topic_being_deleted_gets_no_partitions(cluster, admin):
    """Its deletion waits for a dead broker's replica: CreatePartitions is refused, and partitions written into its
    znode by hand are taken out again by the controller (Kafka's restorePartitionReplicaAssignment)."""
    topic = "doomed"
    broker = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != cluster.controller())
    zk_call(cluster.zk_connect, lambda zk: zk_create_topic(zk, topic, 1, 1, assignment={0: [broker]}))
    wait_until(lambda: [p.leader for p in cluster.state([topic]).partitions] == [broker], 30, f"{topic} led")
    cluster.kill9(broker)
    try:
        # the controller must know the broker is dead, or it would go ahead with the deletion
        wait_until(lambda: [p.leader for p in cluster.state([topic]).partitions] == [-1], 30,
                   f"{topic} offline with broker {broker}")
        zk_call(cluster.zk_connect, lambda zk: zk_delete_topic(zk, topic))
        error = refused(admin, topic, 2)
        assert error.code() == KafkaError.TOPIC_EXCEPTION and "The topic is queued for deletion." in error.str()
        grown = TopicZNode.encode({0: [broker], 1: [broker]})
        zk_call(cluster.zk_connect, lambda zk: zk.set(TopicZNode.path(topic), grown))
        wait_until(lambda: assignment_in_zookeeper(cluster, topic) == {0: [broker]}, 30,
                   f"the controller to restore {topic}'s assignment")
    finally:
        cluster.start(broker)
    wait_until(lambda: zk_call(cluster.zk_connect, lambda zk: zk.exists(TopicZNode.path(topic))) is None, 30,
               f"{topic} deleted once broker {broker} is back")
