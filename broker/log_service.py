"""Connects the broker to its logs: loads them at start (recovering after a crash), gives each replica
the controller assigns here a log with its topic's config, records where a new leader's epoch starts,
runs the periodic flush and checkpoint work, and closes everything cleanly on shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from broker.log.cleaner.log_cleaner import CleanerConfig, LogCleaner
from broker.log.cleaner.manager import CleaningReport
from broker.log.config import LogConfig, topic_property_names
from broker.log.errors import CorruptCheckpointError, KafkaStorageError, LogDirInUseError
from broker.log.log import Log, parse_topic_partition
from broker.log.log_dir_failure_channel import LogDirFailureChannel
from broker.log.log_manager import LogManager
from broker.replication.replica_manager import ReplicaState, TopicPartition
from zk.client import ZkClient
from zk.znodes import TopicConfigZNode, ZNodeDecodeError

log = logging.getLogger(__name__)

# How often dirty logs are flushed by their flush.ms / flush.messages; the other intervals are broker config.
FLUSH_CHECK_INTERVAL_S = 1.0


@dataclass(frozen=True)
class MaintenanceIntervals:
    """Kafka's replica.high.watermark.checkpoint.interval.ms, log.retention.check.interval.ms and
    log.flush.offset.checkpoint.interval.ms (recovery points and log start offsets), in seconds."""

    high_watermark_checkpoint_s: float = 5.0
    retention_check_s: float = 300.0
    offset_checkpoint_s: float = 60.0


def now_ms() -> int:
    return int(time.time() * 1000)


class LogDirectoryError(RuntimeError):
    pass


class LogService:
    def __init__(self, config_properties: Mapping[str, str], log_dirs: list, zk: ZkClient, *,
                 high_watermarks: Callable[[], Mapping[TopicPartition, int]],
                 intervals: MaintenanceIntervals | None = None,
                 log_dir_failure_channel: LogDirFailureChannel | None = None,
                 on_log_cleaned: Callable[[CleaningReport], None] = lambda report: None) -> None:
        self.intervals = intervals or MaintenanceIntervals()
        self.default_config = LogConfig.from_broker_properties(config_properties)
        self.manager = LogManager(log_dirs, self.default_config, clock=now_ms,
                                  log_dir_failure_channel=log_dir_failure_channel)
        # the cleaner compacts the logs of cleanup.policy=compact topics, on threads of its own (broker/log/cleaner)
        self.cleaner = LogCleaner(CleanerConfig.model_validate(config_properties), lambda: self.manager.logs, now_ms,
                                  on_cleaned=on_log_cleaned, log_dirs=lambda: self.manager.live_log_dirs,
                                  high_watermarks=high_watermarks)
        self.zk = zk
        self._high_watermarks = high_watermarks
        self._task: asyncio.Task | None = None
        # A notification handled between a LeaderAndIsr's read of a topic's config and the creation of its log must
        # not be lost: each handled notification bumps the topic's generation, each read notes the generation it saw.
        self._generation: dict[str, int] = {}
        self._read_at: dict[str, int] = {}
        self._notified: dict[str, LogConfig] = {}
        self._overrides: dict[str, dict[str, str]] = {}  # each topic's dynamic config, as last read

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        try:
            return self.manager.read_high_watermarks()
        except CorruptCheckpointError as exc:
            # Starting from 0 only makes this replica's HW lag until its leader sends the real one.
            log.error("%s; high watermarks start from 0", exc)
            return {}

    async def startup(self) -> None:
        """Load every log with its topic's config, read from ZooKeeper first as Kafka's LogManager does:
        recovery after a crash depends on it (flush settings, simulated unflushed loss)."""
        for topic in sorted(self._topics_on_disk()):
            self.manager.topic_configs[topic] = await self._topic_config(topic)
        try:
            self.manager.startup()
        except LogDirInUseError as exc:
            raise LogDirectoryError(f"{exc}: is another broker using the same log.dirs?") from None
        except KafkaStorageError as exc:
            raise LogDirectoryError(f"{exc}; free space in or repair {exc.log_dir}, then start the broker again"
                                    ) from None
        self._task = asyncio.get_running_loop().create_task(self._periodic(), name="log-maintenance")
        self.cleaner.startup()

    def _topics_on_disk(self) -> set[str]:
        topics = set()
        for log_dir in self.manager.log_dirs:
            if log_dir.is_dir():
                for child in log_dir.iterdir():
                    try:
                        topics.add(parse_topic_partition(child.name)[0])
                    except ValueError:
                        continue
        return topics

    async def _topic_config(self, topic: str) -> LogConfig:
        self._read_at[topic] = self._generation.get(topic, 0)
        return self._with_overrides(await self._read_overrides(topic))

    async def _read_overrides(self, topic: str) -> dict[str, str]:
        data, _ = await self.zk.get_or_none(TopicConfigZNode.path(topic))
        overrides: dict[str, str] = {}
        if data is not None:
            try:
                overrides = TopicConfigZNode.decode(topic, data)
            except ZNodeDecodeError as exc:
                log.error("topic %s: using broker defaults, its config is unreadable: %s", topic, exc)
        self._overrides[topic] = overrides
        return overrides

    def _with_overrides(self, overrides: Mapping[str, str]) -> LogConfig:
        if not overrides:
            return self.default_config
        known = topic_property_names()
        merged = self.default_config.model_dump(by_alias=True) | {k: v for k, v in overrides.items() if k in known}
        return LogConfig.model_validate(merged)

    async def refresh_topic_config(self, topic: str) -> tuple[int, dict[str, str]]:
        """A topic's dynamic config changed: read it again and give it to the topic's logs here, which read it at
        every use (min.insync.replicas at the next acks=all produce, segment.bytes at the next roll, retention.* at
        the next retention check), as Kafka's TopicConfigHandler swaps each Log's config. Returns how many logs
        took it (0 when the topic has none here) and the topic's overrides."""
        overrides = await self._read_overrides(topic)
        try:
            config = self._with_overrides(overrides)
        except ValidationError as exc:
            log.error("topic %s: keeping its config, the new one is invalid: %s", topic, exc)
            return 0, overrides
        hosted = [log_ for (t, _), log_ in self.manager.logs.items() if t == topic]
        self._generation[topic] = self._generation.get(topic, 0) + 1
        self._notified[topic] = config
        self.manager.topic_configs[topic] = config
        for log_ in hosted:
            log_.config = config
        defaults = self.default_config.to_properties()
        log.info("topic %s: config applied to %d local logs: %s", topic, len(hosted),
                 {k: v for k, v in config.to_properties().items() if v != defaults[k]})
        return len(hosted), overrides

    def update_defaults(self, defaults: LogConfig) -> int:
        """The broker's dynamic config changed every topic's defaults (Kafka's DynamicLogConfig.updateLogsConfig):
        each topic's logs here take its overrides on top of the new defaults, at their next use as for a topic
        change. A read of a topic's config made before, for a log not created yet, is stale too: its generation
        moves, so ensure_log takes the recomputed config. Returns how many logs took it."""
        if defaults == self.default_config:
            return 0
        self.default_config = self.manager.default_config = defaults
        for topic, overrides in self._overrides.items():
            try:
                config = self._with_overrides(overrides)
            except ValidationError as exc:
                log.error("topic %s: keeping its config, its overrides do not fit the new defaults: %s", topic, exc)
                continue
            self._generation[topic] = self._generation.get(topic, 0) + 1
            self._notified[topic] = config
            self.manager.topic_configs[topic] = config
        updated = 0
        for (topic, _), log_ in self.manager.logs.items():
            log_.config = self.manager.topic_configs.get(topic, defaults)
            updated += 1
        log.info("broker log defaults changed, applied to %d local logs: %s", updated,
                 {k: v for k, v in defaults.to_properties().items() if v != LogConfig().to_properties()[k]})
        return updated

    async def topic_configs(self, topics: set[str]) -> dict[str, LogConfig]:
        """The configs of the topics one LeaderAndIsr creates logs for, read once per topic and pipelined: a read
        per new log, one after the other, was most of a broker's time creating 1000 partitions."""
        ordered = sorted(topics)
        return dict(zip(ordered, await asyncio.gather(*(self._topic_config(t) for t in ordered)), strict=True))

    async def ensure_log(self, state: ReplicaState, config: LogConfig | None = None) -> Log:
        """The replica's log, created with ``config`` (read from ZooKeeper when not given) if missing."""
        tp = (state.topic, state.partition)
        existing = self.manager.get_log(*tp)
        if existing is None:
            chosen = config if config is not None else await self._topic_config(state.topic)
            if self._read_at.get(state.topic, 0) != self._generation.get(state.topic, 0):
                chosen = self._notified[state.topic]  # read before a notification handled since
            self.manager.topic_configs[state.topic] = chosen
            existing = self.manager.get_or_create_log(*tp)
        return existing

    def delete(self, tp: TopicPartition) -> None:
        self.manager.delete_log(tp)

    def log_start_moved(self, log_: Log, high_watermark: int) -> int:
        """A replica's log start offset moved (DeleteRecords on the leader, the leader's start on a follower): the
        whole segments below it are deleted now — Kafka leaves them to the next retention check, up to
        log.retention.check.interval.ms later — and the log-start-offset checkpoint is written at once, so a
        broker that crashes does not serve the deleted records again after a restart (Kafka writes it every
        log.flush.start.offset.checkpoint.interval.ms). At once, not coalesced: a follower's next fetch tells the
        leader its new start, so an acknowledged DeleteRecords is on every live replica's disk. Returns the
        segments deleted."""
        deleted = log_.delete_segments_below_log_start(high_watermark)
        self.manager.checkpoint_log_start_offsets()
        return deleted

    async def _periodic(self) -> None:
        last_checkpoint = last_high_watermarks = last_retention = time.monotonic()
        last_written: Mapping[TopicPartition, int] | None = None
        while True:
            await asyncio.sleep(FLUSH_CHECK_INTERVAL_S)
            try:
                self.manager.flush_dirty_logs()
                self.manager.delete_expired_files()
                now = time.monotonic()
                if now - last_high_watermarks >= self.intervals.high_watermark_checkpoint_s:
                    high_watermarks = self._high_watermarks()
                    if high_watermarks is not last_written:  # the same mapping again: no HW moved since
                        await self.manager.write_high_watermarks_in_thread(high_watermarks)
                        last_written = high_watermarks
                    last_high_watermarks = now
                if now - last_retention >= self.intervals.retention_check_s:
                    # only below the high watermark: retention never deletes what followers still need
                    self.manager.cleanup_logs(self._high_watermarks())
                    last_retention = now
                if time.monotonic() - last_checkpoint >= self.intervals.offset_checkpoint_s:
                    self.manager.checkpoint_recovery_points()
                    self.manager.checkpoint_log_start_offsets()
                    last_checkpoint = time.monotonic()
            except KafkaStorageError:
                pass  # reported on the log dir failure channel, whose handler takes the directory offline
            except Exception:
                log.exception("log maintenance failed; retrying in %.0f s", FLUSH_CHECK_INTERVAL_S)

    async def shutdown(self) -> None:
        await self.cleaner.shutdown()  # before the logs close: a cleaning in progress stops and leaves nothing
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.manager.write_high_watermarks(self._high_watermarks())
        self.manager.shutdown()
