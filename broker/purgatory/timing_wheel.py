"""Hierarchical timing wheel (Kafka's SystemTimer), sans-IO: the caller passes "now" in milliseconds.

Level 0 has ``wheel_size`` buckets of ``tick_ms`` each; level k+1 has buckets as wide as level k's whole
span, and is created only when a task lands beyond every existing level. Each bucket is a circular doubly
linked list of tasks, so cancelling a task is O(1) and adding one costs a bisect over the levels (measured
against a dict per bucket: the list is faster and ~50 bytes a task smaller). Only
buckets, never tasks, go into the expiry queue (a heap here, Kafka's DelayQueue there): with thousands of
pending requests the queue holds at most ``wheel_size`` entries per level. When a coarse bucket expires
its tasks are put back into the timer; those not yet due fall into a finer level, the others expire.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from heapq import heappop, heappush
from itertools import count


class TimerTask:
    """Something to run ``delay_ms`` after it is added to a Timer: give an ``action`` or override ``run``."""

    # The task is its own list node (Kafka keeps a separate TimerTaskEntry): one object per pending
    # task keeps adds and cancels cheap, and a task still sits in at most one bucket at a time.
    # _prev and _next are set when the task joins a bucket and read only while it is in one.
    __slots__ = ("_bucket", "_next", "_prev", "action", "delay_ms", "expiration_ms")

    def __init__(self, delay_ms: int, action: Callable[[], object] | None = None) -> None:
        self.delay_ms = delay_ms
        self.expiration_ms = -1
        self.action = action
        self._bucket: _Bucket | None = None

    def run(self) -> None:
        """Called by whoever drives the timer, once the task has expired."""
        if self.action is not None:
            self.action()

    @property
    def pending(self) -> bool:
        """True while the task sits in a timer bucket."""
        return self._bucket is not None

    def cancel(self) -> bool:
        """Unlink the task from its bucket in O(1); returns False if it was not pending."""
        bucket = self._bucket
        if bucket is None:
            return False
        previous = self._prev
        following = self._next
        previous._next = following
        following._prev = previous
        self._bucket = self._prev = self._next = None
        bucket.counter.value -= 1
        return True


class _TaskCounter:
    """Pending tasks of one timer, shared by its buckets (Kafka's taskCounter)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class _Bucket:
    """Kafka's TimerTaskList: the bucket is the sentinel node of a circular list of its tasks."""

    __slots__ = ("_next", "_prev", "counter", "expiration_ms")

    def __init__(self, counter: _TaskCounter) -> None:
        self.expiration_ms = -1  # -1: not in the expiry queue
        self.counter = counter
        self._prev: TimerTask | _Bucket = self
        self._next: TimerTask | _Bucket = self

    def drain(self) -> list[TimerTask]:
        """Unlink every task and reset the bucket so that it can be scheduled again."""
        tasks = []
        node = self._next
        while node is not self:
            following = node._next
            node._bucket = node._prev = node._next = None
            tasks.append(node)
            node = following
        self._prev = self._next = self
        self.counter.value -= len(tasks)
        self.expiration_ms = -1
        return tasks

    def is_empty(self) -> bool:
        return self._next is self


class TimingWheel:
    """One level: ``wheel_size`` buckets of ``tick_ms``, spanning ``interval_ms`` from ``current_time_ms``."""

    __slots__ = ("buckets", "current_time_ms", "interval_ms", "tick_ms", "wheel_size")

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, counter: _TaskCounter) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - start_ms % tick_ms
        self.buckets = [_Bucket(counter) for _ in range(wheel_size)]


class Timer:
    """The wheels, their shared bucket expiry queue and the clock they were last advanced to."""

    def __init__(self, start_ms: int = 0, tick_ms: int = 1, wheel_size: int = 20) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError("tick_ms must be >= 1 and wheel_size >= 2")
        self._now_ms = start_ms
        self._counter = _TaskCounter()
        self._wheels = [TimingWheel(tick_ms, wheel_size, start_ms, self._counter)]
        # _bounds[0] is the first instant not yet expired; _bounds[k + 1] the end of level k's span.
        # One bisect over it finds the level a new task belongs to; _slots[k + 1] holds that level's
        # (tick_ms, wheel_size, buckets), read in one go on the add path.
        self._bounds: list[int] = []
        self._slots: list[tuple[int, int, list[_Bucket]] | None] = []
        self._refresh_bounds()
        self._queue: list[tuple[int, int, _Bucket]] = []
        self._sequence = count()
        # Called with the new earliest bucket expiry when an add makes it earlier (wakes an IO adapter).
        self.on_earlier_expiration: Callable[[int], object] | None = None

    @property
    def now_ms(self) -> int:
        """The time last passed to ``advance_clock`` (or the start time)."""
        return self._now_ms

    @property
    def size(self) -> int:
        """Number of pending tasks."""
        return self._counter.value

    @property
    def levels(self) -> int:
        """Number of wheels created so far (overflow wheels appear lazily)."""
        return len(self._wheels)

    def add(self, task: TimerTask, now_ms: int | None = None) -> bool:
        """Schedule ``task`` at ``now_ms + task.delay_ms`` (``now_ms`` defaults to ``self.now_ms``).

        Returns False when the task is already due: it is not kept, and the caller should run it now
        (Kafka hands it straight to the executor). Adding a pending task again reschedules it.
        """
        if task._bucket is not None:
            task.cancel()
        expiration = task.delay_ms + (self._now_ms if now_ms is None else now_ms)
        task.expiration_ms = expiration
        return self._place(task, expiration)

    def _place(self, task: TimerTask, expiration: int) -> bool:
        """Put ``task`` into the bucket of the finest level that spans ``expiration``; False if it is due."""
        bounds = self._bounds
        index = bisect_right(bounds, expiration)
        if index == 0:
            return False
        if index == len(bounds):
            index = self._grow(expiration)
        # The level whose span starts at bounds[index - 1].
        tick, wheel_size, buckets = self._slots[index]
        virtual_id = expiration // tick
        bucket = buckets[virtual_id % wheel_size]
        tail = bucket._prev
        task._prev = tail
        task._next = bucket
        tail._next = task
        bucket._prev = task
        task._bucket = bucket
        bucket.counter.value += 1
        if bucket.expiration_ms != virtual_id * tick:
            self._schedule(bucket, virtual_id * tick)
        return True

    def _schedule(self, bucket: _Bucket, bucket_expiration: int) -> None:
        """Queue an idle bucket (one is reused only after it expired and was drained)."""
        bucket.expiration_ms = bucket_expiration
        queue = self._queue
        heappush(queue, (bucket_expiration, next(self._sequence), bucket))
        if queue[0][2] is bucket and self.on_earlier_expiration is not None:
            self.on_earlier_expiration(bucket_expiration)

    def _grow(self, expiration: int) -> int:
        """Create overflow wheels until one spans ``expiration``; return its index in ``_bounds``."""
        while expiration >= self._bounds[-1]:
            top = self._wheels[-1]
            self._wheels.append(TimingWheel(top.interval_ms, top.wheel_size, top.current_time_ms, self._counter))
            self._refresh_bounds()
        return len(self._bounds) - 1

    def _refresh_bounds(self) -> None:
        wheels = self._wheels
        bounds = [wheels[0].current_time_ms + wheels[0].tick_ms]
        bounds.extend(wheel.current_time_ms + wheel.interval_ms for wheel in wheels)
        self._bounds = bounds
        if len(self._slots) != len(wheels) + 1:
            self._slots = [None, *((wheel.tick_ms, wheel.wheel_size, wheel.buckets) for wheel in wheels)]

    def _set_time(self, time_ms: int) -> None:
        for wheel in self._wheels:
            wheel.current_time_ms = time_ms - time_ms % wheel.tick_ms
        self._refresh_bounds()

    def advance_clock(self, now_ms: int) -> list[TimerTask]:
        """Expire every bucket due by ``now_ms``; return the tasks that are due, in expiry order.

        The tasks are not run here: the caller runs them (``task.run()``), after the timer is
        consistent again, so a task may freely add or cancel other tasks.
        """
        if now_ms < self._now_ms:
            return []  # the clock is monotonic; an older reading changes nothing
        expired: list[TimerTask] = []
        queue = self._queue
        # Buckets refilled while cascading are no news to the caller, who asks next_expiration_ms after.
        listener, self.on_earlier_expiration = self.on_earlier_expiration, None
        try:
            while queue and queue[0][0] <= now_ms:
                bucket_expiration, _, bucket = heappop(queue)
                # Move the wheels to the bucket's time first, so that its tasks fall into finer buckets.
                self._set_time(bucket_expiration)
                for task in bucket.drain():
                    if not self._place(task, task.expiration_ms):
                        expired.append(task)
        finally:
            self.on_earlier_expiration = listener
        # Kafka's wheels only move to bucket expiry times; moving them to "now" as well (safe: every
        # bucket due by now was drained above) lets tasks added later land in the right level directly.
        self._set_time(now_ms)
        self._now_ms = now_ms
        return expired

    def next_expiration_ms(self) -> int | None:
        """When the earliest non-empty bucket expires (None if no task is pending).

        Never later than the earliest task's expiration: sleeping until then and calling
        ``advance_clock`` fires every task on time (a coarse bucket may wake the caller early).
        """
        queue = self._queue
        while queue and queue[0][2].is_empty():
            # Every task of this bucket was cancelled: it has nothing to expire.
            heappop(queue)[2].expiration_ms = -1
        return queue[0][0] if queue else None
