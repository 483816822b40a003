"""LogManager: every partition log of a broker across its ``log.dirs``, and each directory's files."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from broker.log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    fsync_directory,
)
from broker.log.checkpoint_flusher import CheckpointFlusher
from broker.log.config import LogConfig
from broker.log.errors import CorruptCheckpointError, KafkaStorageError, LogDirInUseError
from broker.log.log import Clock, Log, parse_topic_partition
from broker.log.log_dir_failure_channel import LogDirFailureChannel

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")

TopicPartition = tuple[str, int]


class LogManager:
    """Opens, creates and checkpoints the logs of one broker.

    Scheduling is the caller's: it calls :meth:`flush_dirty_logs`, :meth:`checkpoint_recovery_points`,
    :meth:`checkpoint_log_start_offsets`, :meth:`cleanup_logs` and :meth:`delete_expired_files` at
    Kafka's intervals, and :meth:`shutdown` last.

    An I/O error in a directory goes to the ``log_dir_failure_channel`` (and surfaces as KafkaStorageError);
    whoever listens there calls :meth:`handle_log_dir_failure`, after which the manager no longer knows
    the directory's logs and creates none there.
    """

    def __init__(
        self,
        log_dirs: Sequence[Path],
        default_config: LogConfig,
        *,
        clock: Clock,
        topic_configs: Mapping[str, LogConfig] | None = None,
        log_dir_failure_channel: LogDirFailureChannel | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("log.dirs is empty; name at least one directory")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.live_log_dirs = list(self.log_dirs)
        self.log_dir_failure_channel = log_dir_failure_channel or LogDirFailureChannel()
        self.default_config = default_config
        self.topic_configs = dict(topic_configs or {})
        self._clock = clock
        self._logs: dict[TopicPartition, Log] = {}
        self._lock_fds: list[int] = []
        # leader-epoch checkpoints written off the event loop, batched (KAFKA-15046)
        self.checkpoint_flusher = CheckpointFlusher()
        # what each checkpoint file was last written with: an unchanged one is not written (nor fsynced) again
        self._written: dict[Path, dict[TopicPartition, int]] = {}
        # checkpoint files are written on the loop and (the high watermarks) in a thread: one at a time, newest wins
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_writes = 0
        self._checkpoint_written: dict[Path, int] = {}
        # logs with segments waiting for file.delete.delay.ms: the only ones delete_expired_files looks at
        self._pending_deletes: set[Log] = set()

    @property
    def logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def config_for(self, topic: str) -> LogConfig:
        return self.topic_configs.get(topic, self.default_config)

    def _io(self, log_dir: Path, action: str):
        return self.log_dir_failure_channel.guard(log_dir, lambda: f"Error while {action} in dir {log_dir}")

    # -------------------------------------------------------------------------------------- startup

    def startup(self) -> None:
        """Lock every log dir and open every partition in it, recovering after an unclean shutdown.

        Raises KafkaStorageError when a directory cannot be read or recovered (Kafka stops at start-up then)."""
        for log_dir in self.log_dirs:
            with self._io(log_dir, "loading logs"):
                self._load_dir(log_dir)

    def _load_dir(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._lock(log_dir)
        marker = log_dir / CLEAN_SHUTDOWN_MARKER
        had_clean_shutdown = marker.exists()
        if not had_clean_shutdown and any(p.is_dir() for p in log_dir.iterdir()):
            log.warning("%s: no clean shutdown marker; recovering logs from their recovery points", log_dir)
        recovery_points = self._read_or_empty(log_dir / RECOVERY_POINT_CHECKPOINT)
        log_start_offsets = self._read_or_empty(log_dir / LOG_START_OFFSET_CHECKPOINT)
        for partition_dir in sorted(p for p in log_dir.iterdir() if p.is_dir()):
            try:
                tp = parse_topic_partition(partition_dir.name)
            except ValueError:
                continue  # e.g. Kafka's "-delete" and "-future" directories
            if tp in self._logs:
                raise RuntimeError(
                    f"partition {tp[0]}-{tp[1]} exists in {self._logs[tp].log_dir} and in {log_dir}; "
                    "remove one copy"
                )
            self._logs[tp] = Log.open(
                partition_dir,
                self.config_for(tp[0]),
                clock=self._clock,
                log_start_offset=log_start_offsets.get(tp, 0),
                recovery_point=recovery_points.get(tp, 0),
                had_clean_shutdown=had_clean_shutdown,
                log_dir_failure_channel=self.log_dir_failure_channel,
                checkpoint_flusher=self.checkpoint_flusher,
            )
            self._watch_deletes(self._logs[tp])
        # Removed only once every log is loaded: a crash during loading recovers again.
        marker.unlink(missing_ok=True)

    def _lock(self, log_dir: Path) -> None:
        fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirInUseError(
                f"{log_dir} is locked by another process; is another broker using the same log.dirs?"
            ) from None
        self._lock_fds.append(fd)

    @staticmethod
    def _read_or_empty(path: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(path).read()
        except CorruptCheckpointError as e:
            # Falling back to 0 only costs a longer recovery (or keeps a few deleted records).
            log.error("%s; ignoring it", e)
            return {}

    # ------------------------------------------------------------------------------------- per log

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int) -> Log:
        """The partition's log; a new one goes to the log dir holding the fewest partitions."""
        existing = self._logs.get((topic, partition))
        if existing is not None:
            return existing
        if not _LEGAL_TOPIC.match(topic) or topic in (".", ".."):
            raise ValueError(f"illegal topic name {topic!r}: use up to 249 of [a-zA-Z0-9._-]")
        if not self.live_log_dirs:
            raise KafkaStorageError(self.log_dirs[0], f"cannot create a log for {topic}-{partition}: every log dir "
                                                      f"({', '.join(map(str, self.log_dirs))}) is offline")
        live = self.live_log_dirs
        if len(live) == 1:
            # the usual case: nothing to choose (counting every log per new one made a LeaderAndIsr creating a
            # thousand partitions quadratic, a third of its apply)
            log_dir = live[0]
        else:
            counts = {d: 0 for d in live}
            for opened in self._logs.values():
                counts[opened.log_dir] = counts.get(opened.log_dir, 0) + 1
            log_dir = min(live, key=lambda d: counts[d])
        with self._io(log_dir, f"creating the log of {topic}-{partition}"):
            created = Log.open(log_dir / f"{topic}-{partition}", self.config_for(topic), clock=self._clock,
                               log_dir_failure_channel=self.log_dir_failure_channel,
                               checkpoint_flusher=self.checkpoint_flusher)
        self._logs[(topic, partition)] = created
        self._watch_deletes(created)
        log.info("created log %s", created.directory)
        return created

    def truncate_to(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Truncate follower logs, then checkpoint recovery points so a crash cannot resurrect data."""
        touched = set()
        for tp, offset in offsets.items():
            if self._logs[tp].truncate_to(offset):
                touched.add(self._logs[tp].log_dir)
        for log_dir in touched:
            self._checkpoint_recovery_points_in(log_dir)

    def truncate_fully_and_start_at(self, tp: TopicPartition, offset: int) -> None:
        self._logs[tp].truncate_fully_and_start_at(offset)
        self._checkpoint_recovery_points_in(self._logs[tp].log_dir)

    def delete_log(self, tp: TopicPartition) -> None:
        removed = self._logs.pop(tp, None)
        if removed is not None:
            removed.delete()

    # ------------------------------------------------------------------------------- periodic work

    def flush_dirty_logs(self) -> int:
        """flush.ms: flush every log whose last flush is older than its setting. Returns logs flushed."""
        return sum(1 for opened in self._logs.values() if opened.flush_if_due())

    def cleanup_logs(self, high_watermarks: Mapping[TopicPartition, int]) -> int:
        """Retention for every log whose high watermark is known. Returns segments deleted."""
        deleted = 0
        for tp, opened in self._logs.items():
            if tp in high_watermarks:
                deleted += opened.delete_old_segments(high_watermarks[tp])
        return deleted

    def delete_expired_files(self) -> None:
        # only the logs that scheduled deletions: asking every log every second (through its storage guard) cost
        # an idle broker more than anything else at a thousand partitions
        for opened in list(self._pending_deletes):
            if self._logs.get((opened.topic, opened.partition)) is not opened:
                self._pending_deletes.discard(opened)  # deleted, or its directory went offline
                continue
            opened.delete_expired_files()
            if not opened.has_pending_deletes:
                self._pending_deletes.discard(opened)

    def _watch_deletes(self, opened: Log) -> None:
        opened.on_deletes_scheduled = self._pending_deletes.add
        if opened.has_pending_deletes:
            self._pending_deletes.add(opened)

    def checkpoint_recovery_points(self) -> None:
        for log_dir in self.live_log_dirs:
            self._checkpoint_recovery_points_in(log_dir)

    def _checkpoint_recovery_points_in(self, log_dir: Path) -> None:
        points = {tp: opened.recovery_point for tp, opened in self._in_dir(log_dir)}
        self._write_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, points, "writing the recovery point checkpoint")

    def checkpoint_log_start_offsets(self) -> None:
        for log_dir in self.live_log_dirs:
            # Kafka lists only logs whose start moved past their first segment's base offset.
            starts = {
                tp: opened.log_start_offset
                for tp, opened in self._in_dir(log_dir)
                if opened.log_start_offset > opened.segments[0].base_offset
            }
            self._write_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, starts,
                                   "writing the log start offset checkpoint")

    def write_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """replication-offset-checkpoint of each log dir, for the partitions it holds."""
        for log_dir in self.live_log_dirs:
            in_dir = {tp: high_watermarks[tp] for tp, _ in self._in_dir(log_dir) if tp in high_watermarks}
            self._write_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, in_dir,
                                   "writing the high watermark checkpoint")

    async def write_high_watermarks_in_thread(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """``write_high_watermarks`` with each file written and fsynced in a thread, as Kafka's scheduler thread
        writes it (not a request handler): on the event loop, the temp file, its fsync, the rename and the
        directory's fsync took 5-15 ms every 5 s on a busy disk, and every produce and fetch of the broker waited
        (docs/compaction.md). The contents are taken here, on the loop; an error is reported here, on the loop,
        through the log dir failure channel, as a write in place reports it."""
        action = "writing the high watermark checkpoint"
        for log_dir in self.live_log_dirs:
            in_dir = {tp: high_watermarks[tp] for tp, _ in self._in_dir(log_dir) if tp in high_watermarks}
            path = log_dir / REPLICATION_OFFSET_CHECKPOINT
            if self._written.get(path) == in_dir:
                continue
            with self._io(log_dir, action):  # refused when the directory is offline already
                self._checkpoint_writes += 1
            generation = self._checkpoint_writes
            error: OSError | None = None
            try:
                await asyncio.to_thread(self._write_unless_newer, path, in_dir, generation)
            except OSError as exc:
                error = exc
            with self._io(log_dir, action):
                if error is not None:
                    raise error
            self._written[path] = in_dir

    def _write_unless_newer(self, path: Path, offsets: dict[TopicPartition, int], generation: int) -> None:
        # a write in place (the shutdown's) may have come while this one waited: an older content never replaces it
        with self._checkpoint_lock:
            if self._checkpoint_written.get(path, 0) > generation:
                return
            OffsetCheckpointFile(path).write(offsets)
            self._checkpoint_written[path] = generation

    def _write_checkpoint(self, path: Path, offsets: dict[TopicPartition, int], action: str) -> None:
        # an idle broker's checkpoints do not change: rewriting and fsyncing them every few seconds is all cost
        if self._written.get(path) == offsets:
            return
        with self._io(path.parent, action):
            self._checkpoint_writes += 1
            self._write_unless_newer(path, offsets, self._checkpoint_writes)
        self._written[path] = offsets

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        """All checkpointed high watermarks. Raises CorruptCheckpointError."""
        merged: dict[TopicPartition, int] = {}
        for log_dir in self.live_log_dirs:
            merged.update(OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).read())
        return merged

    def _in_dir(self, log_dir: Path) -> list[tuple[TopicPartition, Log]]:
        return [(tp, opened) for tp, opened in self._logs.items() if opened.log_dir == log_dir]

    # --------------------------------------------------------------------------------- log dir failure

    def handle_log_dir_failure(self, log_dir: Path) -> list[TopicPartition]:
        """Kafka's LogManager.handleLogDirFailure: stop serving the directory's logs. Their files are closed
        without a flush (the disk failed) and stay as they are for the recovery at the next start.
        Returns the partitions whose logs were there; :attr:`live_log_dirs` says what is left."""
        log.warning("Stopping serving logs in dir %s", log_dir)
        if log_dir in self.live_log_dirs:
            self.live_log_dirs.remove(log_dir)
        offline = [tp for tp, opened in self._in_dir(log_dir)]
        for tp in offline:
            with contextlib.suppress(OSError):  # buffered index bytes may fail to reach the full disk again
                self._logs.pop(tp).close()
        return offline

    # ------------------------------------------------------------------------------------- shutdown

    def shutdown(self) -> None:
        """Flush everything, write the checkpoints, then the clean shutdown marker that skips recovery.

        Offline directories get no marker: their logs must be recovered at the next start."""
        for opened in self._logs.values():
            opened.flush()  # deferred leader-epoch checkpoints included
        self.checkpoint_flusher.close()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        for opened in self._logs.values():
            opened.close()
        for log_dir in self.live_log_dirs:
            with self._io(log_dir, "writing the clean shutdown marker"):
                (log_dir / CLEAN_SHUTDOWN_MARKER).touch()
                fsync_directory(log_dir)
        for fd in self._lock_fds:
            os.close(fd)
        self._lock_fds = []
        self._logs = {}
