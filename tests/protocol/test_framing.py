import struct

import pytest

from broker.clientplane.protocol.errors import InvalidFrameSize, ProtocolError
from broker.clientplane.protocol.framing import DEFAULT_SOCKET_REQUEST_MAX_BYTES, FrameDecoder, frame_response

from .captured import CAPTURED

FRAMES = [c.frame for c in CAPTURED if c.matrix == "rec"][:6]
STREAM = b"".join(frame_response(frame) for frame in FRAMES)


def test_default_limit_is_kafkas_socket_request_max_bytes():
    assert DEFAULT_SOCKET_REQUEST_MAX_BYTES == 104857600
    assert FrameDecoder().max_request_bytes == 104857600


def test_frame_response_prefixes_the_payload_size():
    assert frame_response(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame_response(b"") == b"\x00\x00\x00\x00"


def test_whole_stream_in_one_chunk_gives_every_frame_in_order():
    decoder = FrameDecoder()
    assert decoder.feed(STREAM) == FRAMES
    assert decoder.buffered_bytes == 0


def test_splitting_the_stream_at_every_byte_boundary_gives_the_same_frames():
    for cut in range(len(STREAM) + 1):
        decoder = FrameDecoder()
        assert decoder.feed(STREAM[:cut]) + decoder.feed(STREAM[cut:]) == FRAMES, cut


def test_feeding_one_byte_at_a_time_gives_the_same_frames():
    decoder = FrameDecoder()
    frames = []
    for index in range(len(STREAM)):
        frames += decoder.feed(STREAM[index : index + 1])
    assert frames == FRAMES
    assert decoder.buffered_bytes == 0


def test_incomplete_frame_stays_buffered():
    decoder = FrameDecoder()
    assert decoder.feed(STREAM[:10]) == []
    assert decoder.buffered_bytes == 10


def test_accepts_memoryview_and_bytearray_chunks():
    decoder = FrameDecoder()
    half = len(STREAM) // 2
    assert decoder.feed(bytearray(STREAM[:half])) + decoder.feed(memoryview(STREAM)[half:]) == FRAMES


def test_zero_size_frame_is_passed_on_for_the_codec_to_reject():
    assert FrameDecoder().feed(b"\x00\x00\x00\x00") == [b""]


def test_frame_of_exactly_the_limit_is_accepted():
    decoder = FrameDecoder(max_request_bytes=16)
    assert decoder.feed(frame_response(b"x" * 16)) == [b"x" * 16]


def test_oversize_frame_is_rejected_as_soon_as_its_size_prefix_arrives():
    decoder = FrameDecoder(max_request_bytes=16)
    with pytest.raises(InvalidFrameSize) as raised:
        decoder.feed(struct.pack(">i", 17))
    assert (raised.value.size, raised.value.max_bytes) == (17, 16)
    assert "socket.request.max.bytes" in str(raised.value)


def test_default_limit_rejects_a_frame_one_byte_above_it():
    with pytest.raises(InvalidFrameSize):
        FrameDecoder().feed(struct.pack(">i", DEFAULT_SOCKET_REQUEST_MAX_BYTES + 1))


@pytest.mark.parametrize("size", [-1, -(2**31)])
def test_negative_size_is_a_protocol_error(size):
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", size))


def test_bad_prefix_after_good_frames_in_the_same_chunk_still_closes_the_connection():
    with pytest.raises(InvalidFrameSize):
        FrameDecoder().feed(STREAM + struct.pack(">i", -5))


def test_decoder_stays_broken_after_a_bad_size():
    decoder = FrameDecoder(max_request_bytes=16)
    with pytest.raises(InvalidFrameSize):
        decoder.feed(struct.pack(">i", 1000))
    with pytest.raises(InvalidFrameSize):
        decoder.feed(frame_response(b"ok"))
    assert decoder.buffered_bytes == 0
