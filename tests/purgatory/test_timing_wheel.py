"""The timing wheel driven directly with a fake clock (milliseconds as plain integers)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.purgatory.timing_wheel import Timer, TimerTask

ONE_HOUR_MS = 3_600_000


def fire_time_when_driven_by_next_expiration(timer: Timer, limit_ms: int) -> tuple[int, list[int]]:
    """Advance only to the times the timer asks for; return when the first task fired and the wake-ups."""
    wakeups = []
    while (next_ms := timer.next_expiration_ms()) is not None and next_ms <= limit_ms:
        wakeups.append(next_ms)
        if timer.advance_clock(next_ms):
            return next_ms, wakeups
    raise AssertionError(f"nothing fired by {limit_ms} ms; woke at {wakeups}")


@pytest.mark.parametrize("delay_ms", [1, 2, 19, 20, 21, 399, 400, 401, 7_999, 8_000, 160_001, ONE_HOUR_MS])
def test_a_task_fires_at_its_expiration_and_not_a_millisecond_before(delay_ms):
    timer = Timer(start_ms=1_000)
    task = TimerTask(delay_ms)
    assert timer.add(task)

    assert timer.advance_clock(1_000 + delay_ms - 1) == []
    assert task.pending and timer.size == 1
    assert timer.advance_clock(1_000 + delay_ms) == [task]
    assert not task.pending and timer.size == 0


@pytest.mark.parametrize("delay_ms", [1, 19, 20, 400, 12_345, ONE_HOUR_MS])
def test_sleeping_until_each_next_expiration_fires_the_task_exactly_on_time(delay_ms):
    timer = Timer(start_ms=7)
    timer.add(TimerTask(delay_ms))

    fired_at, wakeups = fire_time_when_driven_by_next_expiration(timer, 7 + delay_ms)

    assert fired_at == 7 + delay_ms
    # One wake-up per level at most: coarse buckets wake the caller early, never late or often.
    assert len(wakeups) <= timer.levels


def test_overflow_wheels_are_created_only_when_a_delay_needs_them():
    timer = Timer()
    timer.add(TimerTask(19))
    assert timer.levels == 1
    timer.add(TimerTask(20))
    assert timer.levels == 2
    timer.add(TimerTask(400))
    assert timer.levels == 3
    timer.add(TimerTask(ONE_HOUR_MS))  # 20**5 ms = 53.3 min < 1 h < 20**6 ms
    assert timer.levels == 6


def test_an_expired_coarse_bucket_cascades_its_task_into_finer_wheels():
    timer = Timer()
    task = TimerTask(450)
    timer.add(task)
    # 450 ms sits in the 400 ms-wide bucket [400, 800) of the third wheel.
    assert timer.next_expiration_ms() == 400

    assert timer.advance_clock(400) == []
    # Re-inserted into the 20 ms-wide bucket [440, 460) of the second wheel ...
    assert timer.next_expiration_ms() == 440
    assert timer.advance_clock(440) == []
    # ... then into the 1 ms bucket of the first wheel.
    assert timer.next_expiration_ms() == 450
    assert timer.size == 1
    assert timer.advance_clock(450) == [task]


def test_one_big_clock_jump_expires_everything_due_in_expiration_order():
    timer = Timer()
    tasks = [TimerTask(delay) for delay in (ONE_HOUR_MS, 5, 450, 20)]
    for task in tasks:
        timer.add(task)

    expired = timer.advance_clock(ONE_HOUR_MS)

    assert [task.delay_ms for task in expired] == [5, 20, 450, ONE_HOUR_MS]
    assert timer.next_expiration_ms() is None


def test_a_cancelled_task_never_fires_and_leaves_the_timer():
    timer = Timer()
    kept, cancelled = TimerTask(30), TimerTask(30)
    timer.add(kept)
    timer.add(cancelled)

    assert cancelled.cancel()
    assert not cancelled.cancel()  # a second cancel is a no-op
    assert timer.size == 1
    assert timer.advance_clock(30) == [kept]


def test_next_expiration_skips_buckets_whose_tasks_were_all_cancelled():
    timer = Timer()
    early, late = TimerTask(5), TimerTask(9)
    timer.add(early)
    timer.add(late)
    early.cancel()
    assert timer.next_expiration_ms() == 9
    late.cancel()
    assert timer.next_expiration_ms() is None


def test_a_task_due_when_added_is_refused_for_the_caller_to_run_now():
    timer = Timer(start_ms=100)
    assert not timer.add(TimerTask(0))
    assert not timer.add(TimerTask(-5))
    assert timer.size == 0


def test_adding_a_pending_task_again_reschedules_it():
    timer = Timer()
    task = TimerTask(10)
    timer.add(task)
    timer.advance_clock(8)
    timer.add(task)  # now due at 18

    assert timer.size == 1
    assert timer.advance_clock(17) == []
    assert timer.advance_clock(18) == [task]


def test_add_counts_the_delay_from_the_given_now_even_if_the_clock_lags():
    timer = Timer()
    task = TimerTask(30)
    timer.add(task, now_ms=1_000)
    assert timer.advance_clock(1_029) == []
    assert timer.advance_clock(1_030) == [task]


def test_a_clock_reading_from_the_past_changes_nothing():
    timer = Timer()
    timer.advance_clock(50)
    task = TimerTask(1)
    timer.add(task)
    assert timer.advance_clock(10) == []
    assert timer.now_ms == 50
    assert timer.advance_clock(51) == [task]


def test_the_listener_hears_only_of_earlier_expiries():
    timer = Timer()
    heard = []
    timer.on_earlier_expiration = heard.append
    timer.add(TimerTask(300))  # the second wheel's 20 ms bucket starting at 300
    timer.add(TimerTask(500))  # later: not news
    timer.add(TimerTask(7))
    assert heard == [300, 7]


def test_a_task_runs_its_action():
    calls = []
    TimerTask(1, lambda: calls.append("ran")).run()
    assert calls == ["ran"]


def test_a_tick_and_wheel_size_other_than_kafkas_default_still_fire_on_the_tick():
    timer = Timer(tick_ms=10, wheel_size=4)
    task = TimerTask(1_234)
    timer.add(task)
    assert timer.advance_clock(1_229) == []
    # Expiry is resolved to the tick: due at 1234, it fires once the clock reaches the 1230 tick.
    assert timer.advance_clock(1_230) == [task]


# --- property test: the wheel against a sorted-list model --------------------------------------------

delays = st.one_of(
    st.integers(min_value=-3, max_value=25),
    st.integers(min_value=0, max_value=1_000),
    st.integers(min_value=0, max_value=200_000),
    st.integers(min_value=0, max_value=2 * ONE_HOUR_MS),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), delays),
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=10_000)),
        st.tuples(st.just("advance"), st.integers(min_value=0, max_value=30)),
        st.tuples(st.just("advance"), st.integers(min_value=0, max_value=ONE_HOUR_MS)),
        st.tuples(st.just("advance_to_next"), st.none()),
    ),
    max_size=80,
)


@settings(max_examples=500, deadline=None)
@given(start_ms=st.integers(min_value=0, max_value=10**9), operations=operations)
def test_the_wheel_expires_the_same_tasks_at_the_same_times_as_a_sorted_list(start_ms, operations):
    timer = Timer(start_ms=start_ms)
    now = start_ms
    model: list[tuple[int, int]] = []  # (expiration, id), kept sorted
    tasks: list[TimerTask] = []

    for action, argument in operations:
        if action == "add":
            task = TimerTask(argument)
            tasks.append(task)
            if timer.add(task):
                model.append((now + argument, len(tasks) - 1))
                model.sort()
            else:
                assert argument <= 0  # refused only when already due
        elif action == "cancel" and tasks:
            index = argument % len(tasks)
            in_model = any(task_id == index for _, task_id in model)
            assert tasks[index].cancel() == in_model
            model = [entry for entry in model if entry[1] != index]
        elif action in ("advance", "advance_to_next"):
            if action == "advance":
                now += argument
            else:
                next_ms = timer.next_expiration_ms()
                if next_ms is None:
                    continue
                now = next_ms
            due = [entry for entry in model if entry[0] <= now]
            model = model[len(due) :]
            fired = timer.advance_clock(now)
            assert sorted(tasks.index(task) for task in fired) == sorted(task_id for _, task_id in due)
            assert all(task.expiration_ms <= now for task in fired)

        assert timer.size == len(model)
        next_ms = timer.next_expiration_ms()
        if model:
            # Never later than the earliest task (nothing fires late), and nothing is left overdue.
            assert now < next_ms <= model[0][0]
        else:
            assert next_ms is None
