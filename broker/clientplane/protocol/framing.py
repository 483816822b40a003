"""Size-prefixed framing of the Kafka byte stream: every request and response is int32 size + payload."""

from __future__ import annotations

import struct

from .errors import InvalidFrameSize

# Kafka's default for socket.request.max.bytes.
DEFAULT_SOCKET_REQUEST_MAX_BYTES = 104_857_600

_SIZE = struct.Struct(">i")


class FrameDecoder:
    """Cuts a connection's incoming bytes into request frames (the bytes after each size prefix).

    Sans-IO: the server feeds whatever the socket returned; the decoder never reads or blocks.
    """

    def __init__(self, max_request_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES) -> None:
        self.max_request_bytes = max_request_bytes
        self._buffer = bytearray()
        self._broken: InvalidFrameSize | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return the frames they complete, in arrival order.

        Raises InvalidFrameSize as soon as a bad size prefix is seen (before its body is buffered,
        as Kafka's NetworkReceive does) and on every later call: the stream has lost its framing.
        """
        if self._broken is not None:
            raise self._broken
        self._buffer += data
        frames: list[bytes] = []
        buffer = self._buffer
        position = 0
        while len(buffer) - position >= _SIZE.size:
            (size,) = _SIZE.unpack_from(buffer, position)
            if size < 0 or size > self.max_request_bytes:
                self._broken = InvalidFrameSize(size, self.max_request_bytes)
                del buffer[:]
                raise self._broken
            end = position + _SIZE.size + size
            if len(buffer) < end:
                break
            frames.append(bytes(buffer[position + _SIZE.size : end]))
            position = end
        del buffer[:position]
        return frames


def frame_response(payload: bytes) -> bytes:
    """Prefix an encoded response (header + body) with its int32 size, ready for the socket."""
    return _SIZE.pack(len(payload)) + payload
