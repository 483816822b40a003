"""The nemesis schedule of a chaos run, derived from its seed alone, so a run that found an anomaly can be
replayed fault for fault: same seed, same kinds, same brokers → the same steps.

Faults come one at a time (Jepsen's nemesis acts every 15 s by default): each holds for a while, is healed,
and the cluster gets a quiet spell before the next. None is active in the last ``recovery_s`` of the run, so the
workload shows whether the cluster came back, and a final ``heal`` step at the end undoes anything a failed
heal left behind before the final reads.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cluster.chaos.history import HEAL, NEMESIS_KINDS, NemesisKind

# what each kind does, for --help and the schedule's detail; the runner carries them out
KIND_HELP: dict[str, str] = {
    "kill": "SIGKILL one broker, restart it when the fault ends",
    "pause": "SIGSTOP one broker, SIGCONT it when the fault ends",
    "partition": "cut one broker off from the other brokers (ZooKeeper still reachable)",
    "zk-isolate": "cut one broker off from ZooKeeper only, so its session expires",
    "slow": "add network delay to one broker",
    "controller": "SIGKILL the active controller, whichever broker it is when the step starts",
    "bounce": "restart one broker cleanly, several times in a row (Kafka's clean_bounce)",
    "disk-full": "fill one broker's log directory",
    "zk-down": "stop ZooKeeper",
}

_SLOW_DELAYS_MS = (50, 100, 250, 500)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NemesisStep(_Frozen):
    step: int
    at_s: float                   # from the start of the workload
    kind: NemesisKind | Literal["heal"]
    targets: tuple[int, ...]      # broker ids; empty when the victim is ZooKeeper or found at run time
    hold_s: float                 # how long the fault lasts before it is healed
    detail: str = ""

    @property
    def heal_at_s(self) -> float:
        return self.at_s + self.hold_s


class ScheduleSettings(_Frozen):
    quiet_s: tuple[float, float] = (5.0, 15.0)   # between one fault's heal and the next fault
    hold_s: tuple[float, float] = (5.0, 15.0)
    recovery_s: float = Field(default=15.0, ge=0)   # no fault in the run's last stretch
    bounces: tuple[int, int] = (2, 5)            # clean restarts of one bounce step (Kafka's test does 5)

    @model_validator(mode="after")
    def _ranges_are_ordered(self) -> ScheduleSettings:
        for name in ("quiet_s", "hold_s", "bounces"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"{name} must be (low, high) with 0 < low <= high, not ({low}, {high})")
        return self


class NemesisSpecError(ValueError):
    """A --nemesis list naming kinds kafkasim does not know."""


def parse_nemesis(text: str) -> tuple[NemesisKind, ...]:
    """``kill,pause,partition`` → the kinds in the given order (repeats dropped); ``all`` for every kind,
    ``none`` for a run without faults (a baseline to compare availability against)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = ", ".join(NEMESIS_KINDS)
    if not names:
        raise NemesisSpecError(f"--nemesis names no fault; give some of: {known} (or all, or none)")
    if names == ["none"]:
        return ()
    if names == ["all"]:
        return NEMESIS_KINDS  # type: ignore[return-value]
    unknown = [name for name in names if name not in NEMESIS_KINDS]
    if unknown:
        raise NemesisSpecError(f"unknown nemesis kind{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}; "
                               f"known: {known} (or all, or none)")
    return tuple(dict.fromkeys(names))  # type: ignore[arg-type]


def nemesis_schedule(seed: int, duration_s: float, kinds: Sequence[str], brokers: Sequence[int],
                     settings: ScheduleSettings | None = None) -> list[NemesisStep]:
    """Faults one after another from ``random.Random(seed)`` only, each healed by ``duration_s - recovery_s``,
    then a ``heal`` step at ``duration_s``. Brokers are sorted first, so their order does not change the plan."""
    settings = settings or ScheduleSettings()
    brokers = sorted(set(brokers))
    if not brokers:
        raise ValueError("a nemesis schedule needs at least one broker id")
    unknown = [kind for kind in kinds if kind not in NEMESIS_KINDS]
    if unknown:
        raise NemesisSpecError(f"unknown nemesis kinds: {', '.join(unknown)}; known: {', '.join(NEMESIS_KINDS)}")
    if duration_s <= settings.recovery_s:
        raise ValueError(f"duration_s ({duration_s}) must exceed recovery_s ({settings.recovery_s}): "
                         "the run needs time for faults before its fault-free end")

    rng = random.Random(seed)
    last_heal_s = duration_s - settings.recovery_s
    steps: list[NemesisStep] = []
    at = _uniform(rng, settings.quiet_s)
    while kinds:
        hold = _uniform(rng, settings.hold_s)
        if at + hold > last_heal_s:
            break
        kind = rng.choice(list(kinds))
        targets, detail = _victims(kind, rng, brokers, settings)
        steps.append(NemesisStep(step=len(steps), at_s=at, kind=kind, targets=targets, hold_s=hold, detail=detail))
        at = round(at + hold + _uniform(rng, settings.quiet_s), 3)
    steps.append(NemesisStep(step=len(steps), at_s=float(duration_s), kind=HEAL, targets=tuple(brokers), hold_s=0.0,
                             detail="end every fault: start stopped brokers, resume paused ones, remove network "
                                    "rules, free disks, start ZooKeeper"))
    return steps


def _uniform(rng: random.Random, bounds: tuple[float, float]) -> float:
    return round(rng.uniform(*bounds), 3)  # milliseconds are fine enough, and keep schedule.json readable


def _victims(kind: str, rng: random.Random, brokers: list[int], settings: ScheduleSettings,
             ) -> tuple[tuple[int, ...], str]:
    if kind == "zk-down":
        return (), KIND_HELP[kind]
    if kind == "controller":
        return (), KIND_HELP[kind]
    victim = rng.choice(brokers)
    if kind == "partition":
        others = [b for b in brokers if b != victim]
        return (victim,), f"isolate broker {victim} from brokers {others}"
    if kind == "slow":
        return (victim,), f"delay {rng.choice(_SLOW_DELAYS_MS)} ms"
    if kind == "bounce":
        return (victim,), f"{rng.randint(*settings.bounces)} clean restarts"
    return (victim,), KIND_HELP[kind]
