"""The seeded nemesis schedule and the --nemesis parser."""

from __future__ import annotations

from itertools import pairwise

import pytest

from cluster.chaos.history import NEMESIS_KINDS
from cluster.chaos.schedule import (
    KIND_HELP,
    NemesisSpecError,
    NemesisStep,
    ScheduleSettings,
    nemesis_schedule,
    parse_nemesis,
)

BROKERS = [1, 2, 3]


def test_the_same_seed_gives_the_same_schedule():
    first = nemesis_schedule(42, 300, NEMESIS_KINDS, BROKERS)
    again = nemesis_schedule(42, 300, NEMESIS_KINDS, [3, 1, 2])  # broker order is not part of the plan
    assert first == again
    assert len(first) > 5


def test_a_seed_keeps_its_schedule_across_versions_so_old_runs_can_be_replayed():
    assert nemesis_schedule(42, 300, NEMESIS_KINDS, BROKERS)[:2] == [
        NemesisStep(step=0, at_s=11.394, kind="slow", targets=(1,), hold_s=5.25, detail="delay 100 ms"),
        NemesisStep(step=1, at_s=23.039, kind="zk-down", targets=(), hold_s=6.025, detail="stop ZooKeeper"),
    ]


def test_different_seeds_give_different_schedules():
    schedules = {tuple(nemesis_schedule(seed, 300, NEMESIS_KINDS, BROKERS)) for seed in range(5)}
    assert len(schedules) == 5


def test_faults_do_not_overlap_and_all_are_healed_before_the_fault_free_end():
    settings = ScheduleSettings(recovery_s=20)
    for seed in range(50):
        *faults, heal = nemesis_schedule(seed, 200, NEMESIS_KINDS, BROKERS, settings)
        for earlier, later in pairwise(faults):
            assert earlier.heal_at_s + settings.quiet_s[0] <= later.at_s + 1e-9
        assert all(f.heal_at_s <= 180 for f in faults)
        assert all(settings.hold_s[0] <= f.hold_s <= settings.hold_s[1] for f in faults)
        assert (heal.kind, heal.at_s, heal.targets, heal.step) == ("heal", 200, (1, 2, 3), len(faults))


def test_each_kind_has_its_victims():
    steps = nemesis_schedule(7, 3000, NEMESIS_KINDS, BROKERS)[:-1]
    by_kind = {s.kind: s for s in steps}
    assert set(by_kind) == set(NEMESIS_KINDS)
    assert by_kind["zk-down"].targets == () and by_kind["controller"].targets == ()
    one_broker = [s for s in steps if s.kind not in ("zk-down", "controller")]
    assert all(len(s.targets) == 1 and s.targets[0] in BROKERS for s in one_broker)
    assert by_kind["slow"].detail.startswith("delay ")
    assert by_kind["bounce"].detail.endswith("clean restarts")
    assert by_kind["partition"].detail.startswith(f"isolate broker {by_kind['partition'].targets[0]} from")


def test_only_the_chosen_kinds_are_scheduled():
    steps = nemesis_schedule(3, 600, ("kill", "pause"), BROKERS)
    assert {s.kind for s in steps} == {"kill", "pause", "heal"}


def test_a_run_without_faults_still_ends_with_a_heal():
    assert [s.kind for s in nemesis_schedule(1, 60, (), BROKERS)] == ["heal"]


def test_a_schedule_round_trips_as_json():
    steps = nemesis_schedule(9, 120, NEMESIS_KINDS, BROKERS)
    assert [NemesisStep.model_validate_json(s.model_dump_json()) for s in steps] == steps


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"duration_s": 10}, "must exceed recovery_s"),
    ({"brokers": []}, "at least one broker"),
    ({"kinds": ("kill", "flood")}, "unknown nemesis kinds: flood"),
])
def test_a_schedule_that_cannot_be_made_says_why(kwargs, message):
    arguments = {"seed": 1, "duration_s": 100, "kinds": ("kill",), "brokers": BROKERS} | kwargs
    with pytest.raises(ValueError, match=message):
        nemesis_schedule(**arguments)


def test_settings_refuse_a_range_that_runs_backwards():
    with pytest.raises(ValueError, match=r"hold_s must be \(low, high\)"):
        ScheduleSettings(hold_s=(10, 5))


def test_the_nemesis_list_is_parsed_in_order_without_repeats():
    assert parse_nemesis("kill, pause,kill,zk-isolate") == ("kill", "pause", "zk-isolate")
    assert parse_nemesis("all") == NEMESIS_KINDS
    assert parse_nemesis("none") == ()


def test_unknown_nemesis_kinds_are_named_with_the_known_ones():
    with pytest.raises(NemesisSpecError) as error:
        parse_nemesis("kill,meteor,flood")
    assert str(error.value) == (
        "unknown nemesis kinds: meteor, flood; known: kill, pause, partition, zk-isolate, slow, controller, "
        "bounce, disk-full, zk-down (or all, or none)")


def test_an_empty_nemesis_list_is_refused():
    with pytest.raises(NemesisSpecError, match="names no fault"):
        parse_nemesis(" , ")


def test_every_kind_is_explained():
    assert set(KIND_HELP) == set(NEMESIS_KINDS)
