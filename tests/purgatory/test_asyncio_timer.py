"""The asyncio adapter with real (short) delays; conditions are awaited with deadlines, never slept on."""

import asyncio

from broker.purgatory.asyncio_timer import AsyncioTimer
from broker.purgatory.delayed_operation import DelayedOperation
from broker.purgatory.purgatory import DelayedOperationPurgatory, TopicPartitionOperationKey
from broker.purgatory.timing_wheel import Timer, TimerTask

DEADLINE_S = 5.0


def test_the_adapter_wakes_for_a_sooner_task_and_fires_tasks_in_order_not_early():
    async def scenario():
        loop = asyncio.get_running_loop()
        driver = AsyncioTimer(Timer())
        fired: list[tuple[int, float]] = []
        both_fired = asyncio.Event()

        def task_for(delay_ms):
            def record():
                fired.append((delay_ms, loop.time()))
                if len(fired) == 2:
                    both_fired.set()

            return TimerTask(delay_ms, record)

        # Sleeping until the hour-long task's bucket would miss the others: adding them must wake the driver.
        hour = task_for(3_600_000)
        driver.add(hour)
        cancelled = task_for(10)
        added_at = loop.time()
        for task in (task_for(30), cancelled, task_for(5)):
            driver.add(task)
        cancelled.cancel()

        await asyncio.wait_for(both_fired.wait(), DEADLINE_S)

        assert [delay for delay, _ in fired] == [5, 30]
        for delay_ms, fired_at in fired:
            # The clock is read in whole milliseconds: a task may run up to one tick early, never more.
            assert fired_at - added_at >= (delay_ms - 1) / 1000
        assert hour.pending and driver.timer.size == 1
        driver.close()

    asyncio.run(scenario())


def test_a_purgatory_on_the_adapter_expires_its_operations_by_itself():
    class Waiting(DelayedOperation):
        def __init__(self, delay_ms, done):
            super().__init__(delay_ms)
            self.done = done
            self.calls = []

        def try_complete(self):
            return False

        def on_complete(self):
            self.calls.append("on_complete")

        def on_expiration(self):
            self.calls.append("on_expiration")
            self.done.set()

    async def scenario():
        driver = AsyncioTimer(Timer())
        purgatory = DelayedOperationPurgatory("Fetch", timer=driver.timer)
        expired = asyncio.Event()
        operation = Waiting(20, expired)

        purgatory.try_complete_else_watch(operation, [TopicPartitionOperationKey("foo", 0)], driver.now_ms())
        await asyncio.wait_for(expired.wait(), DEADLINE_S)

        assert operation.calls == ["on_complete", "on_expiration"]
        assert purgatory.num_delayed == 0
        driver.close()

    asyncio.run(scenario())
