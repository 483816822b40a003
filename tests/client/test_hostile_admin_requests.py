"""Mistaken admin requests as a new user sends them, against a running cluster: refused with Kafka's error, on a
connection that stays open, with nothing allocated or written (docs/hostile-input.md)."""

import struct

import psutil
import pytest
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import PolicyViolationError
from kafka.protocol.admin import DeleteTopicsRequest

from broker.clientplane.protocol.versions import ApiKey
from broker.log.cleaner import codecs
from broker.log.records import Record, build_batch
from tests.client.support import (
    RawConnection,
    create_topic,
    leader_of,
    list_offsets_request,
    produce_request,
)

pytestmark = [pytest.mark.processes]

INT32_MAX = 2**31 - 1
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture(scope="module")
def admin(shared_cluster):
    client = KafkaAdminClient(bootstrap_servers=shared_cluster.spec.bootstrap_servers, request_timeout_ms=20000)
    yield client
    client.close()


def broker_rss(cluster) -> dict[int, int]:
    return {b.broker_id: psutil.Process(cluster.pid(b.broker_id)).memory_info().rss for b in cluster.spec.brokers}


def test_a_topic_of_two_billion_partitions_is_a_policy_violation_and_nothing_is_written(shared_cluster, admin):
    before = broker_rss(shared_cluster)
    with pytest.raises(PolicyViolationError, match=r"max\.broker\.partitions=10000"):
        admin.create_topics([NewTopic("two-billion", INT32_MAX, 3)])
    assert shared_cluster.state(topics=["two-billion"]).partitions == []
    assert "two-billion" not in admin.list_topics()
    after = broker_rss(shared_cluster)
    assert all(after[b] - before[b] < 50 * 2**20 for b in before), (before, after)


def test_growing_a_topic_to_two_billion_partitions_is_refused_and_leaves_it_as_it_was(shared_cluster, admin):
    create_topic(shared_cluster, "grow-me", 2, 1)
    with pytest.raises(PolicyViolationError, match=r"max\.broker\.partitions"):
        admin.create_partitions({"grow-me": NewPartitions(INT32_MAX)})
    assert len(shared_cluster.state(topics=["grow-me"]).partitions) == 2


def test_deleting_a_topic_by_an_illegal_name_answers_unknown_topic_on_an_open_connection(shared_cluster):
    with RawConnection(shared_cluster.spec.broker(shared_cluster.controller()).client_port) as connection:
        for name in ("a/b", "..", "x" * 300, "bad name"):
            response = connection.request(DeleteTopicsRequest(topic_names=[name], timeout_ms=5000), 3)
            assert [(r.name, r.error_code) for r in response.responses] == [(name, UNKNOWN_TOPIC_OR_PARTITION)]


def test_a_create_topics_with_null_assignments_closes_only_its_own_connection(shared_cluster):
    # CreateTopics v4: one topic whose assignments array is null (-1), which the schema does not allow
    topic = struct.pack(">h", 4) + b"null" + struct.pack(">ihii", 1, 1, -1, 0)
    body = struct.pack(">i", 1) + topic + struct.pack(">i?", 5000, False)
    frame = struct.pack(">hhih", ApiKey.CREATE_TOPICS, 4, 9, 1) + b"t" + body
    controller = shared_cluster.controller()
    port = shared_cluster.spec.broker(controller).client_port
    broker_log = shared_cluster.layout.broker_log(controller)
    logged_before = broker_log.stat().st_size
    with RawConnection(port) as bystander, RawConnection(port) as sender:
        sender.send_frame(frame)
        with pytest.raises(ConnectionError):
            sender.read_frame()
        response = bystander.request(DeleteTopicsRequest(topic_names=["no-such-topic"], timeout_ms=5000), 3)
        assert response.responses[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert shared_cluster.state(topics=["null"]).partitions == []
    # refused as malformed by the decoder, as Kafka's generated reader refuses it: no handler saw it (before, the
    # handler raised TypeError on the None kio handed it)
    with broker_log.open("rb") as log:
        log.seek(logged_before)
        assert b"Traceback" not in log.read()


def test_a_gzip_bomb_produced_to_a_compacted_topic_leaves_the_leader_small_and_answering(shared_cluster):
    # one record whose value is 256 MiB of zeros: about 250 KiB once compressed
    create_topic(shared_cluster, "bombed", 1, 1, {"cleanup.policy": "compact"})
    leader = leader_of(shared_cluster, "bombed")
    pid = shared_cluster.pid(leader)
    before = peak_rss(pid)
    timestamp = 1_700_000_000_000
    bomb = build_batch([Record(b"key", bytes(256 * 2**20), timestamp)], compression=codecs.GZIP)
    with RawConnection(shared_cluster.spec.broker(leader).client_port) as connection:
        produced = connection.request(produce_request("bombed", 0, bomb, acks=1), 7)
        assert produced.responses[0].partition_responses[0].error_code == 0
        listed = connection.request(list_offsets_request("bombed", 0, timestamp), 5)
        assert listed.topics[0].partitions[0].offset == 0
    grown = peak_rss(pid) - before
    assert grown < 100 * 2**20, f"the leader's peak RSS grew by {grown / 2**20:.0f} MiB"


def peak_rss(pid: int) -> int:
    """The process's peak resident set so far (VmHWM): a large allocation freed again still shows here."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")
