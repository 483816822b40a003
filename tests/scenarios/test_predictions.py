"""Predictions are checked against facts without a cluster: comparisons, remembered facts, what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.scenarios.model import Expect, check, resolve
from cluster.scenarios.registry import SCENARIOS
from cluster.scenarios.actions import ACTIONS


def test_an_isr_is_compared_as_a_set_of_replicas():
    assert check(1, Expect("isr:t", "==", [3, 1]), {"isr:t": [1, 3]}).held


def test_a_remembered_fact_is_the_expected_value():
    verdict = check(2, Expect("leader:t", "!=", "$old_leader"), {"leader:t": 2, "old_leader": 1})
    assert (verdict.held, verdict.expected, verdict.measured) == (True, 1, 2)


def test_a_remembered_number_plus_one():
    facts = {"controller_epoch": 4, "old_controller_epoch": 3}
    assert check(1, Expect("controller_epoch", "==", "$old_controller_epoch+1"), facts).held
    assert not check(1, Expect("controller_epoch", "==", "$old_controller_epoch+2"), facts).held


def test_a_prediction_that_does_not_hold_carries_the_measured_value():
    verdict = check(3, Expect("lost:t", "==", 0), {"lost:t": 7})
    assert (verdict.held, verdict.measured, verdict.problem) == (False, 7, "")


def test_a_fact_never_measured_does_not_hold_and_says_so():
    verdict = check(1, Expect("lost:t", "==", 0), {})
    assert not verdict.held and "not measured" in verdict.problem


def test_a_fact_never_remembered_does_not_hold_and_says_so():
    verdict = check(1, Expect("leader:t", "!=", "$old_leader"), {"leader:t": 1})
    assert not verdict.held and "old_leader" in verdict.problem


def test_values_that_cannot_be_compared_do_not_hold():
    verdict = check(1, Expect("lost:t", ">", 0), {"lost:t": None})
    assert not verdict.held and "cannot compare" in verdict.problem


@pytest.mark.parametrize(("comparison", "measured", "expected", "held"), [
    ("contains", [1, 2], 2, True), ("does not contain", [1, 2], 3, True), ("has size", [1], 1, True),
    ("is one of", 2, [1, 2], True), ("<", 1.2, 1.5, True), (">=", 1, 2, False)])
def test_each_comparison(comparison, measured, expected, held):
    assert check(1, Expect("f", comparison, expected), {"f": measured}).held is held


def test_an_unknown_comparison_is_refused_when_the_scenario_is_written():
    with pytest.raises(ValueError, match="unknown comparison"):
        Expect("f", "~", 1)


def test_arguments_are_resolved_inside_lists():
    assert resolve({"broker": ["$a", 3]}, {"a": 1}) == {"broker": [1, 3]}


def test_a_prediction_is_shown_with_the_remembered_value_once_known():
    assert Expect("leader:t", "!=", "$killed").describe({"killed": 2}) == "leader:t != 2 ($killed)"
    assert Expect("leader:t", "!=", "$killed").describe({}) == "leader:t != $killed"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_step_of_every_scenario_names_a_known_action(name):
    for step in SCENARIOS[name].steps:
        assert step.action in ACTIONS, step.narration


def test_the_example_in_the_docs_is_the_shipped_scenario_word_for_word():
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "scenarios.md").read_text()
    example = doc.split("```python\n", 1)[1].split("```\n", 1)[0]
    assert example == (root / "cluster" / "scenarios" / "library" / "controller_failover.py").read_text()
