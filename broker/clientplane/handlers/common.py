"""What every handler needs: the response module of a request's version, throttle time, milliseconds."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from datetime import timedelta

from kio.index import load_payload_module
from kio.static.constants import EntityType

NO_THROTTLE = timedelta(0)


@functools.cache  # kio resolves the module by name on every call: once per (api, version) is enough
def response_module(api_key: int, version: int):
    return load_payload_module(api_key, version, EntityType.response)


def millis(value: timedelta | int) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


def answer_once(loop: asyncio.AbstractEventLoop) -> tuple[asyncio.Future, Callable[[object], None]]:
    """A future and the ``respond`` callback that completes it: ReplicaIO answers through the callback,
    at once or later from a purgatory, and only the first answer counts."""
    future = loop.create_future()

    def respond(result: object) -> None:
        if not future.done():
            future.set_result(result)
    return future, respond
