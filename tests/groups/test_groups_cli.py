"""`kafkasim groups` and `kafkasim groups describe GROUP` against a live group: what an operator reads."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from cluster.cli import main
from tests.cluster.test_controller import make_topic
from tests.groups.support import produce
from tests.groups.test_group_bad_input import consume
from tests.harness import RunningCluster, wait_until

pytestmark = [pytest.mark.processes]


def run(cluster: RunningCluster, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--data-dir", str(cluster.data_dir), "groups", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_groups_lists_the_group_and_describe_shows_members_offsets_and_lag(shared_cluster, capsys):
    topic, group = "cli-orders", "cli-group"
    bootstrap = shared_cluster.spec.bootstrap_servers
    make_topic(shared_cluster, topic, 2, 3)
    produce(bootstrap, topic, {0: 10, 1: 4})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "client.id": "cli-test-client"})
    try:
        consumer.subscribe([topic])
        assert len(consume(consumer, 14)) == 14
        consumer.commit(asynchronous=False)
        produce(bootstrap, topic, {0: 3})  # uncommitted: lag 3 on partition 0

        def stable_listing() -> str | None:
            code, out, _ = run(shared_cluster, capsys)
            return out if code == 0 and any(line.split()[:2] == [group, "Stable"] for line in out.splitlines()) \
                else None
        wait_until(stable_listing, 30, "the group listed as Stable")
        code, out, err = run(shared_cluster, capsys, "describe", group)
        assert code == 0, err
        assert f"group {group}: Stable, protocol range" in out and "1 members" in out
        assert "cli-test-client" in out and f"{topic}-0, {topic}-1" in out
        rows = {tuple(line.split()[:2]): line.split()[2:5] for line in out.splitlines() if line.startswith(topic)}
        assert rows == {(topic, "0"): ["10", "13", "3"], (topic, "1"): ["4", "4", "0"]}
    finally:
        consumer.close()


def test_describing_a_group_that_does_not_exist_says_so(shared_cluster, capsys):
    code, out, err = run(shared_cluster, capsys, "describe", "no-such-group")
    assert code == 2 and "consumer group 'no-such-group' does not exist" in err and out == ""


def test_groups_delete_removes_an_empty_group_and_refuses_one_with_members(shared_cluster, capsys):
    topic = "cli-delete-orders"
    bootstrap = shared_cluster.spec.bootstrap_servers
    make_topic(shared_cluster, topic, 1, 3)
    produce(bootstrap, topic, {0: 3})
    members = {}
    for group in ("cli-delete-empty", "cli-delete-busy"):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe([topic])
        assert len(consume(consumer, 3)) == 3
        consumer.commit(asynchronous=False)
        members[group] = consumer
    members.pop("cli-delete-empty").close()
    try:
        code, out, err = run(shared_cluster, capsys, "delete", "cli-delete-empty", "cli-delete-busy", "cli-no-group")
        assert code == 1
        assert "deleted group cli-delete-empty" in out
        assert "group cli-delete-busy not deleted: NON_EMPTY_GROUP: it has members" in err
        assert "group cli-no-group not deleted: GROUP_ID_NOT_FOUND" in err
        code, out, _ = run(shared_cluster, capsys)
        listed = {line.split()[0] for line in out.splitlines()[1:] if line.strip()}
        assert "cli-delete-empty" not in listed and "cli-delete-busy" in listed
    finally:
        members.pop("cli-delete-busy").close()
