"""The broker's side of dynamic configs (Kafka's ZkNodeChangeNotificationListener with the ConfigChangeListener):
a child watch on /config/changes; each notification newer than the last one handled names an entity (a topic, a
broker, the cluster-wide broker default) whose config znode is read again and applied. At start every notification
present is handled (configs were read directly just before, so that only repeats them), and notifications older
than 15 minutes are deleted, as Kafka does."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from zk.client import SessionEvent, ZkClient
from zk.znodes import BrokerConfigZNode, ConfigChangeNotificationZNode, TopicConfigZNode, ZNodeDecodeError

log = logging.getLogger(__name__)

NOTIFICATION_EXPIRY_MS = 15 * 60 * 1000  # Kafka's changeExpirationMs
RETRY_S = 1.0


class ConfigChangeListener:
    def __init__(self, zk: ZkClient, on_topic_change: Callable[[str], Awaitable[None]],
                 on_broker_change: Callable[[str], Awaitable[None]] | None = None, *,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.zk = zk
        self.on_topic_change = on_topic_change
        # called with "<default>" or a broker id: each broker takes the default's and its own (BrokerConfigHandler)
        self.on_broker_change = on_broker_change
        self.last_executed_change = -1
        self._clock_ms = clock_ms
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.zk.add_session_listener(self._on_session_event)
        self._wake.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="config-change-listener")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _watch(self, _: WatchedEvent) -> None:
        self._wake.set()

    def _on_session_event(self, event: SessionEvent) -> None:
        # a new session lost the watch; after a reconnection, look again too: a change made meanwhile is only
        # seen by listing the children (Kafka's listener also re-reads on every new session)
        if event in (SessionEvent.NEW_SESSION, SessionEvent.RECONNECTED):
            self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.process_notifications()
            except Exception as exc:  # ZooKeeper away for a moment: try again, nothing is lost
                log.warning("reading %s failed (%r); retrying in %.0f s", ConfigChangeNotificationZNode.path, exc,
                            RETRY_S)
                await asyncio.sleep(RETRY_S)
                self._wake.set()

    async def process_notifications(self) -> None:
        children = await self.zk.get_children(ConfigChangeNotificationZNode.path, watch=self._watch)
        numbered = sorted((seq, child) for child in children
                          if (seq := ConfigChangeNotificationZNode.sequence(child)) is not None)
        for seq, child in numbered:
            if seq <= self.last_executed_change:
                continue
            path = f"{ConfigChangeNotificationZNode.path}/{child}"
            data, _ = await self.zk.get_or_none(path)
            if data is not None:
                await self._handle(child, data)
            self.last_executed_change = seq
        await self._purge_obsolete(numbered)

    async def _handle(self, child: str, data: bytes) -> None:
        try:
            entity_path = ConfigChangeNotificationZNode.decode(child, data)
        except ZNodeDecodeError as exc:
            log.error("ignoring config change %s: %s", child, exc)
            return
        entity_type, _, name = entity_path.partition("/")
        if entity_type == TopicConfigZNode.entity_type and name:
            log.info("config change %s: topic %s", child, name)
            await self.on_topic_change(name)
        elif entity_type == BrokerConfigZNode.entity_type and name and self.on_broker_change is not None:
            log.info("config change %s: brokers/%s", child, name)
            await self.on_broker_change(name)
        else:
            log.info("config change %s for %s: kafkasim has no dynamic configs of that kind", child, entity_path)

    async def _purge_obsolete(self, numbered: list[tuple[int, str]]) -> None:
        """Oldest first, stopping at the first young one: sequence order is creation order, so a notification costs
        one look, not one per notification still present."""
        now = self._clock_ms()
        for _seq, child in numbered:
            path = f"{ConfigChangeNotificationZNode.path}/{child}"
            stat = await self.zk.exists(path)
            if stat is not None and now - stat.ctime <= NOTIFICATION_EXPIRY_MS:
                return
            with contextlib.suppress(NoNodeError):  # another broker purged it first
                await self.zk.delete(path)
