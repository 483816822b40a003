import asyncio
from types import SimpleNamespace

from broker.config_change_listener import NOTIFICATION_EXPIRY_MS, ConfigChangeListener

NOW_MS = 10 * NOTIFICATION_EXPIRY_MS


class FakeZk:
    """/config/changes children: name -> (data, ctime)."""

    def __init__(self, children: dict[str, tuple[bytes, int]]) -> None:
        self.children = dict(children)
        self.deleted: list[str] = []

    async def get_children(self, path, watch=None):
        assert path == "/config/changes"
        return list(self.children)

    async def get_or_none(self, path):
        entry = self.children.get(path.rsplit("/", 1)[1])
        return (entry[0], None) if entry else (None, None)

    async def exists(self, path):
        entry = self.children.get(path.rsplit("/", 1)[1])
        return SimpleNamespace(ctime=entry[1]) if entry else None

    async def delete(self, path):
        self.deleted.append(path)
        self.children.pop(path.rsplit("/", 1)[1])


def change(topic: str) -> bytes:
    return b'{"version":2,"entity_path":"topics/' + topic.encode() + b'"}'


def run(zk: FakeZk, listener_state: int = -1) -> tuple[list[str], ConfigChangeListener]:
    seen: list[str] = []

    async def on_topic(topic: str) -> None:
        seen.append(topic)

    listener = ConfigChangeListener(zk, on_topic, clock_ms=lambda: NOW_MS)
    listener.last_executed_change = listener_state
    asyncio.run(listener.process_notifications())
    return seen, listener


def test_notifications_are_handled_in_sequence_order_once_each():
    zk = FakeZk({"config_change_0000000002": (change("b"), NOW_MS), "config_change_0000000001": (change("a"), NOW_MS),
                 "config_change_0000000003": (b'{"version":1,"entity_type":"topics","entity_name":"c"}', NOW_MS)})
    seen, listener = run(zk)
    assert seen == ["a", "b", "c"] and listener.last_executed_change == 3
    assert run(zk, listener_state=2)[0] == ["c"]


def test_other_entities_and_unreadable_notifications_are_skipped():
    zk = FakeZk({"config_change_0000000001": (b'{"version":2,"entity_path":"brokers/<default>"}', NOW_MS),
                 "config_change_0000000002": (b"not json", NOW_MS), "config_change_0000000003": (change("t"), NOW_MS),
                 "something_else": (change("x"), NOW_MS)})
    seen, listener = run(zk)
    assert seen == ["t"] and listener.last_executed_change == 3


def test_notifications_older_than_15_minutes_are_purged_oldest_first():
    old = NOW_MS - NOTIFICATION_EXPIRY_MS - 1
    zk = FakeZk({"config_change_0000000001": (change("a"), old), "config_change_0000000002": (change("b"), NOW_MS),
                 "config_change_0000000003": (change("c"), old)})
    run(zk)
    # stops at the first young one: sequence order is creation order
    assert zk.deleted == ["/config/changes/config_change_0000000001"]


def test_broker_entities_go_to_the_broker_handler_and_topics_to_the_topic_one():
    zk = FakeZk({"config_change_0000000001": (b'{"version":2,"entity_path":"brokers/<default>"}', NOW_MS),
                 "config_change_0000000002": (change("t"), NOW_MS),
                 "config_change_0000000003": (b'{"version":2,"entity_path":"brokers/2"}', NOW_MS)})
    seen: list[str] = []

    async def on_topic(topic: str) -> None:
        seen.append(f"topic {topic}")

    async def on_broker(entity: str) -> None:
        seen.append(f"broker {entity}")

    listener = ConfigChangeListener(zk, on_topic, on_broker, clock_ms=lambda: NOW_MS)
    asyncio.run(listener.process_notifications())
    assert seen == ["broker <default>", "topic t", "broker 2"]
