"""Topic administration with unmodified admin clients: CreateTopics and DeleteTopics (answered by the
controller only, as in Kafka's ZooKeeper mode), DescribeConfigs, and topic auto-creation."""

import json

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KafkaConfigResource
from kafka.admin import ConfigResourceType
from kafka.admin import NewTopic as KafkaNewTopic
from kafka.errors import (
    InvalidConfigurationError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafka.protocol.admin import CreateTopicsRequest

from tests.client.support import RawConnection, bootstrap, create_topic, retrying, wait_until
from tests.harness import zk_call

pytestmark = [pytest.mark.processes, pytest.mark.slow]

NOT_CONTROLLER = 41


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


@pytest.fixture
def admin(cluster):
    return AdminClient({"bootstrap.servers": bootstrap(cluster)})


@pytest.fixture
def kafka_admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=bootstrap(cluster).split(","), request_timeout_ms=20000)
    yield client
    client.close()


def topic_in_zookeeper(cluster, name: str) -> bool:
    return zk_call(cluster.zk_connect, lambda zk: zk.exists(f"/brokers/topics/{name}")) is not None


def outcome(futures: dict) -> dict:
    """Each topic's result: None when it succeeded, else the Kafka error name."""
    results = {}
    for name, future in futures.items():
        try:
            future.result(timeout=30)
            results[name] = None
        except KafkaException as exc:
            results[name] = exc.args[0].name()
    return results


def test_confluent_admin_creates_validates_and_deletes_topics(cluster, admin):
    assert outcome(admin.create_topics([NewTopic("ck-checked", 2, 1)], validate_only=True)) == {"ck-checked": None}
    assert not topic_in_zookeeper(cluster, "ck-checked")

    created = admin.create_topics([NewTopic("ck-made", 3, 1, config={"retention.ms": "123456"})],
                                  operation_timeout=20)
    assert outcome(created) == {"ck-made": None}
    # answered once the controller's metadata has leaders; the other brokers learn it a moment later
    partitions = wait_until(lambda: admin.list_topics("ck-made", timeout=15).topics["ck-made"].partitions, 15,
                            "every broker to know ck-made")
    assert sorted(partitions) == [0, 1, 2] and all(p.leader >= 1 and len(p.replicas) == 1
                                                  for p in partitions.values())
    assert json.loads(cluster.raw("/config/topics/ck-made")[0])["config"] == {"retention.ms": "123456"}

    assert outcome(admin.create_topics([NewTopic("ck-made", 1, 1)])) == {"ck-made": "TOPIC_ALREADY_EXISTS"}
    assert outcome(admin.create_topics([NewTopic("ck-too-many", 1, 4)])) == {
        "ck-too-many": "INVALID_REPLICATION_FACTOR"}
    assert outcome(admin.create_topics([NewTopic("ck-bad-config", 1, 1, config={"retention.msec": "1"})])) == {
        "ck-bad-config": "INVALID_CONFIG"}
    assert not topic_in_zookeeper(cluster, "ck-too-many") and not topic_in_zookeeper(cluster, "ck-bad-config")

    assert outcome(admin.delete_topics(["ck-made"], operation_timeout=20)) == {"ck-made": None}
    wait_until(lambda: "ck-made" not in admin.list_topics(timeout=15).topics, 15, "ck-made to leave the metadata")
    wait_until(lambda: not topic_in_zookeeper(cluster, "ck-made"), 15, "the controller to finish the deletion")
    assert outcome(admin.delete_topics(["ck-never"], operation_timeout=20)) == {"ck-never": "UNKNOWN_TOPIC_OR_PART"}


def test_kafka_python_admin_creates_validates_and_deletes_topics(cluster, kafka_admin):
    checked = kafka_admin.create_topics([KafkaNewTopic("kp-checked", 2, 1)], validate_only=True)
    assert [(t["name"], t["error_code"]) for t in checked["topics"]] == [("kp-checked", 0)]
    assert not topic_in_zookeeper(cluster, "kp-checked")

    made = kafka_admin.create_topics([KafkaNewTopic("kp-made", 2, 1, topic_configs={"retention.ms": "999"})])
    assert [(t["name"], t["error_code"]) for t in made["topics"]] == [("kp-made", 0)]
    wait_until(lambda: kafka_admin.describe_topics(["kp-made"])[0]["error_code"] == 0, 15, "kp-made in metadata")
    assert [p.partition for p in cluster.state(["kp-made"]).partitions] == [0, 1]

    with pytest.raises(TopicAlreadyExistsError):
        kafka_admin.create_topics([KafkaNewTopic("kp-made", 1, 1)])
    with pytest.raises(InvalidReplicationFactorError):
        kafka_admin.create_topics([KafkaNewTopic("kp-too-many", 1, 4)])
    with pytest.raises(InvalidConfigurationError, match=r"retention\.msec"):
        kafka_admin.create_topics([KafkaNewTopic("kp-bad-config", 1, 1, topic_configs={"retention.msec": "1"})])
    assert not topic_in_zookeeper(cluster, "kp-too-many") and not topic_in_zookeeper(cluster, "kp-bad-config")

    deleted = kafka_admin.delete_topics(["kp-made"])
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [("kp-made", 0)]
    wait_until(lambda: "kp-made" not in kafka_admin.list_topics(), 15, "kp-made to leave the metadata")
    with pytest.raises(UnknownTopicOrPartitionError):
        kafka_admin.delete_topics(["kp-never"])


def test_create_topics_sent_to_a_broker_that_is_not_the_controller_is_refused(cluster):
    controller = cluster.controller()
    other = next(b for b in cluster.spec.brokers if b.broker_id != controller)
    topic = CreateTopicsRequest.CreatableTopic(name="not-here", num_partitions=1, replication_factor=1,
                                               assignments=[], configs=[])
    with RawConnection(other.client_port) as connection:
        reply = connection.request(CreateTopicsRequest(topics=[topic], timeout_ms=10000, validate_only=False), 4)
    assert [(t.name, t.error_code) for t in reply.topics] == [("not-here", NOT_CONTROLLER)]
    assert not topic_in_zookeeper(cluster, "not-here")


def test_describe_configs_shows_a_topic_override_and_the_broker_settings(cluster, admin, kafka_admin):
    create_topic(cluster, "configured", 1, config={"retention.ms": "3600000"})
    (topic_configs,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "configured")]).values()
    entries = topic_configs.result(timeout=15)
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value and entries["segment.bytes"].is_default

    (broker_configs,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "2")]).values()
    broker = broker_configs.result(timeout=15)
    assert broker["broker.id"].value == "2"
    assert broker["zookeeper.session.timeout.ms"].value == "2000"  # the classroom profile's value

    # kafka-python lists only what differs from the defaults unless asked for everything
    described = kafka_admin.describe_configs([KafkaConfigResource(ConfigResourceType.TOPIC, "configured")])
    assert described["topic"]["configured"] == {"retention.ms": {
        "value": "3600000", "read_only": False, "config_source": "DYNAMIC_TOPIC_CONFIG", "is_sensitive": False,
        "synonyms": [], "config_type": "UNKNOWN", "documentation": None}}
    everything = kafka_admin.describe_configs([KafkaConfigResource(ConfigResourceType.BROKER, "3")],
                                              config_filter="all")
    assert everything["broker"]["3"]["broker.id"]["value"] == "3"
    assert everything["broker"]["3"]["auto.create.topics.enable"]["config_source"] == "DEFAULT_CONFIG"


def test_describe_configs_of_an_unknown_topic_says_so(admin):
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "no-such-topic")]).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=15)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_a_producer_to_an_unknown_topic_creates_it_with_the_broker_defaults(cluster):
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    reports = []
    producer.produce("born-on-produce", value=b"first",
                     on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(30) == 0
    assert reports == [(None, 0)]
    state = cluster.state(["born-on-produce"])
    # num.partitions=1 and default.replication.factor=1, Kafka's defaults
    assert [(p.partition, len(p.replicas)) for p in state.partitions] == [(0, 1)]


def test_a_confluent_consumer_does_not_create_the_unknown_topic_it_asks_about(cluster):
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "client-tests",
                         "allow.auto.create.topics": False, "enable.auto.commit": False})
    try:
        metadata = retrying(lambda: consumer.list_topics("not-wanted", timeout=15), "the consumer's metadata")
    finally:
        consumer.close()
    assert metadata.topics["not-wanted"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # the broker answers Metadata only after any auto-creation it decided on was written to ZooKeeper
    assert not topic_in_zookeeper(cluster, "not-wanted")
