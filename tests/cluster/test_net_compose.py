"""The compose network as a plan (cluster/net/compose.py, pure): container addresses from the Engine API become
the peers faults.py cuts, and each plan name stands for one container. No Docker here."""

from __future__ import annotations

import pytest

from cluster.net import faults
from cluster.net.compose import ComposeNetwork, choose_network, compose_plan
from cluster.net.faults import FaultError


def network(**changes) -> ComposeNetwork:
    fields = dict(name="p_default", subnet="172.18.0.0/16", gateway="172.18.0.1", zookeeper="p-zookeeper-1",
                  zookeeper_address="172.18.0.2",
                  brokers={1: ("p-kafka-1-1", "172.18.0.5"), 2: ("p-kafka-2-1", "172.18.0.3"),
                           3: ("p-kafka-3-1", "172.18.0.4")})
    return ComposeNetwork(**(fields | changes))


def test_clients_are_the_gateway_and_every_member_keeps_its_container_address():
    plan, containers = compose_plan(network())
    assert (plan.host_address, plan.zookeeper_address) == ("172.18.0.1", "172.18.0.2")
    assert plan.broker_addresses == {1: "172.18.0.5", 2: "172.18.0.3", 3: "172.18.0.4"}
    assert [plan.who(a) for a in ("172.18.0.1", "172.18.0.2", "172.18.0.4")] == ["clients", "zookeeper", "broker 3"]
    assert containers == {plan.zookeeper_namespace: "p-zookeeper-1", plan.broker_namespace(1): "p-kafka-1-1",
                          plan.broker_namespace(2): "p-kafka-2-1", plan.broker_namespace(3): "p-kafka-3-1"}


def test_the_plan_names_cannot_be_taken_for_a_netns_clusters():
    from cluster.net.plan import tag_of

    _plan, containers = compose_plan(network())
    assert all(tag_of(name) is None for name in containers)


def test_isolating_from_zookeeper_cuts_the_zookeeper_container_in_the_brokers_container_alone():
    plan, containers = compose_plan(network())
    cuts = faults.isolate(plan, 2, "zookeeper")
    assert {containers[namespace]: peers for namespace, peers in cuts.items()} == {
        "p-kafka-2-1": frozenset({"172.18.0.2"})}


def test_a_partition_cuts_each_side_in_every_container_of_the_other():
    plan, containers = compose_plan(network())
    cuts = faults.partition(plan, faults.parse_sides(["1"], plan.broker_addresses))
    assert {containers[namespace]: peers for namespace, peers in cuts.items()} == {
        "p-kafka-1-1": frozenset({"172.18.0.3", "172.18.0.4"}),
        "p-kafka-2-1": frozenset({"172.18.0.5"}), "p-kafka-3-1": frozenset({"172.18.0.5"})}


def test_a_detached_broker_has_no_address_to_cut_and_heal_is_named():
    detached = network(brokers={1: ("p-kafka-1-1", None), 2: ("p-kafka-2-1", "172.18.0.3")})
    with pytest.raises(FaultError, match=r"broker 1 \(p-kafka-1-1\) not on network p_default.*net heal --docker"):
        compose_plan(detached)
    plan, containers = compose_plan(detached, detached_ok=True)
    assert plan.broker_addresses == {2: "172.18.0.3"} and len(containers) == 2


def test_zookeeper_off_the_network_is_refused_even_for_status():
    with pytest.raises(FaultError, match="zookeeper"):
        compose_plan(network(zookeeper_address=None), detached_ok=True)


def test_an_address_outside_the_subnet_is_refused():
    with pytest.raises(FaultError, match=r"gateway 10\.0\.0\.1 outside network p_default"):
        compose_plan(network(gateway="10.0.0.1"))


def test_the_network_is_the_one_zookeeper_is_on():
    assert choose_network({"p_default": ["p-zookeeper-1", "p-kafka-1-1"], "p_other": ["x"]}, "p-zookeeper-1") \
        == "p_default"
    with pytest.raises(FaultError, match="several networks"):
        choose_network({"a": ["zk"], "b": ["zk"]}, "zk")
    with pytest.raises(FaultError, match="on no network"):
        choose_network({"a": ["x"]}, "zk")


# --- the way into a container's namespace, with a fake engine ------------------------------------------------

class FakeContainers:
    def __init__(self, error=None, out=b""):
        self.error, self.out, self.calls = error, out, []

    def run(self, image, command, **options):
        self.calls.append((image, command, options))
        if self.error:
            raise self.error
        return self.out


class FakeClient:
    def __init__(self, containers, base_url="http+docker://localhost"):
        self.containers = containers
        self.api = type("Api", (), {"base_url": base_url})()


class Target:
    id, name = "abc123", "p-kafka-1-1"


def test_the_helper_passes_the_script_as_an_argument_and_joins_the_target_s_namespace():
    from cluster.docker_net import HelperContainer

    containers = FakeContainers(out=b"table inet kafkasim\n")
    out = HelperContainer(FakeClient(containers), "kafkasim/kafkasim:latest").run(Target(), ["nft", "-f", "-"],
                                                                                   stdin="add table inet kafkasim\n")
    assert out == "table inet kafkasim\n"
    image, command, options = containers.calls[0]
    assert image == "kafkasim/kafkasim:latest"
    assert command[:3] == ["sh", "-c", 'printf "%s" "$0" | "$@"']
    assert command[3:] == ["add table inet kafkasim\n", "nft", "-f", "-"]
    assert options["network_mode"] == "container:abc123" and options["cap_add"] == ["NET_ADMIN"]
    assert options["remove"] is True


def test_an_image_without_nft_asks_for_a_rebuild_or_root():
    from docker.errors import ContainerError

    from cluster.docker_net import HelperContainer
    from cluster.processes import ClusterError

    error = ContainerError(Target(), 127, "nft", "img", b"sh: 1: nft: not found")
    with pytest.raises(ClusterError, match=r"has no nft.*rebuild it.*as root"):
        HelperContainer(FakeClient(FakeContainers(error)), "img").run(Target(), ["nft", "list", "tables"])


def test_a_failing_command_shows_what_it_said():
    from docker.errors import ContainerError

    from cluster.docker_net import HelperContainer
    from cluster.net.system import NetCommandError

    error = ContainerError(Target(), 2, "tc", "img", b"Error: Specified qdisc kind is unknown.")
    with pytest.raises(NetCommandError, match="qdisc kind is unknown"):
        HelperContainer(FakeClient(FakeContainers(error)), "img").run(Target(), ["tc", "qdisc", "show"])


def test_a_remote_engine_cannot_be_entered_from_the_host():
    from cluster.docker_net import host_entry_missing

    missing = host_entry_missing(FakeClient(FakeContainers(), "https://10.0.0.5:2376"), 1)
    assert any("local Docker engine" in item for item in missing)
