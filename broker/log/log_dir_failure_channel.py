"""LogDirFailureChannel (KIP-112): where every I/O error in a log directory is reported.

Kafka turns any IOException of a log, a segment, an index or a checkpoint into a KafkaStorageException and
puts the directory on this channel once; the broker's failure handler takes it from there (stops serving the
replicas in it, and shuts the broker down when no directory is left). A directory stays offline until the
process ends: a disk that failed once is not trusted again without a restart and a log recovery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from broker.log.errors import KafkaStorageError

log = logging.getLogger(__name__)

# (log dir, what failed and why): told once per directory, on the thread that hit the error
OfflineListener = Callable[[Path, str], None]


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._offline: dict[Path, str] = {}
        self._listeners: list[OfflineListener] = []

    def add_listener(self, listener: OfflineListener) -> None:
        self._listeners.append(listener)

    def has_offline_log_dir(self, log_dir: Path) -> bool:
        return log_dir in self._offline

    @property
    def offline_log_dirs(self) -> dict[Path, str]:
        """Each offline directory with the first error that took it offline."""
        return dict(self._offline)

    def maybe_add_offline_log_dir(self, log_dir: Path, message: str, error: OSError) -> None:
        reason = f"{message}: {describe(error)}"
        log.error("%s", reason)
        if log_dir in self._offline:
            return
        self._offline[log_dir] = reason
        for listener in self._listeners:
            listener(log_dir, reason)

    def guard(self, log_dir: Path, message: str | Callable[[], str]) -> _IOGuard:
        """``with channel.guard(dir, "Error while ..."):`` — Kafka's maybeHandleIOException: refuses work in a
        directory already offline, and turns an OSError into KafkaStorageError after reporting the directory.
        A callable message is built only on an error (the guard sits on every append and read)."""
        return _IOGuard(self, log_dir, message)


class _IOGuard:
    __slots__ = ("_channel", "_log_dir", "_message")

    def __init__(self, channel: LogDirFailureChannel, log_dir: Path, message: str | Callable[[], str]) -> None:
        self._channel, self._log_dir, self._message = channel, log_dir, message

    def __enter__(self) -> None:
        reason = self._channel._offline.get(self._log_dir)
        if reason is not None:
            raise KafkaStorageError(self._log_dir, f"the log dir {self._log_dir} is offline since an earlier I/O "
                                                   f"error ({reason})")

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if isinstance(error, OSError):
            message = self._message if isinstance(self._message, str) else self._message()
            self._channel.maybe_add_offline_log_dir(self._log_dir, message, error)
            raise KafkaStorageError(self._log_dir, f"{message}: {describe(error)}") from error


def describe(error: OSError) -> str:
    """``[Errno 28] No space left on device`` without the file name repeated after it."""
    if error.errno is not None and error.strerror:
        return f"[Errno {error.errno}] {error.strerror}"
    return str(error) or type(error).__name__
