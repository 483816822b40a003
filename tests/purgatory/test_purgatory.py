"""DelayedOperationPurgatory with a fake clock: completion by key, expiry, purge of watcher lists."""

from broker.purgatory.delayed_operation import DelayedOperation
from broker.purgatory.purgatory import DelayedOperationPurgatory, GroupKey, TopicPartitionOperationKey

FOO_0 = TopicPartitionOperationKey("foo", 0)
FOO_1 = TopicPartitionOperationKey("foo", 1)
BAR_0 = TopicPartitionOperationKey("bar", 0)


class RecordingOperation(DelayedOperation):
    """Completes once ``ready`` is set; records every callback it receives."""

    def __init__(self, delay_ms, ready=False):
        super().__init__(delay_ms)
        self.ready = ready
        self.calls = []

    def try_complete(self):
        self.calls.append("try_complete")
        return self.force_complete() if self.ready else False

    def on_complete(self):
        self.calls.append("on_complete")

    def on_expiration(self):
        self.calls.append("on_expiration")

    def callbacks(self):
        return [call for call in self.calls if call != "try_complete"]


def test_an_operation_that_can_complete_at_once_is_neither_watched_nor_timed():
    purgatory = DelayedOperationPurgatory("Produce")
    operation = RecordingOperation(500, ready=True)

    assert purgatory.try_complete_else_watch(operation, [FOO_0], now_ms=0)

    assert operation.callbacks() == ["on_complete"]
    assert purgatory.watched == 0
    assert purgatory.num_delayed == 0


def test_an_operation_not_yet_satisfied_is_watched_on_every_key_and_timed():
    purgatory = DelayedOperationPurgatory("Produce")
    operation = RecordingOperation(500)

    assert not purgatory.try_complete_else_watch(operation, [FOO_0, FOO_1], now_ms=0)

    assert purgatory.watched == 2
    assert purgatory.num_delayed == 1
    assert set(purgatory.watch_keys()) == {FOO_0, FOO_1}


def test_check_and_complete_on_one_of_several_keys_completes_the_operation_once():
    purgatory = DelayedOperationPurgatory("Produce")
    operation = RecordingOperation(500)
    purgatory.try_complete_else_watch(operation, [FOO_0, FOO_1, BAR_0], now_ms=0)
    operation.ready = True

    assert purgatory.check_and_complete(FOO_1) == 1
    assert purgatory.check_and_complete(FOO_0) == 0
    assert purgatory.check_and_complete(BAR_0) == 0
    assert purgatory.advance_clock(10_000) == []

    assert operation.callbacks() == ["on_complete"]
    assert operation.is_completed
    assert purgatory.num_delayed == 0  # completing cancelled the timeout


def test_check_and_complete_leaves_unsatisfied_operations_watched():
    purgatory = DelayedOperationPurgatory("Fetch")
    waiting, satisfied = RecordingOperation(500), RecordingOperation(500)
    purgatory.try_complete_else_watch(waiting, [FOO_0], now_ms=0)
    purgatory.try_complete_else_watch(satisfied, [FOO_0], now_ms=0)
    satisfied.ready = True

    assert purgatory.check_and_complete(FOO_0) == 1
    assert purgatory.watched == 1
    assert not waiting.is_completed


def test_force_complete_succeeds_exactly_once():
    operation = RecordingOperation(500)
    assert operation.force_complete()
    assert not operation.force_complete()
    assert operation.callbacks() == ["on_complete"]


def test_an_expired_operation_completes_once_then_records_its_expiration():
    purgatory = DelayedOperationPurgatory("Produce")
    operation = RecordingOperation(500)
    purgatory.try_complete_else_watch(operation, [FOO_0], now_ms=1_000)

    assert purgatory.advance_clock(1_499) == []
    assert purgatory.advance_clock(1_500) == [operation]
    operation.ready = True
    assert purgatory.check_and_complete(FOO_0) == 0

    # Kafka's order: the timer task runs forceComplete (on_complete) and then on_expiration.
    assert operation.callbacks() == ["on_complete", "on_expiration"]
    assert purgatory.watched == 0  # check_and_complete dropped the expired entry


def test_an_operation_with_no_timeout_left_expires_during_the_call():
    purgatory = DelayedOperationPurgatory("Fetch")
    operation = RecordingOperation(0)

    assert not purgatory.try_complete_else_watch(operation, [FOO_0], now_ms=0)

    assert operation.callbacks() == ["on_complete", "on_expiration"]
    assert purgatory.num_delayed == 0


def test_completed_operations_are_purged_from_other_keys_after_the_purge_interval():
    purgatory = DelayedOperationPurgatory("Produce", purge_interval_requests=3)
    for _ in range(4):
        operation = RecordingOperation(30_000)
        purgatory.try_complete_else_watch(operation, [FOO_0, FOO_1], now_ms=0)
        operation.ready = True
        purgatory.check_and_complete(FOO_0)

    # Completed through FOO_0, they linger in FOO_1's list: nobody has checked that key.
    assert purgatory.watched == 4
    assert purgatory.watch_keys() == [FOO_1]

    # The next watched operation finds 5 watched against 1 pending: more than 3 are garbage, so sweep.
    purgatory.try_complete_else_watch(RecordingOperation(30_000), [BAR_0], now_ms=0)
    assert purgatory.watched == 1
    assert purgatory.watch_keys() == [BAR_0]


def test_purge_completed_sweeps_on_demand():
    purgatory = DelayedOperationPurgatory("Produce")
    operation = RecordingOperation(30_000)
    purgatory.try_complete_else_watch(operation, [FOO_0, FOO_1, BAR_0], now_ms=0)
    operation.force_complete()

    assert purgatory.purge_completed() == 3
    assert purgatory.watched == 0
    assert purgatory.watch_keys() == []


def test_cancel_for_key_stops_the_timeouts_without_completing():
    purgatory = DelayedOperationPurgatory("Rebalance")
    group = GroupKey("payments")
    operation = RecordingOperation(30_000)
    purgatory.try_complete_else_watch(operation, [group], now_ms=0)

    assert purgatory.cancel_for_key(group) == [operation]
    assert purgatory.num_delayed == 0
    assert purgatory.advance_clock(60_000) == []
    assert operation.callbacks() == []


def test_an_operation_watched_from_on_complete_on_the_same_key_is_not_lost():
    purgatory = DelayedOperationPurgatory("Fetch")
    follow_up = RecordingOperation(500)

    class ChainingOperation(RecordingOperation):
        def on_complete(self):
            super().on_complete()
            purgatory.try_complete_else_watch(follow_up, [FOO_0], now_ms=0)

    first = ChainingOperation(500)
    purgatory.try_complete_else_watch(first, [FOO_0], now_ms=0)
    first.ready = True

    assert purgatory.check_and_complete(FOO_0) == 1
    assert purgatory.watched == 1
    follow_up.ready = True
    assert purgatory.check_and_complete(FOO_0) == 1
