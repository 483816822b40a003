"""Mutated real frames: the decoder and codec answer with declared error types only, and promptly."""

import itertools
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clientplane.protocol.codec import decode_request
from broker.clientplane.protocol.errors import InvalidFrameSize, MalformedRequest, UnknownApiKey, UnsupportedVersion
from broker.clientplane.protocol.framing import FrameDecoder, frame_response
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import SUPPORTED_VERSIONS

from .captured import CAPTURED

DECLARED_RESULTS = (Request, UnknownApiKey, UnsupportedVersion, MalformedRequest)
FUZZ = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT32 = st.integers(-(2**31), 2**31 - 1)
IMPLEMENTED = [
    (key, version)
    for key, supported in SUPPORTED_VERSIONS.items()
    for version in range(supported.implemented_from, supported.max_version + 1)
]


@st.composite
def mutated_frames(draw) -> bytes:
    frame = bytearray(draw(st.sampled_from(CAPTURED)).frame)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "int32", "int16", "byte"]))
        at = draw(st.integers(0, max(len(frame) - 1, 0)))
        if kind == "flip" and frame:
            frame[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del frame[at:]
        elif kind == "insert":
            frame[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "int32":  # forged array, string and bytes lengths
            frame[at : at + 4] = struct.pack(">i", draw(INT32))
        elif kind == "int16":
            frame[at : at + 2] = struct.pack(">h", draw(st.integers(-(2**15), 2**15 - 1)))
        elif frame:
            frame[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
    return bytes(frame)


@pytest.mark.timeout(300)  # 2000 examples: about 15 s alone, several times that on a loaded 2-core machine
@FUZZ
@given(mutated_frames())
def test_mutated_frame_decodes_to_a_declared_result(frame):
    assert isinstance(decode_request(frame), DECLARED_RESULTS)


@pytest.mark.timeout(300)  # 2000 examples: about 15 s alone, several times that on a loaded 2-core machine
@FUZZ
@given(st.sampled_from(IMPLEMENTED), INT32, st.binary(max_size=300))
def test_random_body_behind_a_valid_header_decodes_to_a_declared_result(api, correlation_id, body):
    api_key, api_version = api
    header = struct.pack(">hhih", api_key, api_version, correlation_id, 1) + b"c"
    if api_version >= SUPPORTED_VERSIONS[api_key].first_flexible_version:
        header += b"\x00"
    result = decode_request(header + body)
    assert isinstance(result, DECLARED_RESULTS)
    if not isinstance(result, Request):
        assert result.header.correlation_id == correlation_id


@st.composite
def mutated_streams(draw) -> tuple[bytes, list[int]]:
    """Framed requests, some behind a random size prefix, cut into random chunks."""
    stream = b""
    for _ in range(draw(st.integers(1, 4))):
        frame = draw(st.one_of(mutated_frames(), st.sampled_from(CAPTURED).map(lambda c: c.frame)))
        size = len(frame)
        prefix = draw(st.one_of(st.just(size), INT32, st.integers(size - 4, size + 4)))
        stream += struct.pack(">i", prefix) + frame
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    return stream, cuts


@pytest.mark.timeout(300)  # 2000 examples: about 15 s alone, several times that on a loaded 2-core machine
@FUZZ
@given(mutated_streams(), st.sampled_from([64, 4096, 104_857_600]))
def test_mutated_stream_raises_only_invalid_frame_size(stream_and_cuts, max_request_bytes):
    stream, cuts = stream_and_cuts
    decoder = FrameDecoder(max_request_bytes)
    bounds = [0, *cuts, len(stream)]
    try:
        for start, end in itertools.pairwise(bounds):
            for frame in decoder.feed(stream[start:end]):
                assert len(frame) <= max_request_bytes
                assert isinstance(decode_request(frame), DECLARED_RESULTS)
    except InvalidFrameSize as error:
        assert error.size < 0 or error.size > max_request_bytes


@FUZZ
@given(st.lists(st.sampled_from(CAPTURED).map(lambda c: c.frame), min_size=1, max_size=5), st.data())
def test_any_chunking_gives_the_same_frames(frames, data):
    stream = b"".join(frame_response(frame) for frame in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    bounds = [0, *cuts, len(stream)]
    received = [
        frame for start, end in itertools.pairwise(bounds) for frame in decoder.feed(stream[start:end])
    ]
    assert received == frames
