"""The Spark schema comes from the event model: every field of every event, with its type; a field two
events type differently is refused instead of silently read as null."""

from __future__ import annotations

from typing import Literal

import pytest
from pyspark.sql import types as T

from analysis.schema import SchemaConflictError, model_struct, trace_schema
from traces import events as te
from traces.events import EVENT_TYPES


def test_every_field_of_every_event_type_is_in_the_schema_with_a_matching_type():
    schema = {f.name: f.dataType for f in trace_schema().fields}
    for event_type in EVENT_TYPES:
        for field in model_struct(event_type).fields:
            assert schema[field.name] == field.dataType, (event_type.__name__, field.name)
    assert schema["ts_ms"] == T.DoubleType() and schema["mono_ns"] == T.LongType()
    assert schema["isr"] == T.ArrayType(T.LongType(), containsNull=False)
    assert schema["broker_epochs"] == T.MapType(T.StringType(), T.LongType(), valueContainsNull=False)
    lag = schema["lags"].elementType
    assert [f.name for f in lag.fields] == list(te.ReplicaLag.model_fields)


def test_a_field_typed_differently_by_two_events_is_refused():
    class Clashing(te.TraceEvent):
        event: Literal["clashing"] = "clashing"
        topic: int   # every other event says str

    with pytest.raises(SchemaConflictError, match=r"'topic' is string in .* but bigint in Clashing"):
        trace_schema((te.ProduceAcknowledged, Clashing))


def test_a_new_field_on_an_event_appears_in_the_schema_without_touching_the_analysis():
    class Extended(te.TraceEvent):
        event: Literal["extended"] = "extended"
        novelty: list[float]

    schema = {f.name: f.dataType for f in trace_schema((*EVENT_TYPES, Extended)).fields}
    assert schema["novelty"] == T.ArrayType(T.DoubleType(), containsNull=False)
