import json

import pytest

from zk.znodes import (
    BrokerIdZNode,
    BrokerRegistration,
    ClusterIdZNode,
    ControllerEpochZNode,
    ControllerZNode,
    IsrChangeNotificationZNode,
    PreferredReplicaElectionZNode,
    LeaderIsrAndControllerEpoch,
    ProducerIdBlock,
    ProducerIdBlockZNode,
    TopicConfigZNode,
    TopicPartitionStateZNode,
    TopicZNode,
    ReassignPartitionsZNode,
    ZNodeDecodeError,
)


def test_controller_payload_is_kafkas_v1_json_with_string_timestamp():
    body = json.loads(ControllerZNode.encode(3))
    assert set(body) == {"version", "brokerid", "timestamp"}
    assert body["version"] == 1 and body["brokerid"] == 3
    assert isinstance(body["timestamp"], str) and body["timestamp"].isdigit()
    assert b" " not in ControllerZNode.encode(3)  # Kafka writes compact JSON


def test_controller_reader_accepts_any_key_order_and_newer_versions():
    info = ControllerZNode.decode(b'{"timestamp":"1","kraftControllerEpoch":-1,"brokerid":7,"version":2}')
    assert info.brokerid == 7


def test_controller_epoch_is_a_plain_integer_not_json():
    assert ControllerEpochZNode.encode(5) == b"5"
    assert ControllerEpochZNode.decode(b"12") == 12
    with pytest.raises(ZNodeDecodeError):
        ControllerEpochZNode.decode(b'{"epoch":1}')


def test_broker_registration_v5_fields_and_types():
    reg = BrokerRegistration(host="b1", port=9092, endpoints=["PLAINTEXT://b1:9092", "CLUSTER://b1:9192"],
                             listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT", "CLUSTER": "PLAINTEXT"})
    body = json.loads(BrokerIdZNode.encode(reg))
    assert set(body) == {"version", "host", "port", "jmx_port", "timestamp", "endpoints",
                         "listener_security_protocol_map", "features"}
    assert body["version"] == 5 and body["jmx_port"] == -1 and isinstance(body["timestamp"], str)
    assert "rack" not in body  # only written when broker.rack is set
    assert BrokerIdZNode.decode(1, BrokerIdZNode.encode(reg)).endpoint("CLUSTER") == ("b1", 9192)


def test_broker_registration_reads_kafkas_own_example():
    kafka_written = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                     b'"endpoints":["PLAINTEXT://b1:9092"],"jmx_port":-1,"host":"b1","timestamp":"1633000000000",'
                     b'"port":9092,"version":5}')
    reg = BrokerIdZNode.decode(1, kafka_written)
    assert reg.endpoint("PLAINTEXT") == ("b1", 9092) and reg.port == 9092


def test_topic_assignment_uses_string_partition_keys():
    body = json.loads(TopicZNode.encode({0: [1, 2, 3], 1: [2, 3, 1]}))
    assert body == {"version": 2, "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
                    "adding_replicas": {}, "removing_replicas": {}}
    decoded = TopicZNode.decode("t", b'{"partitions":{"1":[2,3,1],"0":[1,2,3]},"version":1}')
    assert decoded.partitions == {0: [1, 2, 3], 1: [2, 3, 1]}


def test_a_partition_being_reassigned_lists_its_adding_and_removing_replicas_as_kafka_2_8_writes_them():
    body = json.loads(TopicZNode.encode({0: [2, 3, 4, 1], 1: [2, 3, 1]}, {0: [4], 1: []}, {0: [1]}))
    assert body == {"version": 2, "partitions": {"0": [2, 3, 4, 1], "1": [2, 3, 1]},
                    "adding_replicas": {"0": [4]}, "removing_replicas": {"0": [1]}}
    kafka_written = (b'{"version":2,"partitions":{"0":[4,5,6,1,2,3]},"adding_replicas":{"0":[4,5,6]},'
                     b'"removing_replicas":{"0":[1,2,3]}}')
    decoded = TopicZNode.decode("t", kafka_written)
    assert decoded.adding_replicas == {0: [4, 5, 6]} and decoded.removing_replicas == {0: [1, 2, 3]}


def test_reassign_partitions_request_is_kafka_2_x_json_and_extra_fields_are_ignored():
    assert json.loads(ReassignPartitionsZNode.encode({("t", 0): [2, 3, 4]})) == {
        "version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}]}
    tool_written = (b'{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[3,4,1],'
                    b'"log_dirs":["any","any","any"]}]}')
    assert ReassignPartitionsZNode.decode(tool_written) == {("t", 1): [3, 4, 1]}
    with pytest.raises(ZNodeDecodeError):
        ReassignPartitionsZNode.decode(b'{"version":1,"partitions":[{"topic":"t"}]}')


def test_partition_state_json_matches_kafka():
    state = LeaderIsrAndControllerEpoch(leader=1, leader_epoch=7, isr=[1, 2, 3], controller_epoch=3)
    assert json.loads(TopicPartitionStateZNode.encode(state)) == {
        "controller_epoch": 3, "leader": 1, "version": 1, "leader_epoch": 7, "isr": [1, 2, 3]}
    again = TopicPartitionStateZNode.decode("t", 0, b'{"isr":[1,2,3],"leader_epoch":7,"version":1,'
                                                   b'"leader":1,"controller_epoch":3}')
    assert again == state


def test_isr_change_notification_and_config_and_cluster_id():
    assert json.loads(IsrChangeNotificationZNode.encode([("t", 0)])) == {
        "version": 1, "partitions": [{"topic": "t", "partition": 0}]}
    assert json.loads(TopicConfigZNode.encode({"retention.ms": "1000"})) == {
        "version": 1, "config": {"retention.ms": "1000"}}
    assert json.loads(ClusterIdZNode.encode("abc")) == {"version": "1", "id": "abc"}
    assert ClusterIdZNode.decode(b'{"id":"xyz","version":"1"}') == "xyz"


def test_preferred_replica_election_is_kafkas_json_as_the_zookeeper_tools_write_it():
    assert json.loads(PreferredReplicaElectionZNode.encode([("t", 0), ("u", 2)])) == {
        "version": 1, "partitions": [{"topic": "t", "partition": 0}, {"topic": "u", "partition": 2}]}
    assert PreferredReplicaElectionZNode.decode(b'{"partitions":[{"partition":1,"topic":"t"}],"version":1}') == [
        ("t", 1)]
    with pytest.raises(ZNodeDecodeError):
        PreferredReplicaElectionZNode.decode(b'{"version":1}')


@pytest.mark.parametrize("junk", [b"", b"not json", b"[1,2]", b'{"leader":"x"}', b"\xff\xfe"])
def test_junk_payloads_raise_a_clear_decode_error(junk):
    with pytest.raises(ZNodeDecodeError) as info:
        TopicPartitionStateZNode.decode("t", 0, junk)
    assert "/brokers/topics/t/partitions/0/state" in str(info.value)


def test_producer_id_block_is_kafkas_json_with_string_ends_and_empty_means_unclaimed():
    encoded = ProducerIdBlockZNode.encode(ProducerIdBlock(broker=2, block_start=1000, block_end=1999))
    assert encoded == b'{"version":1,"broker":2,"block_start":"1000","block_end":"1999"}'
    kafka_written = b'{"block_end":"999","broker":1,"version":1,"block_start":"0"}'
    assert ProducerIdBlockZNode.decode(kafka_written) == ProducerIdBlock(broker=1, block_start=0, block_end=999)
    assert ProducerIdBlockZNode.decode(b"") is None and ProducerIdBlockZNode.decode(None) is None


@pytest.mark.parametrize("junk", [b"nope", b'{"version":1,"broker":1,"block_start":"x","block_end":"9"}',
                                  b'{"version":1,"broker":1,"block_start":"9","block_end":"0"}',
                                  b'{"version":1,"broker":1,"block_start":"0"}'])
def test_junk_producer_id_blocks_raise_a_clear_decode_error(junk):
    with pytest.raises(ZNodeDecodeError) as info:
        ProducerIdBlockZNode.decode(junk)
    assert "/latest_producer_id_block" in str(info.value)
