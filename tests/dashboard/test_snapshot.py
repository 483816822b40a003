"""The page's data from hand-made answers of ZooKeeper and the brokers; rates from two polls."""

from __future__ import annotations

from cluster.admin import BrokerView, ClusterState, PartitionView
from cluster.dashboard.rates import CommitRates, LeoRates, MetricRates, leader_offsets, parse_counters
from cluster.dashboard.snapshot import BrokerViews, build_snapshot, cluster_addresses
from clusterplane import cluster_pb2 as pb


def _state(isr: list[int], leader: int = 1, brokers: tuple[int, ...] = (1, 2, 3)) -> ClusterState:
    return ClusterState(controller_id=1, controller_epoch=3,
                        brokers=[BrokerView(b, [f"CLUSTER://127.0.0.1:{9100 + b}"], 10 * b) for b in brokers],
                        partitions=[PartitionView("t", 0, [1, 2, 3], leader, 4, isr, 3, 9)],
                        topics_being_deleted=[], problems=[])


def _answer(broker_id: int, leo: int, leader: bool, followers: dict[int, int] | None = None):
    view = pb.ReplicaView(topic="t", partition=0, is_leader=leader, leader=1, leader_epoch=4, hosted=True,
                          log_end_offset=leo, high_watermark=leo - 2,
                          followers=[pb.FollowerOffset(replica=r, log_end_offset=o)
                                     for r, o in (followers or {}).items()])
    return pb.DescribeBrokerResponse(broker_id=broker_id, replicas=[view])


def test_each_replica_has_its_own_leo_and_the_leader_gives_the_high_watermark():
    views = BrokerViews(answers={1: _answer(1, 10, True, {2: 8, 3: 5}), 2: _answer(2, 9, False)})
    snapshot = build_snapshot(_state([1, 2, 3]), None, views, {1: "running", 2: "running", 3: "running"}, {},
                              [1, 2, 3], 0.0)
    partition = snapshot["partitions"][0]
    # broker 2 answered itself (9); broker 3 did not, so its leader's view (5) stands in
    assert partition["leo"] == {"1": 10, "2": 9, "3": 5}
    assert partition["high_watermark"] == 8
    assert not partition["under_replicated"] and not partition["offline"]


def test_a_paused_broker_is_paused_and_a_silent_one_not_answering():
    views = BrokerViews(answers={1: _answer(1, 10, True)}, silent={2: "not answering", 3: "not answering"})
    snapshot = build_snapshot(_state([1]), None, views, {1: "running", 2: "paused", 3: "running"}, {}, [1, 2, 3], 0)
    states = {b["id"]: b["state"] for b in snapshot["brokers"]}
    assert states == {1: "up", 2: "paused", 3: "not answering"}
    assert snapshot["partitions"][0]["under_replicated"]


def test_a_partition_whose_leader_is_not_registered_is_offline():
    snapshot = build_snapshot(_state([3], leader=3, brokers=(1, 2)), None, BrokerViews(),
                              {1: "running", 2: "running", 3: "down"}, {}, [1, 2, 3], 0)
    assert snapshot["partitions"][0]["offline"]
    assert {b["id"]: b["state"] for b in snapshot["brokers"]}[3] == "down"


def test_zookeeper_not_answering_still_gives_the_brokers():
    snapshot = build_snapshot(None, "TimeoutError", BrokerViews(), {1: "running"}, {1: ["zookeeper"]}, [1], 0)
    assert snapshot["zookeeper"] == {"answering": False, "error": "TimeoutError"}
    assert snapshot["brokers"][0]["state"] == "cut off"
    assert snapshot["partitions"] == []


def test_brokers_are_found_through_their_registration_without_a_cluster_file():
    assert cluster_addresses(None, _state([1])) == {1: "127.0.0.1:9101", 2: "127.0.0.1:9102", 3: "127.0.0.1:9103"}


def test_produce_rate_comes_from_the_leaders_leo():
    rates = LeoRates()
    first = {"partitions": [{"name": "t-0", "leader": 1, "leo": {"1": 100}}]}
    second = {"partitions": [{"name": "t-0", "leader": 1, "leo": {"1": 150}}]}
    rates.update(10.0, leader_offsets(first))
    assert rates.update(10.5, leader_offsets(second)) == {"t": 100.0}


def test_metric_counters_become_rates_and_a_restart_is_no_negative_rate():
    text = ("# TYPE kafka_server_brokertopicmetrics_bytesin counter\n"
            "kafka_server_brokertopicmetrics_bytesin_total 1000.0\n"
            'kafka_server_brokertopicmetrics_bytesin_total{topic="t"} 1000.0\n')
    counters = parse_counters(text)
    assert counters[("bytes_in", "")] == 1000.0 and counters[("bytes_in", "t")] == 1000.0
    rates = MetricRates()
    rates.update(1, 0.0, counters)
    rates.update(1, 2.0, {("bytes_in", ""): 3000.0})
    assert rates.totals() == {"bytes_in": 1000.0}
    rates.update(1, 3.0, {("bytes_in", ""): 10.0})
    assert rates.totals() == {}
    rates.update(1, 4.0, None)
    assert rates.per_broker == {}


def test_a_groups_consumption_rate_comes_from_its_commits():
    rates = CommitRates()
    group = {"group": "g", "partitions": [{"committed": 10}, {"committed": None}]}
    rates.update(0.0, [group])
    assert rates.update(2.0, [{"group": "g", "partitions": [{"committed": 50}]}]) == {"g": 20.0}
    assert rates.update(3.0, [{"group": "g", "error": "COORDINATOR_NOT_AVAILABLE"}]) == {}
