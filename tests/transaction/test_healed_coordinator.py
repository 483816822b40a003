"""A group coordinator cut off from ZooKeeper, then healed, answers as Apache Kafka 2.8's does
(docs/zombie-coordinator.md, "After healing").

Broker X leads a group's __consumer_offsets partition; the group has offset 5 committed at X. X is cut off from
ZooKeeper, another broker Y takes the partition and the group commits 9 there. Until X hears from the controller it
is Kafka's zombie: its metadata cache still names it leader, so its FindCoordinator names itself and its OffsetFetch
answers 5 from memory. Healed, X's session has expired: it registers again, and the controller's onBrokerStartup sends
it UpdateMetadata (every partition with a leader) before the LeaderAndIsr that makes it a follower and unloads the
group. So X never names itself once it has stopped answering for the group, and within seconds every broker names the
partition's leader, which answers 9; a fresh confluent-kafka consumer's committed() gets 9. A client that asked X just
before the LeaderAndIsr gets NOT_COORDINATOR once: librdkafka does not retry OffsetFetch on NOT_COORDINATOR (it only
queries the coordinator again), so that one committed() call fails and the next one succeeds.
"""

from __future__ import annotations

import time
import warnings

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from broker.group.coordinator import partition_for
from broker.group.manager import OFFSETS_TOPIC
from cluster.net import actions
from tests.harness import RunningCluster, wait_until
from tests.replication.support import connect, controller_and_others, make_topic
from tests.transaction.test_zombie_coordinator import commit_offset, fetch_offset, leaders, name_led_by
from traces import events as te

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.netns]

TOPIC = "healed-input"
AT_ZOMBIE, AT_SUCCESSOR = 5, 9
# from the healed broker's LeaderAndIsr to every broker naming the leader that answers the new offset: a few
# UpdateMetadata round trips on a quiet cluster (measured well under a second), with room for a loaded machine
CONVERGED_S = 15


def find_coordinator(cluster: RunningCluster, broker: int, group: str) -> tuple[int, int]:
    """FindCoordinator v1 of ``group`` sent to ``broker``: (error, the node it names)."""
    with connect(cluster, broker, timeout_s=10) as connection:
        answer = connection.call(FindCoordinatorRequest(key=group, key_type=0), 1, FindCoordinatorResponse)
    return answer.error_code, answer.node_id


def committed_by_a_fresh_consumer(cluster: RunningCluster, group: str) -> int | None:
    consumer = Consumer({"bootstrap.servers": cluster.spec.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)[0].offset
    except KafkaException:
        return None   # NOT_COORDINATOR from a coordinator that has just moved: librdkafka does not retry it
    finally:
        consumer.close()


def every_broker_names_the_leader_and_it_answers(cluster: RunningCluster, group: str, partition: int) -> bool:
    leader = leaders(cluster, OFFSETS_TOPIC)[partition]
    named = {b.broker_id: find_coordinator(cluster, b.broker_id, group) for b in cluster.spec.brokers}
    return (all(answer == (0, leader) for answer in named.values())
            and fetch_offset(cluster, leader, group, TOPIC) == (0, 0, AT_SUCCESSOR))


def test_a_healed_coordinator_is_told_it_follows_after_its_metadata_and_clients_find_the_new_one_at_once(
        netns_cluster):
    cluster = netns_cluster
    controller, (zombie, other) = controller_and_others(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.spec.bootstrap_servers})
    wait_until(lambda: admin.describe_consumer_groups(["healed-probe"])["healed-probe"].result(10) is not None, 30,
               f"{OFFSETS_TOPIC} to exist")
    wait_until(lambda: (ps := cluster.state([OFFSETS_TOPIC]).partitions) and all(
        p.leader >= 0 and len(p.isr) == 3 for p in ps), 30, f"{OFFSETS_TOPIC} to be led with its full ISR")
    offsets_leaders = leaders(cluster, OFFSETS_TOPIC)
    if zombie not in offsets_leaders.values():
        zombie, other = other, zombie
    assert zombie in offsets_leaders.values(), f"no broker but the controller leads {OFFSETS_TOPIC}: {offsets_leaders}"
    group = name_led_by("healed-group", offsets_leaders, lambda leader: leader == zombie)
    partition = partition_for(group, len(offsets_leaders))
    make_topic(cluster, TOPIC, [controller, other])
    wait_until(lambda: commit_offset(cluster, zombie, group, TOPIC, AT_ZOMBIE)[0] == 0, 20,
               f"the commit of {AT_ZOMBIE} at the coordinator")

    actions.isolate(cluster.data_dir, zombie, "zookeeper", say=lambda _: None)
    successor = wait_until(lambda: (leader := leaders(cluster, OFFSETS_TOPIC)[partition]) not in (zombie, -1)
                           and leader, 30, f"a new leader of {OFFSETS_TOPIC}-{partition}")
    wait_until(lambda: commit_offset(cluster, successor, group, TOPIC, AT_SUCCESSOR)[0] == 0, 20,
               f"the commit of {AT_SUCCESSOR} at broker {successor}")
    # Kafka's zombie: told nothing, it still names itself and answers from memory
    assert find_coordinator(cluster, zombie, group) == (0, zombie)
    assert fetch_offset(cluster, zombie, group, TOPIC) == (0, 0, AT_ZOMBIE)

    registrations = len([e for e in cluster.traces(zombie) if isinstance(e, te.BrokerRegistered)])
    actions.heal(cluster.data_dir, say=lambda _: None)

    def follows() -> list | None:
        events = cluster.traces(zombie)
        return events if any(isinstance(e, te.ReplicaRoleChanged) and e.topic == OFFSETS_TOPIC
                             and e.partition == partition and e.role == "follower" for e in events) else None
    events = wait_until(follows, 60, f"broker {zombie} to register again and follow {OFFSETS_TOPIC}-{partition}")
    told = time.monotonic()
    # onBrokerStartup's order: the metadata first, then the role, so the healed broker never names itself after it
    # has unloaded the group
    registered = [i for i, e in enumerate(events) if isinstance(e, te.BrokerRegistered)]
    assert len(registered) == registrations + 1, "the healed broker did not register again"
    after = events[registered[-1]:]
    metadata = next(i for i, e in enumerate(after) if isinstance(e, te.ControlRequestApplied)
                    and e.request == "UpdateMetadata" and e.error_code == 0 and e.partitions > 0)
    role = next(i for i, e in enumerate(after) if isinstance(e, te.ReplicaRoleChanged)
                and e.topic == OFFSETS_TOPIC and e.partition == partition and e.role == "follower")
    assert metadata < role, after

    wait_until(lambda: every_broker_names_the_leader_and_it_answers(cluster, group, partition), CONVERGED_S,
               f"every broker to name the leader of {OFFSETS_TOPIC}-{partition}, answering {AT_SUCCESSOR}",
               interval_s=0.2)
    wait_until(lambda: committed_by_a_fresh_consumer(cluster, group) == AT_SUCCESSOR,
               max(1.0, CONVERGED_S - (time.monotonic() - told)),
               f"a fresh consumer's committed() to be {AT_SUCCESSOR}", interval_s=0.2)
