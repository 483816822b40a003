"""The Spark schema of trace files, derived from the pydantic event model (``traces/events.py``).

A trace file mixes event types, so its schema is the union of every event's fields: a field some event
lacks is null on that event's rows. Two events may only share a field name if they give it the same type;
otherwise the derivation fails loudly instead of letting Spark coerce one of them to null.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pyspark.sql import types as T

from traces.events import EVENT_TYPES, TraceEvent


class SchemaConflictError(TypeError):
    """Two event types declare the same field with different types."""


def spark_type(annotation: Any) -> tuple[T.DataType, bool]:
    """(Spark type, nullable) for one pydantic field annotation."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"cannot map a union of {args} to one Spark type")
        return spark_type(args[0])[0], True
    if origin is Literal:
        kinds = {type(v) for v in get_args(annotation)}
        if len(kinds) != 1:
            raise TypeError(f"a Literal mixing {kinds} has no Spark type")
        return spark_type(kinds.pop())[0], False
    if origin is typing.Annotated:
        return spark_type(get_args(annotation)[0])
    if origin in (list, tuple, set, frozenset):
        (item,) = get_args(annotation)[:1]
        return T.ArrayType(spark_type(item)[0], containsNull=False), False
    if origin is dict:
        # JSON object keys are strings whatever the model's key type (pydantic writes {"1": ...})
        _, value = get_args(annotation)
        return T.MapType(T.StringType(), spark_type(value)[0], valueContainsNull=False), False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_struct(annotation), False
    simple = {bool: T.BooleanType(), int: T.LongType(), float: T.DoubleType(), str: T.StringType()}
    if annotation in simple:
        return simple[annotation], False
    raise TypeError(f"no Spark type for {annotation!r}")


def model_struct(model: type[BaseModel]) -> T.StructType:
    fields = []
    for name, info in model.model_fields.items():
        data_type, nullable = spark_type(info.annotation)
        fields.append(T.StructField(name, data_type, nullable=nullable))
    return T.StructType(fields)


def trace_schema(event_types: tuple[type[TraceEvent], ...] = EVENT_TYPES) -> T.StructType:
    """Every field of every event type, nullable (each row holds one event type); common fields first."""
    fields: dict[str, T.StructField] = {}
    owners: dict[str, str] = {}
    for event_type in event_types:
        for field in model_struct(event_type).fields:
            known = fields.get(field.name)
            if known is None:
                fields[field.name] = T.StructField(field.name, field.dataType, nullable=True)
                owners[field.name] = event_type.__name__
            elif known.dataType != field.dataType:
                raise SchemaConflictError(
                    f"field {field.name!r} is {known.dataType.simpleString()} in {owners[field.name]} but "
                    f"{field.dataType.simpleString()} in {event_type.__name__}; rename one of them")
    return T.StructType(list(fields.values()))
