"""The cleaner's pure pieces, driven directly: the offset map, the keep/drop rule, the batch rewrite, the choice of
the dirtiest log, the delete horizon, the grouping of segments, the throttler; and the compaction topic configs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from broker.log.cleaner.batch_filter import Outcome, filter_batch, records_of, should_retain_record
from broker.log.cleaner.offset_map import OffsetMap
from broker.log.cleaner.selection import (
    SegmentFacts,
    delete_horizon_ms,
    filthiest,
    first_dirty_offset,
    first_uncleanable_offset,
    group_segments,
    log_to_clean,
)
from broker.log.cleaner.throttler import Throttler
from broker.log.config import LogConfig
from broker.log.record_batch import check_batch_at, parse_header
from broker.log.records import GZIP, Record, build_batch

# --- offset map -------------------------------------------------------------------------------------------------


def test_the_offset_map_keeps_the_latest_offset_of_each_key():
    offsets = OffsetMap(24 * 100)
    offsets.put(b"a", 1)
    offsets.put(b"b", 2)
    offsets.put(b"a", 7)
    assert offsets.get(b"a") == 7 and offsets.get(b"b") == 2 and offsets.get(b"c") == -1
    assert len(offsets) == 2


def test_the_offset_map_holds_kafkas_number_of_keys_and_then_refuses_every_put():
    offsets = OffsetMap(24 * 10)  # 10 slots, full at 9 keys (load factor 0.9)
    assert offsets.slots == 10 and offsets.max_keys == 9
    assert all(offsets.put(f"k{i}".encode(), i) for i in range(9))
    assert offsets.full
    assert not offsets.put(b"k0", 100), "a full map stops the pass, even for a mapped key (Kafka)"
    assert offsets.get(b"k0") == 0


def test_clearing_the_map_forgets_keys_and_the_latest_offset():
    offsets = OffsetMap(2400)
    offsets.put(b"a", 3)
    offsets.update_latest_offset(9)
    offsets.clear()
    assert len(offsets) == 0 and offsets.latest_offset == -1 and offsets.get(b"a") == -1


# --- keep or drop -----------------------------------------------------------------------------------------------


def keep(offset, key, has_value, *, latest=None, map_latest=100, retain_deletes=True):
    latest = latest or {}
    return should_retain_record(offset, key, has_value, latest_key_offset=lambda k: latest.get(k, -1),
                                map_latest_offset=map_latest, retain_deletes=retain_deletes)


def test_a_record_older_than_its_keys_latest_offset_goes():
    assert not keep(5, b"a", True, latest={b"a": 9})
    assert keep(9, b"a", True, latest={b"a": 9})


def test_a_record_whose_key_is_not_mapped_stays():
    assert keep(5, b"x", True, latest={b"a": 9})


def test_a_record_past_the_mapped_section_stays_whatever_its_key():
    assert keep(101, b"a", True, latest={b"a": 9}, map_latest=100)
    assert keep(101, None, False, map_latest=100)


def test_a_keyless_record_in_the_mapped_section_goes():
    assert not keep(5, None, True)


def test_a_tombstone_stays_until_its_segment_is_older_than_the_delete_horizon():
    assert keep(9, b"a", False, latest={b"a": 9}, retain_deletes=True)
    assert not keep(9, b"a", False, latest={b"a": 9}, retain_deletes=False)
    assert keep(9, b"a", True, latest={b"a": 9}, retain_deletes=False), "only tombstones expire"


# --- the batch rewrite ------------------------------------------------------------------------------------------


def batch(pairs, *, compression=0, base_offset=100, producer_id=-1, timestamps=None):
    timestamps = timestamps or [1000 + i for i in range(len(pairs))]
    data = bytearray(build_batch([Record(k, v, t) for (k, v), t in zip(pairs, timestamps, strict=True)],
                                 compression=compression, producer_id=producer_id,
                                 producer_epoch=0 if producer_id >= 0 else -1,
                                 base_sequence=10 if producer_id >= 0 else -1, partition_leader_epoch=4))
    data[0:8] = base_offset.to_bytes(8, "big")
    return bytes(data), parse_header(data)


@pytest.mark.parametrize("compression", [0, GZIP])
def test_a_rewritten_batch_keeps_offsets_header_fields_and_codec_with_a_fresh_crc(compression):
    data, header = batch([(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", None)], compression=compression,
                         producer_id=5, timestamps=[1000, 1005, 1010, 1003])
    result = filter_batch(data, header, lambda offset, key, has_value: offset in (101, 103), retain_empty=False)
    assert result.outcome == Outcome.REWRITTEN and (result.records_read, result.records_kept) == (4, 2)
    new = check_batch_at(result.data, 0, len(result.data))  # CRC-32C checked
    assert (new.base_offset, new.last_offset_delta, new.records_count) == (100, 3, 2)
    assert new.compression == compression and new.producer_id == 5 and new.base_sequence == 10
    assert new.partition_leader_epoch == 4
    assert (new.base_timestamp, new.max_timestamp) == (1005, 1005)
    kept = records_of(result.data, new)
    assert [(100 + r.offset_delta, r.key, r.value, new.base_timestamp + r.timestamp_delta) for r in kept] == [
        (101, b"b", b"2", 1005), (103, b"c", None, 1003)]


def test_a_batch_keeping_every_record_is_copied_byte_for_byte():
    data, header = batch([(b"a", b"1"), (b"b", b"2")], compression=GZIP)
    result = filter_batch(data, header, lambda *_: True, retain_empty=False)
    assert result.outcome == Outcome.COPIED and result.data == data


def test_a_batch_losing_every_record_goes_unless_it_holds_its_producers_last_sequence():
    data, header = batch([(b"a", b"1"), (b"a", b"2")], compression=GZIP, producer_id=9)
    assert filter_batch(data, header, lambda *_: False, retain_empty=False).outcome == Outcome.DROPPED
    kept = filter_batch(data, header, lambda *_: False, retain_empty=True)
    assert kept.outcome == Outcome.EMPTIED
    empty = check_batch_at(kept.data, 0, len(kept.data))
    assert (empty.records_count, empty.last_offset_delta, empty.base_sequence, empty.compression) == (0, 1, 10, 0)
    assert empty.base_timestamp == empty.max_timestamp == header.max_timestamp


# --- which log, how much ----------------------------------------------------------------------------------------


def facts(*sizes, base_step=100, **fields):
    return [SegmentFacts(i * base_step, size, **fields) for i, size in enumerate(sizes)]


def test_the_first_dirty_offset_is_the_checkpoint_unless_it_is_outside_the_log():
    assert first_dirty_offset(None, 10, 500) == 10
    assert first_dirty_offset(200, 10, 500) == 200
    assert first_dirty_offset(5, 10, 500) == 10
    assert first_dirty_offset(600, 10, 500) == 10


def test_the_dirty_ratio_counts_whole_segments_and_never_the_active_one():
    segments = facts(1000, 1000, 1000, 1000, 700)  # the last is active
    candidate = log_to_clean("t", 0, segments, 200, min_compaction_lag_ms=0, max_compaction_lag_ms=2**63 - 1,
                             now_ms=0)
    assert candidate.first_uncleanable_offset == 400
    assert (candidate.clean_bytes, candidate.cleanable_bytes) == (2000, 2000)
    assert candidate.cleanable_ratio == 0.5


def test_min_compaction_lag_stops_the_cleanable_section_at_the_first_too_recent_segment():
    segments = [SegmentFacts(0, 10, largest_timestamp=1000), SegmentFacts(100, 10, largest_timestamp=9_500),
                SegmentFacts(200, 10, largest_timestamp=9_900), SegmentFacts(300, 10)]
    assert first_uncleanable_offset(segments, 0, min_compaction_lag_ms=1000, now_ms=10_000) == 100
    assert first_uncleanable_offset(segments, 0, min_compaction_lag_ms=0, now_ms=10_000) == 300


def test_the_dirtiest_log_above_its_ratio_is_chosen():
    low = log_to_clean("low", 0, facts(1000, 1000, 100), 100, min_compaction_lag_ms=0,
                       max_compaction_lag_ms=2**63 - 1, now_ms=0)     # ratio 0.5
    high = log_to_clean("high", 0, facts(1000, 3000, 100), 100, min_compaction_lag_ms=0,
                        max_compaction_lag_ms=2**63 - 1, now_ms=0)    # ratio 0.75
    assert filthiest([(low, 0.1), (high, 0.1)]) is high
    assert filthiest([(low, 0.1), (high, 0.8)]) is low
    assert filthiest([(low, 0.5), (high, 0.8)]) is None, "Kafka cleans above the ratio, not at it"


def test_max_compaction_lag_makes_a_log_below_its_ratio_cleanable():
    segments = [SegmentFacts(0, 1000, first_batch_timestamp=1), SegmentFacts(100, 10, first_batch_timestamp=50),
                SegmentFacts(200, 10)]
    overdue = log_to_clean("t", 0, segments, 100, min_compaction_lag_ms=0, max_compaction_lag_ms=100, now_ms=1000)
    assert overdue.need_compaction_now and overdue.cleanable_ratio < 0.5
    assert filthiest([(overdue, 0.5)]) is overdue
    # max-compaction-delay-secs: the dirty segment's first batch (at 50) is 850 ms past now - max.compaction.lag.ms
    assert overdue.max_compaction_delay_ms == 1000 - 100 - 50
    in_time = log_to_clean("t", 0, segments, 100, min_compaction_lag_ms=0, max_compaction_lag_ms=5000, now_ms=1000)
    assert not in_time.need_compaction_now and in_time.max_compaction_delay_ms == 0


def test_the_delete_horizon_is_the_last_clean_segments_mtime_minus_delete_retention():
    segments = facts(10, 10, 10, 10)
    segments = [SegmentFacts(s.base_offset, s.size, last_modified_ms=10_000 * (i + 1)) for i, s in enumerate(segments)]
    assert delete_horizon_ms(segments, 0, 1000) == 0
    assert delete_horizon_ms(segments, 200, 1000) == 20_000 - 1000


def test_segments_are_grouped_within_segment_bytes_and_index_bytes():
    segments = [SegmentFacts(0, 400, index_bytes=8), SegmentFacts(100, 400, index_bytes=8),
                SegmentFacts(200, 400, index_bytes=8), SegmentFacts(300, 100, index_bytes=85)]
    groups = group_segments(segments, max_size=1000, max_index_size=90, first_uncleanable=400)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 100], [200], [300]]


def test_a_group_never_spans_more_offsets_than_an_int():
    segments = [SegmentFacts(0, 1), SegmentFacts(2**31 - 10, 1)]
    groups = group_segments(segments, max_size=10**9, max_index_size=10**9, first_uncleanable=2**31 + 5)
    assert len(groups) == 2


# --- throttler --------------------------------------------------------------------------------------------------


def test_the_throttler_sleeps_until_the_rate_falls_to_its_limit():
    now = [0.0]
    slept = []
    throttler = Throttler(1000, clock=lambda: now[0], sleep=lambda s: (slept.append(s), now.__setitem__(0, now[0] + s)))
    throttler.maybe_throttle(500)  # no time has passed: not checked yet
    now[0] = 0.2
    throttler.maybe_throttle(500)  # 1000 bytes in 0.2 s: 5000 B/s, sleeps until 1 s has passed
    assert slept == [pytest.approx(0.8)]


def test_an_unlimited_throttler_never_sleeps():
    throttler = Throttler(1.7976931348623157e308, sleep=lambda s: pytest.fail("slept"))
    throttler.maybe_throttle(10**12)


# --- topic configs ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy,compact,delete", [("delete", False, True), ("compact", True, False),
                                                   ("compact,delete", True, True), ("delete, compact", True, True)])
def test_cleanup_policy_takes_kafkas_values(policy, compact, delete):
    config = LogConfig.model_validate({"cleanup.policy": policy})
    assert (config.compact, config.delete) == (compact, delete)


@pytest.mark.parametrize("policy", ["", "shred", "compact,shred"])
def test_an_unknown_cleanup_policy_is_refused(policy):
    with pytest.raises(ValidationError, match=r"cleanup\.policy"):
        LogConfig.model_validate({"cleanup.policy": policy})


def test_compaction_defaults_are_kafkas_and_the_broker_sets_them_by_kafkas_names():
    config = LogConfig()
    assert (config.cleanup_policy, config.min_cleanable_dirty_ratio, config.min_compaction_lag_ms,
            config.delete_retention_ms) == ("delete", 0.5, 0, 86_400_000)
    broker = LogConfig.from_broker_properties({"log.cleanup.policy": "compact",
                                               "log.cleaner.min.cleanable.ratio": "0.2",
                                               "log.cleaner.delete.retention.ms": "10"})
    assert (broker.cleanup_policy, broker.min_cleanable_dirty_ratio, broker.delete_retention_ms) == (
        "compact", 0.2, 10)


def test_a_dynamic_change_may_turn_compaction_on_and_a_bad_policy_is_refused_as_kafka_does():
    from kio.schema.errors import ErrorCode

    from broker.dynamic_config import ConfigError, validate_topic_overrides

    config = validate_topic_overrides("t", {"cleanup.policy": "compact,delete"}, LogConfig())
    assert config.compact and config.delete
    with pytest.raises(ConfigError) as info:
        validate_topic_overrides("t", {"cleanup.policy": "shred"}, LogConfig())
    assert info.value.error_code == ErrorCode.invalid_request


def _header(base: int, last: int, producer_id: int, *, transactional: bool = True, control: bool = False):
    from broker.log.record_batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, BatchHeader

    attributes = (TRANSACTIONAL_FLAG if transactional else 0) | (CONTROL_FLAG if control else 0)
    return BatchHeader(base_offset=base, batch_length=100, partition_leader_epoch=0, magic=2, crc=0,
                       attributes=attributes, last_offset_delta=last - base, base_timestamp=0, max_timestamp=0,
                       producer_id=producer_id, producer_epoch=0, base_sequence=0, records_count=last - base + 1)


def test_aborted_data_goes_and_its_abort_marker_stays_for_one_more_pass():
    from broker.log.cleaner.transactions import CleanedTransactions
    from broker.log.transactions import ABORT, COMMIT, AbortedTxn

    aborted = AbortedTxn(producer_id=1, first_offset=0, last_offset=5, last_stable_offset=2)
    txns = CleanedTransactions([aborted])
    assert txns.on_data_batch(_header(0, 1, 1)), "pid 1's data: aborted"
    assert not txns.on_data_batch(_header(2, 3, 2)), "pid 2's data: committed later"
    assert not txns.on_data_batch(_header(4, 4, 3, transactional=False)), "not transactional"
    # the abort marker met data of its transaction in this pass: it stays, indexed in the cleaned segment
    assert not txns.on_control_batch(_header(5, 5, 1, control=True), ABORT)
    assert txns.cleaned_index == [aborted]
    # the commit marker met data of its transaction too: it stays
    assert not txns.on_control_batch(_header(6, 6, 2, control=True), COMMIT)

    # next pass: the aborted data is gone, so are the committed records (replaced by later values)
    later = CleanedTransactions([aborted])
    assert later.on_control_batch(_header(5, 5, 1, control=True), ABORT), "no data met: the marker may go"
    assert later.on_control_batch(_header(6, 6, 2, control=True), COMMIT)
    assert later.cleaned_index == []
    assert later.on_control_batch(_header(7, 7, 2, control=True), None), "a marker batch emptied before"


def test_a_transaction_of_the_same_producer_after_an_aborted_one_is_committed_data():
    from broker.log.cleaner.transactions import CleanedTransactions, overlapping
    from broker.log.transactions import ABORT, AbortedTxn

    earlier = AbortedTxn(producer_id=1, first_offset=0, last_offset=2, last_stable_offset=3)
    txns = CleanedTransactions(overlapping([earlier], 3, 10))  # a range after that transaction
    assert not txns.on_data_batch(_header(3, 4, 1)), "pid 1's next transaction is not the aborted one"
    txns = CleanedTransactions(overlapping([earlier], 0, 10))
    assert txns.on_data_batch(_header(0, 1, 1))
    assert not txns.on_control_batch(_header(2, 2, 1, control=True), ABORT)
    assert not txns.on_data_batch(_header(3, 4, 1)), "after its abort marker, pid 1's data is a new transaction"


def test_the_first_unstable_offset_bounds_the_cleanable_section_at_its_segments_base():
    segments = facts(100, 100, 100, 100)  # bases 0, 100, 200, 300 (active)
    assert first_uncleanable_offset(segments, 0, min_compaction_lag_ms=0, now_ms=0) == 300
    assert first_uncleanable_offset(segments, 0, min_compaction_lag_ms=0, now_ms=0, first_unstable_offset=150) == 100
    assert first_uncleanable_offset(segments, 200, min_compaction_lag_ms=0, now_ms=0,
                                    first_unstable_offset=150) == 200, "never below the first dirty offset"
