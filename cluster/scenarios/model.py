"""A scenario as data: its cluster, its topics and its steps, each step with what Kafka's rules predict.

A prediction names a *fact* (a value the observer read from ZooKeeper and the brokers after the step, or one an
action measured), a comparison and the expected value. The expected value may be a literal or ``"$name"``, a fact
remembered earlier in the run (``"$old_leader"``). Checking is pure: facts in, verdicts out.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "contains": lambda measured, expected: expected in measured,
    "does not contain": lambda measured, expected: expected not in measured,
    "has size": lambda measured, expected: len(measured) == expected,
    "is one of": lambda measured, expected: measured in expected,
}


@dataclass(frozen=True)
class Expect:
    """``fact`` ``comparison`` ``expected``, e.g. ``Expect("leader:events", "!=", "$old_leader")``."""

    fact: str
    comparison: str
    expected: Any
    why: str = ""  # the Kafka rule behind it, shown beside the prediction

    def __post_init__(self) -> None:
        if self.comparison not in COMPARISONS:
            raise ValueError(f"unknown comparison {self.comparison!r}; choose one of {', '.join(COMPARISONS)}")

    def describe(self, facts: Mapping[str, Any] | None = None) -> str:
        """``leader:t != $old_leader``, or with ``facts`` ``leader:t != 2 ($old_leader)`` once it is known."""
        try:
            expected = resolve(self.expected, facts or {})
        except UnknownFact:
            return f"{self.fact} {self.comparison} {_show(self.expected)}"
        named = f" ({self.expected})" if expected != self.expected else ""
        return f"{self.fact} {self.comparison} {_show(expected)}{named}"


@dataclass(frozen=True)
class Step:
    """What the teacher says, what is done (an action name and its arguments), and what Kafka predicts."""

    narration: str
    action: str
    args: Mapping[str, Any] = field(default_factory=dict)
    expect: tuple[Expect, ...] = ()
    # facts to keep under a name before the action runs, e.g. {"old_epoch": "leader_epoch:events"}
    remember: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Topic:
    name: str
    replicas: int = 3
    config: Mapping[str, str] = field(default_factory=dict)
    # who leads: "controller" (its leader never waits on another broker's controller role), "not-controller",
    # or None for the assignment ZooKeeper admin would choose
    leader: str | None = None
    # another topic whose replica list this one copies, so several topics share one leader (acks side by side)
    same_replicas_as: str | None = None
    partitions: int = 1  # each with the same replicas; the observer and read_all look at partition 0


# Broker settings every story's own cluster starts with (its ``overrides`` win): a story announces each leader
# change it shows, and an automatic preferred election between two steps would be one it did not announce
STORY_DEFAULTS: Mapping[str, str] = {"auto.leader.rebalance.enable": "false"}


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    summary: str
    steps: tuple[Step, ...]
    topics: tuple[Topic, ...] = ()
    brokers: int = 3
    profile: str = "classroom"
    overrides: Mapping[str, str] = field(default_factory=dict)
    next_steps: tuple[str, ...] = ()  # printed at the end: what to try next
    # the pause after each step at --speed 1, for the class to read the tables; a story of many short steps
    # (four elections in a row) pauses less so that --auto still tells it within a minute
    pause_s: float = 2.0
    # every process in a network namespace of its own (root), for a story that cuts links (`kafkasim net`);
    # with --existing/--bootstrap the cluster must be such a one
    netns: bool = False


@dataclass(frozen=True)
class Verdict:
    step: int
    expect: Expect
    expected: Any   # after resolving "$name"
    measured: Any
    held: bool
    problem: str = ""  # the fact was never measured, or could not be compared


class UnknownFact(KeyError):
    pass


def resolve(value: Any, facts: Mapping[str, Any]) -> Any:
    """``"$name"`` → the fact ``name`` (``"$name+1"``: a number one more); lists and dicts are resolved element by
    element; anything else as is."""
    if isinstance(value, str) and value.startswith("$"):
        name, plus, number = value[1:].partition("+")
        if name not in facts:
            raise UnknownFact(name)
        return facts[name] + int(number) if plus else facts[name]
    if isinstance(value, list | tuple):
        return [resolve(v, facts) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, facts) for k, v in value.items()}
    return value


def check(step: int, expect: Expect, facts: Mapping[str, Any]) -> Verdict:
    try:
        expected = resolve(expect.expected, facts)
    except UnknownFact as exc:
        return Verdict(step, expect, expect.expected, None, False, f"nothing remembered as {exc.args[0]!r}")
    if expect.fact not in facts:
        return Verdict(step, expect, expected, None, False, f"fact {expect.fact!r} was not measured")
    measured = facts[expect.fact]
    try:
        held = bool(COMPARISONS[expect.comparison](_comparable(measured), _comparable(expected)))
    except TypeError as exc:
        return Verdict(step, expect, expected, measured, False, f"cannot compare: {exc}")
    return Verdict(step, expect, expected, measured, held)


def _comparable(value: Any) -> Any:
    # an ISR [2, 3] and [3, 2] are the same set of replicas; tuples and lists compare alike
    if isinstance(value, list | tuple):
        return sorted(value, key=repr) if all(isinstance(v, int) for v in value) else list(value)
    return value


def _show(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def show(value: Any) -> str:
    return "-" if value is None else _show(value)
