"""The timing-wheel measurements behind ``kafkasim bench purgatory``: a small real run of both timers."""

import pytest

from broker.purgatory import bench


def test_both_shapes_are_measured_for_both_timers_with_their_memory():
    results = bench.measure(count=3_000, repeat=2)

    assert [r.shape for r in results] == ["batch", "interleaved"]
    for result in results:
        for measured in (result.wheel, result.call_later):
            assert measured.cpu_s > 0 and measured.wall_s > 0
        assert result.speed_up == pytest.approx(result.call_later.cpu_s / result.wheel.cpu_s)
    batch, interleaved = results
    # Batch keeps every timeout pending at once; interleaved holds one task at a time in the wheel.
    assert batch.wheel.peak_mib > interleaved.wheel.peak_mib


def test_handles_only_leaves_the_operation_objects_out_of_the_call_later_side():
    with_operations, handles_only = (bench.measure(count=2_000, repeat=1, handles_only=flag)[0]
                                     for flag in (False, True))
    assert handles_only.call_later.peak_mib < with_operations.call_later.peak_mib


def test_a_count_of_zero_is_refused():
    with pytest.raises(ValueError):
        bench.measure(count=0)
