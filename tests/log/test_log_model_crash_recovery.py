"""Model-based tests: random appends, truncations, rolls, flushes, retention and crashes at random byte
positions, checked after every step against a plain list of batches."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.log.config import LogConfig
from broker.log.log import Log
from broker.log.record_batch import parse_header
from broker.log.records import Record, build_batch, record_offsets_and_timestamps
from tests.log.support import ManualClock


@dataclass
class ModelBatch:
    data: bytes  # exactly as it must be stored
    base_offset: int
    next_offset: int
    epoch: int
    records: list[tuple[int, int]]  # (offset, timestamp)


def _rewritten(batch: bytes, base_offset: int, epoch: int) -> bytes:
    return struct.pack(">q", base_offset) + batch[8:12] + struct.pack(">i", epoch) + batch[16:]


def _disk_layout(directory: Path) -> list[tuple[Path, list[tuple[int, int, int]]]]:
    """Per segment file in base-offset order: (path, [(base offset, start, end) of each batch])."""
    layout = []
    for path in sorted(directory.glob("*.log")):
        data, batches, position = path.read_bytes(), [], 0
        while position + 12 <= len(data):
            base_offset, length = struct.unpack_from(">qi", data, position)
            batches.append((base_offset, position, position + length + 12))
            position += length + 12
        layout.append((path, batches))
    return layout


record_lists = st.lists(
    st.tuples(st.integers(0, 200), st.integers(-20, 100)),  # (value size, timestamp delta)
    min_size=1,
    max_size=5,
)


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="kafkasim-log-model-"))
        self.directory = self.root / "model-0"
        self.clock = ManualClock()
        self.rng = random.Random(0)
        self.batches: list[ModelBatch] = []
        self.log_start = 0
        self.leo = 0
        self.epoch = 0
        self.log: Log | None = None

    @initialize(
        segment_bytes=st.integers(1200, 4000),
        index_interval_bytes=st.integers(0, 600),
        segment_index_bytes=st.sampled_from([24, 48, 120, 10 * 1024 * 1024]),
        flush_messages=st.sampled_from([1, 7, 2**63 - 1]),
        retention_bytes=st.sampled_from([-1, 3000, 8000]),
        retention_ms=st.sampled_from([-1, 5000]),
        unflushed_loss=st.booleans(),
    )
    def open_log(self, **settings_: object) -> None:
        self.config = LogConfig(
            segment_bytes=settings_["segment_bytes"],
            index_interval_bytes=settings_["index_interval_bytes"],
            segment_index_bytes=settings_["segment_index_bytes"],
            flush_messages=settings_["flush_messages"],
            retention_bytes=settings_["retention_bytes"],
            retention_ms=settings_["retention_ms"],
            file_delete_delay_ms=0,
            simulate_unflushed_loss=settings_["unflushed_loss"],
        )
        self.log = Log.open(self.directory, self.config, clock=self.clock)

    def teardown(self) -> None:
        try:
            if self.log is not None:
                self.assert_indexes_equal_rebuilt()
                self.log.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------------------------------ rules

    def _records(self, specs: list[tuple[int, int]]) -> list[Record]:
        return [Record(b"k", self.rng.randbytes(size), self.clock() + delta) for size, delta in specs]

    @rule(specs=record_lists, new_epoch=st.booleans())
    def append_as_leader(self, specs: list[tuple[int, int]], new_epoch: bool) -> None:
        self.epoch += new_epoch
        batch = build_batch(self._records(specs))
        info = self.log.append_as_leader(batch, leader_epoch=self.epoch)
        assert info.first_offset == self.leo and info.last_offset == self.leo + len(specs) - 1
        self._add(_rewritten(batch, self.leo, self.epoch))

    @rule(specs=record_lists, new_epoch=st.booleans())
    def append_as_follower(self, specs: list[tuple[int, int]], new_epoch: bool) -> None:
        self.epoch += new_epoch
        batch = build_batch(self._records(specs), base_offset=self.leo, partition_leader_epoch=self.epoch)
        self.log.append_as_follower(batch)
        self._add(batch)

    def _add(self, data: bytes) -> None:
        header = parse_header(data)
        records = list(record_offsets_and_timestamps(data))
        self.batches.append(
            ModelBatch(data, header.base_offset, header.next_offset, header.partition_leader_epoch, records)
        )
        self.leo = header.next_offset

    @rule(fraction=st.floats(0, 1))
    def truncate(self, fraction: float) -> None:
        target = self.log_start + int(fraction * (self.leo - self.log_start))
        self.log.truncate_to(target)
        # The batch holding the target goes entirely.
        self.batches = [b for b in self.batches if b.next_offset - 1 < target]
        if target < self.leo:
            self.leo = min(target, self._first_removed_base(target))
        self.log_start = min(self.log_start, self.leo)

    def _first_removed_base(self, target: int) -> int:
        return self.batches[-1].next_offset if self.batches else self.log.segments[0].base_offset

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.leo

    @rule(ms=st.integers(0, 4000))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(fraction=st.floats(0, 1))
    def increment_log_start_offset(self, fraction: float) -> None:
        new_start = self.log_start + int(fraction * (self.leo - self.log_start))
        self.log.maybe_increment_log_start_offset(new_start)
        self.log_start = max(self.log_start, new_start)

    @rule(fraction=st.floats(0, 1))
    def retention(self, fraction: float) -> None:
        high_watermark = self.log_start + int(fraction * (self.leo - self.log_start))
        size_before = self.log.size_in_bytes
        self.log.delete_old_segments(high_watermark)
        new_start = self.log.log_start_offset
        assert self.log_start <= new_start <= max(high_watermark, self.log_start)
        assert new_start in {self.leo, self.log_start} | {b.base_offset for b in self.batches}
        assert self.log.size_in_bytes <= size_before
        self.log_start = new_start
        self.batches = [b for b in self.batches if b.base_offset >= self.log.segments[0].base_offset]

    @rule(fraction=st.floats(0, 1), max_bytes=st.integers(1, 3000), bound_after=st.none() | st.integers(0, 12))
    def read(self, fraction: float, max_bytes: int, bound_after: int | None) -> None:
        """Whole batches of one segment, from the one holding the offset, within the byte and offset bounds."""
        start = self.log_start + int(fraction * (self.leo - self.log_start))
        max_offset = None if bound_after is None else start + bound_after
        bound = self.leo if max_offset is None else min(max_offset, self.leo)
        expected: list[bytes] = []
        candidates = [b for b in self.batches if b.next_offset > start]
        if start < bound and candidates and candidates[0].next_offset <= bound:
            bases = [s.base_offset for s in self.log.segments]
            segment_end = min([base for base in bases if base > candidates[0].base_offset] or [self.leo + 1])
            size = 0
            for batch in candidates:
                if batch.base_offset >= segment_end or batch.next_offset > bound:
                    break
                if expected and size + len(batch.data) > max_bytes:
                    break
                expected.append(batch.data)
                size += len(batch.data)
        assert self.log.read(start, max_bytes, max_offset=max_offset).read_bytes() == b"".join(expected)

    @rule(pick=st.integers(0, 10_000), shift=st.integers(-3, 3))
    def lookup_by_timestamp(self, pick: int, shift: int) -> None:
        readable = [(o, t) for b in self.batches for o, t in b.records if o >= self.log_start]
        if not readable:
            return
        target = readable[pick % len(readable)][1] + shift
        expected = None
        for batch in self.batches:
            if batch.next_offset <= self.log_start:
                continue
            hit = next(((t, o) for o, t in batch.records if t >= target and o >= self.log_start), None)
            if hit is not None:
                expected = (hit[0], hit[1], batch.epoch)
                break
        found = self.log.fetch_offset_by_timestamp(target)
        assert (tuple(found) if found else None) == expected

    @rule(
        cut=st.floats(0, 1),
        later_segments=st.sampled_from(["emptied", "deleted"]),
        garbage=st.sampled_from(["none", "zeros", "random"]),
        damage_seed=st.integers(0, 2**32),
        stale_checkpoint=st.booleans(),
    )
    def crash(self, cut: float, later_segments: str, garbage: str, damage_seed: int, stale_checkpoint: bool) -> None:
        """kill -9 (or, with the classroom option, a power cut) with a torn write at a random byte at or
        after the flushed position; unflushed index files damaged in random ways."""
        recovery_point = self.log.recovery_point
        self.log.close()
        self.log = None
        layout = _disk_layout(self.directory)
        starts, total = [], 0
        for _, batches in layout:
            starts.append(total)
            total += batches[-1][2] if batches else 0
        flushed = total
        for i, (_, batches) in enumerate(layout):
            below = [b for b in batches if b[0] >= recovery_point]
            if below:
                flushed = min(flushed, starts[i] + below[0][1])
        position = flushed + round(cut * (total - flushed))
        index = max(i for i, start in enumerate(starts) if start <= position)
        ends = {b[0]: starts[i] + b[2] for i, (_, batches) in enumerate(layout) for b in batches}
        damage = random.Random(damage_seed)
        first_unflushed = max([i for i, start in enumerate(starts) if start <= flushed] or [0])
        for i, (path, _) in enumerate(layout):
            if i > index:
                if later_segments == "deleted":
                    path.unlink()
                else:
                    os.truncate(path, 0)
            elif i == index:
                os.truncate(path, position - starts[i])
                with open(path, "ab") as f:
                    f.write(
                        {"none": b"", "zeros": bytes(damage.randrange(1, 80)), "random": damage.randbytes(90)}[garbage]
                    )
            for suffix in (".index", ".timeindex"):
                self._damage_index(path.with_suffix(suffix), damage, unflushed=i >= first_unflushed)

        kept = [b for b in self.batches if ends.get(b.base_offset, total + 1) <= position]
        if self.config.simulate_unflushed_loss:
            kept = [b for b in kept if b.next_offset <= recovery_point]
        first_base = int(layout[0][0].name[:20])
        self.batches = kept
        self.leo = kept[-1].next_offset if kept else first_base
        if self.leo < self.log_start:
            self.leo, self.batches = self.log_start, []
        self.log = Log.open(
            self.directory,
            self.config,
            clock=self.clock,
            log_start_offset=self.log_start,
            recovery_point=0 if stale_checkpoint else recovery_point,
            had_clean_shutdown=False,
        )
        self.assert_indexes_equal_rebuilt()

    def _damage_index(self, path: Path, rng: random.Random, *, unflushed: bool) -> None:
        if not path.exists():
            return
        kind = rng.choice(["keep", "keep", "delete", "odd-size"] + (["truncate", "garbage"] if unflushed else []))
        if kind == "delete":
            path.unlink()
        elif kind == "odd-size":
            with open(path, "ab") as f:
                f.write(b"\x01\x02\x03")
        elif kind == "truncate":
            os.truncate(path, rng.randrange(0, path.stat().st_size + 1))
        elif kind == "garbage":
            path.write_bytes(rng.randbytes(rng.randrange(0, 64)))

    @rule()
    def reopen_after_clean_shutdown(self) -> None:
        self.log.flush()
        self.log.close()
        self.log = Log.open(
            self.directory, self.config, clock=self.clock, log_start_offset=self.log_start, had_clean_shutdown=True
        )

    # ------------------------------------------------------------------------------------- invariants

    @invariant()
    def offsets_match_model(self) -> None:
        if self.log is None:
            return
        assert (self.log.log_start_offset, self.log.log_end_offset) == (self.log_start, self.leo)
        assert self.log.recovery_point <= self.leo

    @invariant()
    def every_batch_reads_back_byte_identical(self) -> None:
        if self.log is None:
            return
        expected = [b.data for b in self.batches if b.next_offset > self.log_start]
        actual, offset = [], self.log_start
        while offset < self.leo:
            data = self.log.read(offset, 1).read_bytes()
            assert data, f"nothing readable at offset {offset} below LEO {self.leo}"
            actual.append(data)
            offset = parse_header(data).next_offset
        assert actual == expected

    @invariant()
    def segment_files_hold_exactly_the_validated_bytes(self) -> None:
        if self.log is None:
            return
        for segment in self.log.segments:
            assert segment.log_path.stat().st_size == segment.size

    @invariant()
    def leader_epochs_cover_every_batch(self) -> None:
        if self.log is None:
            return
        cache = self.log.leader_epoch_cache
        entries = cache.entries
        assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in itertools.pairwise(entries))
        for batch in self.batches:
            if batch.next_offset > self.log_start:
                assert cache.epoch_for_offset(max(batch.base_offset, self.log_start)) == batch.epoch

    def assert_indexes_equal_rebuilt(self) -> None:
        """Indexes written incrementally equal those a full recovery rebuilds from the .log files."""
        for segment in self.log.segments:
            segment.flush()
        copy = self.root / "rebuilt-0"
        shutil.rmtree(copy, ignore_errors=True)
        copy.mkdir()
        for path in self.directory.glob("*.log"):
            shutil.copy(path, copy / path.name)
        rebuilt = Log.open(copy, self.config.model_copy(update={"simulate_unflushed_loss": False}), clock=self.clock)
        assert [s.base_offset for s in rebuilt.segments] == [s.base_offset for s in self.log.segments]
        rebuilt.close()
        for segment in self.log.segments:
            for suffix in (".index", ".timeindex"):
                name = segment.log_path.with_suffix(suffix).name
                assert (copy / name).read_bytes() == (self.directory / name).read_bytes(), name


LogModel.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=35,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_log_matches_model_through_crashes = LogModel.TestCase
