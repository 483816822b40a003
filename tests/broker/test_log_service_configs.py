"""LogService and dynamic topic configs: a notification gives the topic's logs their new config, also when it is
handled between a LeaderAndIsr's read of the config and the creation of the log."""

import asyncio

from broker.log.config import LogConfig
from broker.log_service import LogService
from broker.replication.replica_manager import ReplicaState
from zk.znodes import TopicConfigZNode


class FakeZk:
    def __init__(self) -> None:
        self.configs: dict[str, dict[str, str]] = {}

    async def get_or_none(self, path):
        topic = path.rsplit("/", 1)[1]
        if topic not in self.configs:
            return None, None
        return TopicConfigZNode.encode(self.configs[topic]), None


def state(topic: str, partition: int = 0) -> ReplicaState:
    return ReplicaState(topic, partition, 1, 0, [1], 0, [1], 1)


def service(tmp_path) -> tuple[LogService, FakeZk]:
    zk = FakeZk()
    return LogService({}, [tmp_path], zk, high_watermarks=dict), zk


def test_a_notification_swaps_the_config_of_the_topics_logs(tmp_path):
    logs, zk = service(tmp_path)

    async def run():
        zk.configs["t"] = {"min.insync.replicas": "2"}
        created = await logs.ensure_log(state("t"))
        assert created.config.min_insync_replicas == 2
        zk.configs["t"] = {"min.insync.replicas": "3"}
        assert await logs.refresh_topic_config("t") == (1, {"min.insync.replicas": "3"})
        assert created.config.min_insync_replicas == 3
        zk.configs["t"] = {}
        await logs.refresh_topic_config("t")
        assert created.config.min_insync_replicas == 1
    asyncio.run(run())


def test_a_notification_handled_after_the_read_and_before_the_log_exists_is_not_lost(tmp_path):
    logs, zk = service(tmp_path)

    async def run():
        zk.configs["t"] = {"min.insync.replicas": "2"}
        read = await logs.topic_configs({"t"})           # the LeaderAndIsr's read
        zk.configs["t"] = {"min.insync.replicas": "3"}
        assert (await logs.refresh_topic_config("t"))[0] == 0   # no log yet
        created = await logs.ensure_log(state("t"), read["t"])
        assert created.config.min_insync_replicas == 3
    asyncio.run(run())


def test_new_broker_defaults_reach_every_log_and_a_topics_override_still_wins(tmp_path):
    logs, zk = service(tmp_path)

    async def run():
        zk.configs["own"] = {"min.insync.replicas": "2"}
        follows, own = await logs.ensure_log(state("follows")), await logs.ensure_log(state("own"))
        assert logs.update_defaults(LogConfig.from_broker_properties({"min.insync.replicas": "3",
                                                                       "log.retention.ms": "1000"})) == 2
        assert (follows.config.min_insync_replicas, follows.config.retention_ms) == (3, 1000)
        assert (own.config.min_insync_replicas, own.config.retention_ms) == (2, 1000)
        # a log created later, or a topic change handled later, starts from the new defaults too
        assert (await logs.ensure_log(state("follows", 1))).config.min_insync_replicas == 3
        zk.configs["own"] = {}
        await logs.refresh_topic_config("own")
        assert own.config.min_insync_replicas == 3
        assert logs.update_defaults(LogConfig()) == 3
        assert follows.config.min_insync_replicas == own.config.min_insync_replicas == 1
    asyncio.run(run())


def test_new_broker_defaults_after_the_read_and_before_the_log_exists_are_not_lost(tmp_path):
    logs, _ = service(tmp_path)

    async def run():
        read = await logs.topic_configs({"t"})           # the LeaderAndIsr's read, with the old defaults
        logs.update_defaults(LogConfig.from_broker_properties({"min.insync.replicas": "3"}))
        created = await logs.ensure_log(state("t"), read["t"])
        assert created.config.min_insync_replicas == 3
    asyncio.run(run())
