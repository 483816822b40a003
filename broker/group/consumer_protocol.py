"""The part of the consumer protocol's Subscription the coordinator reads: the subscribed topics, which every
version (0-3) puts first, right after the version. Kafka's coordinator reads them only to tell OffsetDelete
and offset expiry which topics an active consumer group still consumes; the rest is the assignors' business."""

from __future__ import annotations

import struct

CONSUMER_PROTOCOL_TYPE = "consumer"
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


class SubscriptionFormatError(ValueError):
    """Member metadata that is not a consumer protocol Subscription."""


def subscribed_topics(metadata: bytes) -> list[str]:
    try:
        (version,) = _I16.unpack_from(metadata, 0)
        (count,) = _I32.unpack_from(metadata, _I16.size)
        if version < 0 or count < 0:
            raise SubscriptionFormatError(f"version {version}, {count} topics")
        position, topics = _I16.size + _I32.size, []
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, position)
            position += _I16.size
            if length < 0 or position + length > len(metadata):
                raise SubscriptionFormatError(f"topic name of {length} bytes at byte {position}")
            topics.append(metadata[position:position + length].decode())
            position += length
    except (struct.error, UnicodeDecodeError) as exc:
        raise SubscriptionFormatError(str(exc)) from None
    return topics
