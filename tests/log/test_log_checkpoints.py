"""Checkpoint files: Kafka's text format, atomic replacement, clear errors on malformed files."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile, OffsetCheckpointFile
from broker.log.errors import CorruptCheckpointError


def test_offset_checkpoint_is_written_in_kafkas_text_format(tmp_path: Path):
    path = tmp_path / "replication-offset-checkpoint"
    OffsetCheckpointFile(path).write({("orders", 1): 42, ("orders", 0): 7, ("a.b_c-d", 12): 0})
    assert path.read_text() == "0\n3\na.b_c-d 12 0\norders 0 7\norders 1 42\n"


def test_offset_checkpoint_round_trips(tmp_path: Path):
    offsets = {(f"topic-{i % 7}", i): i * 1000 for i in range(100)}
    checkpoint = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets
    checkpoint.write({})
    assert checkpoint.read() == {}
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n0\n"


def test_any_whitespace_separates_fields_when_reading(tmp_path: Path):
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text("0\n2\nt   0\t5\n  t 1 6  \n")
    assert OffsetCheckpointFile(path).read() == {("t", 0): 5, ("t", 1): 6}


def test_a_missing_checkpoint_reads_as_empty(tmp_path: Path):
    assert OffsetCheckpointFile(tmp_path / "absent").read() == {}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0\n",
        "1\n0\n",  # unknown version
        "0\n2\nt 0 5\n",  # fewer entries than declared
        "0\n1\nt 0 5\nt 1 6\n",  # more entries than declared
        "0\n1\nt 0\n",  # missing field
        "0\n1\nt zero 5\n",  # not a number
        "x\n1\nt 0 5\n",
    ],
)
def test_a_malformed_checkpoint_is_reported_as_a_storage_error(tmp_path: Path, text: str):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError) as e:
        OffsetCheckpointFile(path).read()
    assert e.value.error_code == ErrorCode.kafka_storage_error
    assert str(path) in str(e.value)


def test_writing_replaces_the_file_through_a_temp_file(tmp_path: Path):
    path = tmp_path / "replication-offset-checkpoint"
    (tmp_path / "replication-offset-checkpoint.tmp").write_text("half-written garbage from a crash")
    OffsetCheckpointFile(path).write({("t", 0): 1})
    OffsetCheckpointFile(path).write({("t", 0): 2})
    assert OffsetCheckpointFile(path).read() == {("t", 0): 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replication-offset-checkpoint"]


def test_leader_epoch_checkpoint_matches_kafkas_example(tmp_path: Path):
    path = tmp_path / "leader-epoch-checkpoint"
    entries = [EpochEntry(0, 0), EpochEntry(1, 120), EpochEntry(4, 350)]
    LeaderEpochCheckpointFile(path).write(entries)
    assert path.read_text() == "0\n3\n0 0\n1 120\n4 350\n"
    assert LeaderEpochCheckpointFile(path).read() == entries


topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCXYZ0123456789._-", min_size=1, max_size=30)


@settings(max_examples=100, deadline=None)
@given(offsets=st.dictionaries(st.tuples(topics, st.integers(0, 10_000)), st.integers(0, 2**63 - 1), max_size=40))
def test_offset_checkpoints_round_trip(tmp_path_factory, offsets):
    checkpoint = OffsetCheckpointFile(tmp_path_factory.mktemp("checkpoint") / "replication-offset-checkpoint")
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets


@settings(max_examples=100, deadline=None)
@given(starts=st.lists(st.integers(0, 2**62), unique=True, max_size=20).map(sorted))
def test_leader_epoch_checkpoints_round_trip(tmp_path_factory, starts):
    entries = [EpochEntry(epoch * 3, start) for epoch, start in enumerate(starts)]
    checkpoint = LeaderEpochCheckpointFile(tmp_path_factory.mktemp("epochs") / "leader-epoch-checkpoint")
    checkpoint.write(entries)
    assert checkpoint.read() == entries
