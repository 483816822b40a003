"""LeaderEpochFileCache: Kafka's assign, endOffsetFor and truncation rules, persisted on each change."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from broker.log.leader_epoch_cache import LeaderEpochFileCache


@pytest.fixture
def checkpoint(tmp_path: Path) -> LeaderEpochCheckpointFile:
    return LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")


def cache_with(
    checkpoint: LeaderEpochCheckpointFile, *entries: tuple[int, int], leo: int = 1000
) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(checkpoint, lambda: leo)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def test_assign_appends_new_epochs_and_persists_them(checkpoint):
    cache = cache_with(checkpoint, (0, 0), (1, 120), (4, 350))
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(1, 120), EpochEntry(4, 350)]
    assert checkpoint.read() == cache.entries
    assert cache.latest_epoch == 4


def test_assign_of_the_latest_epoch_at_a_later_offset_changes_nothing(checkpoint):
    cache = cache_with(checkpoint, (3, 100))
    assert cache.assign(3, 150) is False
    assert cache.entries == [EpochEntry(3, 100)]


def test_assign_of_the_latest_epoch_at_an_earlier_offset_moves_its_start(checkpoint):
    cache = cache_with(checkpoint, (2, 50), (3, 100))
    assert cache.assign(3, 80)
    assert cache.entries == [EpochEntry(2, 50), EpochEntry(3, 80)]


def test_assign_drops_entries_that_would_break_monotonicity(checkpoint):
    cache = cache_with(checkpoint, (0, 0), (2, 100), (5, 200))
    cache.assign(3, 150)  # epoch 5 is not below 3: dropped
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(2, 100), EpochEntry(3, 150)]
    cache.assign(4, 90)  # entries starting at or after 90 go
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(4, 90)]
    assert checkpoint.read() == cache.entries


def test_assign_rejects_negative_values(checkpoint):
    with pytest.raises(ValueError):
        cache_with(checkpoint).assign(-1, 0)


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (-1, (-1, -1)),  # undefined epoch
        (4, (4, 1000)),  # latest epoch: the log end offset
        (1, (1, 350)),  # an epoch in the cache: next epoch's start
        (2, (1, 350)),  # unknown epoch between entries: the largest epoch below it
        (0, (0, 120)),
        (7, (-1, -1)),  # beyond every epoch
    ],
)
def test_end_offset_for_follows_kafkas_rule(checkpoint, requested: int, expected: tuple[int, int]):
    cache = cache_with(checkpoint, (0, 0), (1, 120), (4, 350))
    assert cache.end_offset_for(requested) == expected


def test_end_offset_for_an_epoch_older_than_the_cache_is_the_first_start_offset(checkpoint):
    cache = cache_with(checkpoint, (3, 500), (5, 900))
    assert cache.end_offset_for(1) == (1, 500)


def test_end_offset_for_on_an_empty_cache_is_undefined(checkpoint):
    assert cache_with(checkpoint).end_offset_for(0) == (-1, -1)


def test_truncate_from_end_drops_epochs_starting_at_or_after_the_offset(checkpoint):
    cache = cache_with(checkpoint, (0, 0), (1, 120), (4, 350))
    cache.truncate_from_end(350)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(1, 120)]
    assert checkpoint.read() == cache.entries


def test_truncate_from_start_moves_the_surviving_epoch_to_the_new_start(checkpoint):
    cache = cache_with(checkpoint, (0, 0), (1, 120), (4, 350))
    cache.truncate_from_start(200)
    assert cache.entries == [EpochEntry(1, 200), EpochEntry(4, 350)]
    cache.truncate_from_start(350)
    assert cache.entries == [EpochEntry(4, 350)]
    assert checkpoint.read() == cache.entries


def test_the_cache_reloads_from_its_checkpoint(checkpoint):
    cache_with(checkpoint, (0, 0), (2, 77))
    reloaded = LeaderEpochFileCache.load(checkpoint, lambda: 100)
    assert reloaded.entries == [EpochEntry(0, 0), EpochEntry(2, 77)]
    assert reloaded.end_offset_for(2) == (2, 100)
    assert reloaded.epoch_for_offset(76) == 0 and reloaded.epoch_for_offset(77) == 2
