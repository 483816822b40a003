"""The internal topics at their configured replication factor (KIP-115, KAFKA-3959): while fewer brokers are alive
than offsets.topic.replication.factor / transaction.state.log.replication.factor ask for, FindCoordinator answers
COORDINATOR_NOT_AVAILABLE, nothing is created in ZooKeeper and the broker logs why; once the broker is back, the
waiting consumer and transactional producer get a coordinator on a topic with every replica. A one-broker cluster
works with the three settings at 1, which `kafkasim up --brokers 1` sets as Kafka's single-node examples do."""

from __future__ import annotations

import threading
import uuid
import warnings

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from broker.group.manager import OFFSETS_TOPIC
from broker.transaction.coordinator import TRANSACTION_STATE_TOPIC
from cluster.lifecycle import SINGLE_BROKER_OVERRIDES, with_single_broker_settings
from tests.client.support import RawConnection, bootstrap, client_port, consume, create_topic
from tests.harness import RunningCluster, module_cluster, wait_until, znode_json, zk_call

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.metadata import FindCoordinatorRequest

pytestmark = [pytest.mark.processes, pytest.mark.slow]

cluster = module_cluster("internal-topic-replication")

COORDINATOR_NOT_AVAILABLE = 15
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1
MIN_ISR = "2"  # transaction.state.log.min.isr's default


def find_coordinator(cluster: RunningCluster, broker_id: int, key: str, key_type: int) -> tuple[int, str]:
    with RawConnection(client_port(cluster, broker_id)) as connection:
        reply = connection.request(FindCoordinatorRequest(key=key, key_type=key_type), 1)
    return reply.error_code, reply.error_message


def topic_exists(cluster: RunningCluster, topic: str) -> bool:
    return zk_call(cluster.zk_connect, lambda zk: zk.exists(f"/brokers/topics/{topic}")) is not None


def registered(cluster: RunningCluster) -> set[int]:
    return {b.broker_id for b in cluster.state(topics=[]).brokers}


def kill_a_follower_broker(cluster: RunningCluster) -> int:
    """kill -9 of a broker that is not the controller, and wait until its registration is gone from ZooKeeper (the
    session expires): until then the others would count it alive."""
    victim = next(b.broker_id for b in reversed(cluster.spec.brokers) if b.broker_id != cluster.controller())
    cluster.kill9(victim)
    wait_until(lambda: victim not in registered(cluster), 30, f"broker {victim}'s registration to go")
    return victim


def refusals(cluster: RunningCluster, broker_ids: list[int], what: str, prop: str) -> int:
    """How many times the brokers logged Kafka's refusal for the internal topic ``what``."""
    line = (f"Number of alive brokers '2' does not meet the required replication factor '3' for the {what} "
            f"(configured via '{prop}')")
    return sum(cluster.layout.broker_log(b).read_text().count(line) for b in broker_ids)


def replicas_and_config(cluster: RunningCluster, topic: str) -> tuple[set[int], dict[str, str]]:
    partitions = cluster.state([topic]).partitions
    return {len(p.replicas) for p in partitions}, znode_json(cluster, f"/config/topics/{topic}")["config"]


OFFSETS = ("offsets topic", "offsets.topic.replication.factor")
TRANSACTION_STATE = ("transactions state topic", "transaction.state.log.replication.factor")


def test_a_consumer_waits_for_the_third_broker_and_its_group_gets_an_offsets_topic_with_three_replicas(
        cluster: RunningCluster):
    topic = "waits-for-three"
    create_topic(cluster, topic, 1, 3)
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    producer.produce(topic, b"first", partition=0)
    assert producer.flush(30) == 0
    group = f"patient-{uuid.uuid4().hex[:6]}"
    victim = kill_a_follower_broker(cluster)
    # made only now: librdkafka looks for a group's coordinator as soon as the consumer exists
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        alive = [b.broker_id for b in cluster.spec.brokers if b.broker_id != victim]
        assert find_coordinator(cluster, alive[0], group, GROUP_KEY_TYPE) == (
            COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} needs 3 live brokers (offsets.topic.replication.factor); "
                                       f"2 are alive")
        refused = refusals(cluster, alive, *OFFSETS)
        assert refused >= 1, "the broker logs why it creates no offsets topic"

        consumer.subscribe([topic])

        def refused_again() -> bool:
            message = consumer.poll(0.2)
            assert message is None or message.error() is not None, "a message while no coordinator could exist"
            return refusals(cluster, alive, *OFFSETS) > refused
        wait_until(refused_again, 30, "the consumer's own FindCoordinator to be refused")
        assert consumer.assignment() == [] and not topic_exists(cluster, OFFSETS_TOPIC)
    finally:
        cluster.start(victim)
    try:
        def first_message():
            message = consumer.poll(0.5)
            return message is not None and message.error() is None and message
        message = wait_until(first_message, 90, "the consumer to get a coordinator, join its group and read")
        assert message.value() == b"first"
        consumer.commit(message=message, asynchronous=False)
    finally:
        consumer.close()
    replicas, config = replicas_and_config(cluster, OFFSETS_TOPIC)
    assert replicas == {3}, "every __consumer_offsets partition has offsets.topic.replication.factor replicas"
    assert config["cleanup.policy"] == "compact"


def test_init_transactions_waits_for_the_third_broker_and_the_state_topic_has_three_replicas_and_its_min_isr(
        cluster: RunningCluster):
    topic = "txn-waits-for-three"
    create_topic(cluster, topic, 1, 3)
    transactional_id = f"patient-tx-{uuid.uuid4().hex[:6]}"
    victim = kill_a_follower_broker(cluster)
    # made only now, in case librdkafka looks for the coordinator before init_transactions
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": transactional_id,
                         "linger.ms": 5})
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            producer.init_transactions(120)
            outcome.append(None)
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    initializing = threading.Thread(target=init, daemon=True)
    try:
        alive = [b.broker_id for b in cluster.spec.brokers if b.broker_id != victim]
        assert find_coordinator(cluster, alive[0], transactional_id, TRANSACTION_KEY_TYPE) == (
            COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC} needs 3 live brokers "
                                       f"(transaction.state.log.replication.factor); 2 are alive")
        refused = refusals(cluster, alive, *TRANSACTION_STATE)
        assert refused >= 1, "the broker logs why it creates no transaction state topic"
        initializing.start()
        wait_until(lambda: refusals(cluster, alive, *TRANSACTION_STATE) > refused, 30,
                   "the producer's own FindCoordinator to be refused")
        assert outcome == [] and not topic_exists(cluster, TRANSACTION_STATE_TOPIC)
    finally:
        cluster.start(victim)
    initializing.join(130)
    assert outcome == [None], f"init_transactions did not succeed once the broker was back: {outcome}"
    replicas, config = replicas_and_config(cluster, TRANSACTION_STATE_TOPIC)
    assert replicas == {3}, "every __transaction_state partition has transaction.state.log.replication.factor replicas"
    assert config["min.insync.replicas"] == MIN_ISR, "min.insync.replicas is transaction.state.log.min.isr"

    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(60)
    assert consume(cluster, topic, "read_committed", expected=1, linger_s=0.5) == [b"committed"]


def test_one_broker_up_gets_the_single_node_settings_and_the_users_own_win():
    assert with_single_broker_settings(1, None) == SINGLE_BROKER_OVERRIDES
    assert with_single_broker_settings(1, {"transaction.state.log.min.isr": "2"}) == {
        **SINGLE_BROKER_OVERRIDES, "transaction.state.log.min.isr": "2"}
    assert with_single_broker_settings(3, {"x": "y"}) == {"x": "y"}


def test_a_one_broker_cluster_serves_a_group_and_a_transaction(cluster_factory):
    single = cluster_factory(brokers=1)
    topic = "single-node"
    create_topic(single, topic, 1, 1)
    producer = Producer({"bootstrap.servers": bootstrap(single), "transactional.id": "single-node-tx",
                         "linger.ms": 5})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"in-a-transaction", partition=0)
    producer.commit_transaction(60)

    consumer = Consumer({"bootstrap.servers": bootstrap(single), "group.id": "single-node-group",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    try:
        consumer.subscribe([topic])

        def next_value():
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                assert message.error().code() == KafkaError._TRANSPORT, message.error()
                return None
            return message
        message = wait_until(next_value, 60, "the group member to read the committed value")
        assert message.value() == b"in-a-transaction"
        consumer.commit(message=message, asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed[0].offset == message.offset() + 1
    finally:
        consumer.close()
    assert replicas_and_config(single, OFFSETS_TOPIC)[0] == {1}
    replicas, config = replicas_and_config(single, TRANSACTION_STATE_TOPIC)
    assert replicas == {1} and config["min.insync.replicas"] == "1"
