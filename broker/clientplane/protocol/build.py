"""Builds a kio entity of any version from candidate values: fields come and go between versions, and a
handler should not need one code path per version."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def build(entity_class: type[T], **candidates: Any) -> T:
    names = {f.name for f in fields(entity_class)}  # type: ignore[arg-type]
    return entity_class(**{name: value for name, value in candidates.items() if name in names})
