"""The DelayedOperation contract: a request parked until a condition holds or its timeout passes."""

from __future__ import annotations

from broker.purgatory.timing_wheel import TimerTask


class DelayedOperation(TimerTask):
    """A request that completes when ``try_complete`` finds its condition met, or when it expires.

    Subclasses implement ``try_complete`` (check the condition; if met, ``return self.force_complete()``),
    ``on_complete`` (send the response: called exactly once, whichever way the operation ends) and
    ``on_expiration`` (metrics for timed-out requests: called after ``on_complete`` when the timer wins).

    Kafka guards each operation with a lock; one broker runs one asyncio loop, so nothing here can
    interleave and a plain flag gives the same "exactly once".
    """

    __slots__ = ("_completed",)

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self._completed = False

    @property
    def is_completed(self) -> bool:
        return self._completed

    def try_complete(self) -> bool:
        """Check the completion condition; return True only if this call completed the operation."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """Build and send the response."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Record that the operation timed out (the response was already sent by ``on_complete``)."""

    def force_complete(self) -> bool:
        """Complete unless already completed: leave the timer, run ``on_complete``; True if this call did."""
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        self.on_complete()
        return True

    def run(self) -> None:
        # The timer expired the operation: same path as Kafka's DelayedOperation.run.
        if self.force_complete():
            self.on_expiration()
