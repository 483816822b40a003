"""`kafkasim records delete`'s offsets: from the flags or from kafka-delete-records.sh's --offset-json-file."""

from __future__ import annotations

import pytest

from cluster.processes import ClusterError
from cluster.records import offsets_from, parse_offset_json


def test_kafkas_offset_json_gives_an_offset_per_partition():
    text = ('{"partitions": [{"topic": "a", "partition": 0, "offset": 5},'
            ' {"topic": "a", "partition": 2, "offset": -1}], "version": 1}')
    assert parse_offset_json(text) == {("a", 0): 5, ("a", 2): -1}


@pytest.mark.parametrize(("text", "says"), [
    ("not json", "is not JSON"),
    ('{"version": 1}', 'no "partitions" list'),
    ('{"partitions": [{"topic": "a", "offset": 1}]}', 'needs "topic", "partition" and "offset"'),
    ('{"partitions": [{"topic": "a", "partition": "0", "offset": 1}]}', "integers"),
    ('{"partitions": [{"topic": "a", "partition": 0, "offset": 1}, {"topic": "a", "partition": 0, "offset": 2}]}',
     "twice"),
    ('{"partitions": [{"topic": "a", "partition": 0, "offset": -2}]}', "-1 for the high watermark"),
])
def test_a_bad_offset_json_is_refused_with_what_to_write(text, says):
    with pytest.raises(ClusterError, match=says):
        parse_offset_json(text)


def test_the_flags_name_one_partition_zero_by_default(tmp_path):
    assert offsets_from("t", None, 7, None) == {("t", 0): 7}
    assert offsets_from("t", 3, -1, None) == {("t", 3): -1}
    with pytest.raises(ClusterError, match="give --topic and --offset"):
        offsets_from("t", None, None, None)
    with pytest.raises(ClusterError, match="not both"):
        offsets_from("t", None, 1, tmp_path / "offsets.json")
    with pytest.raises(ClusterError, match="cannot read"):
        offsets_from(None, None, None, tmp_path / "missing.json")
