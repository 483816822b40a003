"""The pure parts of cluster/net: the address plan and names, the cuts of each fault, the partition sides and
the nft and netem text. No namespace is made here."""

from __future__ import annotations

import pytest

from cluster.net import faults
from cluster.net.faults import FaultError, Sides, parse_sides
from cluster.net.plan import IFNAMSIZ, NetworkPlan, PlanError, free_subnet, overlapping, plan_network, tag_of

TAG = "0a1b2c"


@pytest.fixture
def plan() -> NetworkPlan:
    return plan_network("10.77.0.0/24", [1, 2, 3], TAG)


def test_the_plan_puts_the_host_first_then_zookeeper_then_broker_n_at_ten_plus_n(plan):
    assert (plan.host_address, plan.zookeeper_address) == ("10.77.0.1", "10.77.0.2")
    assert plan.broker_addresses == {1: "10.77.0.11", 2: "10.77.0.12", 3: "10.77.0.13"}
    assert plan.prefix_length == 24


def test_every_name_carries_the_prefix_and_the_tag_and_fits_linux_interface_names(plan):
    assert plan.namespaces == [f"kafkasim-{TAG}-net", f"kafkasim-{TAG}-zk", f"kafkasim-{TAG}-b1",
                               f"kafkasim-{TAG}-b2", f"kafkasim-{TAG}-b3"]
    links = [plan.bridge, plan.host_link, plan.host_port, plan.zookeeper_port, plan.broker_port(3)]
    assert links == [f"ksim{TAG}", f"ksim{TAG}h", f"ksim{TAG}hp", f"ksim{TAG}zk", f"ksim{TAG}b3"]
    assert all(len(name) <= IFNAMSIZ for name in links)


def test_leftovers_are_recognised_by_name_and_nothing_else_is(plan):
    assert {tag_of(name) for name in [*plan.namespaces, plan.host_link]} == {TAG}
    assert tag_of("kafkasim-zzzzzz-b1") is None and tag_of("docker0") is None and tag_of(f"ksim{TAG}") is None


def test_the_plan_survives_the_round_trip_through_cluster_json(plan):
    import json

    assert NetworkPlan.from_dict(json.loads(json.dumps(plan.as_dict()))) == plan


@pytest.mark.parametrize(("subnet", "ids", "message"), [
    ("10.77.0.0/28", [1, 2, 3, 4, 5], "no room for broker 5 .*: choose a /27 or larger"),
    ("10.77.0.1/24", [1], "not a network address"),
    ("fd00::/64", [1], "IPv6"),
    ("10.0.0.0/8", [10000], "exceed Linux's 15 characters"),
])
def test_a_plan_that_cannot_be_laid_out_says_what_to_choose(subnet, ids, message):
    with pytest.raises(PlanError, match=message):
        plan_network(subnet, ids, TAG)


def test_a_subnet_the_host_routes_already_is_found_and_the_default_route_is_not():
    routed = ["default", "172.17.0.0/16", "10.77.0.0/16", "10.99.0.0/24"]
    assert overlapping("10.77.5.0/24", routed) == ["10.77.0.0/16"]
    assert overlapping("10.78.0.0/24", routed) == []


def test_a_free_subnet_is_one_no_route_covers_and_there_is_a_clear_error_when_none_is_left():
    routed = ["default", "10.231.7.0/24", "10.231.0.0/19"]  # .0 to .31 taken, and .40 up free
    assert free_subnet(routed, pick=lambda free: free[0]) == "10.231.40.0/24"
    assert not overlapping(free_subnet(routed), routed)
    with pytest.raises(PlanError, match="kafkasim net clean"):
        free_subnet(["10.231.0.0/16"])


@pytest.mark.parametrize(("peers", "dropped"), [
    ("zookeeper", {"10.77.0.2"}),
    ("brokers", {"10.77.0.11", "10.77.0.13"}),
    ("clients", {"10.77.0.1"}),
    ("all", {"10.77.0.1", "10.77.0.2", "10.77.0.11", "10.77.0.13"}),
])
def test_isolating_a_broker_drops_the_peers_named_in_its_own_namespace_only(plan, peers, dropped):
    assert faults.isolate(plan, 2, peers) == {f"kafkasim-{TAG}-b2": frozenset(dropped)}


def test_isolating_an_unknown_broker_names_the_brokers_there_are(plan):
    with pytest.raises(PlanError, match=r"broker 7 is not part of this cluster \(brokers: 1, 2, 3\)"):
        faults.isolate(plan, 7, "all")


def test_a_partition_with_zookeeper_on_both_sides_leaves_zookeeper_uncut(plan):
    sides = parse_sides(["1,2", "3"], [1, 2, 3])
    assert sides == Sides(frozenset({1, 2}), frozenset({3}), None)
    assert faults.partition(plan, sides) == {
        f"kafkasim-{TAG}-b1": frozenset({"10.77.0.13"}),
        f"kafkasim-{TAG}-b2": frozenset({"10.77.0.13"}),
        f"kafkasim-{TAG}-b3": frozenset({"10.77.0.11", "10.77.0.12"}),
    }


def test_zookeeper_named_on_a_side_is_cut_from_the_other_side(plan):
    sides = parse_sides(["1,2,zk", "3"], [1, 2, 3])
    cuts = faults.partition(plan, sides)
    assert cuts[f"kafkasim-{TAG}-b3"] == frozenset({"10.77.0.11", "10.77.0.12", "10.77.0.2"})
    assert cuts[f"kafkasim-{TAG}-zk"] == frozenset({"10.77.0.13"})
    assert sides.describe() == "1,2,zk | 3"


def test_one_side_alone_puts_every_other_broker_on_the_other():
    assert parse_sides(["2"], [1, 2, 3]) == Sides(frozenset({2}), frozenset({1, 3}), None)


@pytest.mark.parametrize(("arguments", "message"), [
    (["1,2", "3"], "brokers \\[4\\] are on neither side"),
    (["1,2", "2,3,4"], "broker 2 is named twice"),
    (["1,zk", "2,zookeeper,3,4"], "ZooKeeper is named on both sides"),
    (["1,x", "2,3,4"], "'x' in side '1,x' is neither a broker id nor zk"),
    (["1", "9"], "broker 9 is not part of this cluster"),
    (["1,2,3,4"], "each side of a partition needs at least one broker"),
    (["1", "2", "3,4"], "a partition has two sides"),
])
def test_sides_that_make_no_partition_are_refused_with_the_reason(arguments, message):
    with pytest.raises(FaultError, match=message):
        parse_sides(arguments, [1, 2, 3, 4])


def test_faults_add_up_per_namespace():
    merged = faults.merge({"a": frozenset({"x"})}, {"a": frozenset({"y"}), "b": frozenset({"z"})})
    assert merged == {"a": frozenset({"x", "y"}), "b": frozenset({"z"})}


def test_the_ruleset_replaces_the_kafkasim_table_and_drops_the_peers_both_ways():
    script = faults.ruleset({"10.77.0.13", "10.77.0.2"})
    assert script.startswith("add table inet kafkasim\ndelete table inet kafkasim\ntable inet kafkasim {")
    assert "elements = { 10.77.0.13, 10.77.0.2 }" in script
    assert "hook input" in script and "ip saddr @blocked drop" in script
    assert "hook output" in script and "ip daddr @blocked drop" in script


def test_netem_arguments_carry_delay_jitter_and_loss():
    assert faults.netem_arguments(100, 10, 1.5) == ["netem", "delay", "100ms", "10ms", "loss", "1.5%"]
    assert faults.netem_arguments(50) == ["netem", "delay", "50ms"]


@pytest.mark.parametrize(("delay", "jitter", "loss", "message"), [
    (10, 20, 0, "larger than --delay-ms"), (0, 0, 0, "nothing to slow down"), (10, 0, 101, "between 0 and 100"),
])
def test_netem_settings_that_make_no_sense_are_refused(delay, jitter, loss, message):
    with pytest.raises(FaultError, match=message):
        faults.netem_arguments(delay, jitter, loss)


def test_status_names_who_is_cut_from_whom(plan):
    cuts = {f"kafkasim-{TAG}-b2": frozenset({"10.77.0.2", "10.77.0.1"})}
    assert faults.describe(plan, cuts, {f"kafkasim-{TAG}-b3": "netem delay 50ms"}) == [
        "broker 2 drops traffic with clients, zookeeper", "broker 3 sends through netem delay 50ms"]
