"""Coalescing of high-rate trace events, driven with an explicit clock."""

from __future__ import annotations

from traces.coalesce import Coalescer, Tallies


def test_one_event_per_key_per_interval_and_the_folded_count_goes_with_the_next():
    c = Coalescer(interval_ms=100)
    assert c.admit("a", 0) == 0
    assert c.admit("a", 50) is None
    assert c.admit("a", 99) is None
    assert c.admit("b", 99) == 0          # keys are independent
    assert c.admit("a", 100) == 2         # two updates folded into this one


def test_a_forced_update_always_goes_through():
    c = Coalescer(interval_ms=100)
    c.admit("a", 0)
    assert c.admit("a", 10) is None
    assert c.admit("a", 20, force=True) == 1
    assert c.admit("a", 30) is None       # and the interval starts again from it


def test_tallies_sum_until_the_interval_ends_and_quiet_ones_are_flushed_when_due():
    t = Tallies(interval_ms=100)
    assert t.add("f1", 0, items=2, size=10, wait_ms=5.0, offsets={"t-0": 3}) is None
    assert t.add("f2", 20, items=1, size=1) is None
    done = t.add("f1", 120, items=1, size=5, wait_ms=9.0, offsets={"t-0": 7})
    assert (done.count, done.items, done.bytes, done.wait_ms_total, done.wait_ms_max) == (2, 3, 15, 14.0, 9.0)
    assert done.last_offsets == {"t-0": 7}
    assert set(t.due(119)) == set()
    assert set(t.due(120)) == {"f2"}
    assert t.drain() == {}
