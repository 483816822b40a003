"""The exactly-once story's pure helpers, without a cluster: how it names a group for the coordinator it wants, and
how it counts the copies of the output."""

from __future__ import annotations

from broker.group.coordinator import partition_for
from cluster.chaos.history import IsolatedRead
from cluster.scenarios.txn_actions import TransformerStory, _copies, _named


def test_a_name_is_chosen_for_the_partition_its_leader_leads_and_not_one_already_taken():
    leaders = {p: (2 if p in (3, 7) else 1) for p in range(10)}
    first = _named("copier", leaders, lambda _, leader: leader == 2)
    assert leaders[partition_for(first, 10)] == 2
    second = _named("copier", leaders, lambda _, leader: leader == 2, taken=frozenset({first}))
    assert second != first and leaders[partition_for(second, 10)] == 2


def test_the_transactional_id_is_hashed_not_the_process_name():
    leaders = {p: p % 3 for p in range(10)}
    name = _named("transformer", leaders, lambda _, leader: leader == 0, key=lambda n: f"kafkasim-chaos-{n}")
    assert leaders[partition_for(f"kafkasim-chaos-{name}", 10)] == 0


def test_inputs_copied_more_than_once_are_counted_by_their_input_offsets():
    story = TransformerStory(None, None, 0, inputs={f"in-{i}": i for i in range(4)})  # type: ignore[arg-type]
    records = ((0, "t:in-0@transformer-0.1"), (1, "t:in-1@transformer-0.1"), (3, "t:in-1@transformer-0.3"),
               (4, "t:in-2@transformer-0.3"), (5, "t:in-2@transformer-0.4"), (6, None))
    read = IsolatedRead(isolation_level="read_committed", topic="out", partition=0, records=records)
    assert _copies(story, [read], "output") == {
        "output.copies": 5, "output.inputs_copied": 3, "output.inputs_twice": 2, "output.first_twice": 1,
        "output.last_twice": 2}
