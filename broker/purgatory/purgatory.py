"""DelayedOperationPurgatory: delayed operations watched by key, expired by a timing wheel.

Pure and synchronous: whoever owns the purgatory passes "now" in milliseconds. Expiry happens either
through ``advance_clock`` (tests, simulations) or by an IO adapter driving ``purgatory.timer`` and running
the tasks it returns (see ``asyncio_timer``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from broker.purgatory.delayed_operation import DelayedOperation
from broker.purgatory.timing_wheel import Timer

# Kafka's default for {producer,fetch,...}.purgatory.purge.interval.requests.
DEFAULT_PURGE_INTERVAL_REQUESTS = 1000


@dataclass(frozen=True, slots=True)
class TopicPartitionOperationKey:
    """Watch key of produce, fetch and delete-records operations."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    """Watch key of join and sync operations of a consumer group."""

    group_id: str


class DelayedOperationPurgatory:
    """Operations waiting on keys (topic-partitions, groups, ...) until completed or expired."""

    def __init__(
        self,
        name: str,
        timer: Timer | None = None,
        purge_interval_requests: int = DEFAULT_PURGE_INTERVAL_REQUESTS,
    ) -> None:
        self.name = name
        self.timer = timer if timer is not None else Timer()
        self.purge_interval_requests = purge_interval_requests
        # Kafka shards watchers into 512 locked lists to spread contention; one loop needs one dict.
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        # Operations added to watcher lists since the last purge, counted once however many keys.
        self._estimated_total_operations = 0

    @property
    def watched(self) -> int:
        """Entries in all watcher lists, completed ones not yet purged included (Kafka's ``watched``)."""
        return sum(len(operations) for operations in self._watchers.values())

    @property
    def num_delayed(self) -> int:
        """Operations waiting in the timer (Kafka's ``numDelayed``; the whole timer if it is shared)."""
        return self.timer.size

    def watch_keys(self) -> list[Hashable]:
        return list(self._watchers)

    def try_complete_else_watch(self, operation: DelayedOperation, keys: Iterable[Hashable], now_ms: int) -> bool:
        """Complete ``operation`` now if possible, else watch it on every key and start its timeout.

        Returns True only if it completed during this call. Kafka tries a second time after watching,
        because another thread may have changed the condition in between; on one loop nothing can, so
        one try is enough.
        """
        if operation.try_complete():
            return True
        self.watch(operation, keys, now_ms)
        return False

    def watch(self, operation: DelayedOperation, keys: Iterable[Hashable], now_ms: int) -> None:
        """Watch ``operation`` on every key and start its timeout, without trying it first: for a caller that
        has just found it cannot complete (on one loop nothing can have changed since)."""
        watched = False
        for key in keys:
            self._watchers.setdefault(key, []).append(operation)
            watched = True
        if watched:
            self._estimated_total_operations += 1
        if not self.timer.add(operation, now_ms):
            operation.run()  # a zero (or negative) timeout: it expires right away
        self._purge_if_needed()

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete the operations watching ``key``; return how many this call completed."""
        operations = self._watchers.get(key)
        if not operations:
            return 0
        completed = 0
        # Iterate a copy: on_complete may watch new operations on this very key.
        for operation in tuple(operations):
            if not operation.is_completed and operation.try_complete():
                completed += 1
        self._drop_completed(key)
        return completed

    def cancel_for_key(self, key: Hashable) -> list[DelayedOperation]:
        """Stop watching ``key``; cancel the timeouts of its pending operations without completing them."""
        operations = self._watchers.pop(key, [])
        cancelled = [operation for operation in operations if not operation.is_completed]
        for operation in cancelled:
            operation.cancel()
        return cancelled

    def advance_clock(self, now_ms: int) -> list[DelayedOperation]:
        """Expire the operations due by ``now_ms`` (``on_complete`` then ``on_expiration``); return them."""
        expired = self.timer.advance_clock(now_ms)
        for operation in expired:
            operation.run()
        self._purge_if_needed()
        return expired

    def purge_completed(self) -> int:
        """Remove completed operations from every watcher list; return how many entries went."""
        before = self.watched
        for key in list(self._watchers):
            self._drop_completed(key)
        self._estimated_total_operations = self.num_delayed
        return before - self.watched

    def _purge_if_needed(self) -> None:
        # An operation completed through one key (or by expiry) stays in its other keys' lists until
        # those keys are checked again; Kafka sweeps once the estimate exceeds the pending count by
        # more than the purge interval, which bounds the garbage without scanning on every request.
        if self._estimated_total_operations - self.num_delayed > self.purge_interval_requests:
            self.purge_completed()

    def _drop_completed(self, key: Hashable) -> None:
        operations = self._watchers.get(key)
        if operations is None:
            return
        operations[:] = [operation for operation in operations if not operation.is_completed]
        if not operations:
            del self._watchers[key]
