"""Bad input against a running broker: mutated real client frames, each on a fresh connection, are answered
(with an answer kafka-python can read) or close that connection only; the broker keeps serving everyone else
and nothing reaches the log that a producer did not validly send.

Appends are accounted for: the fuzzed Produce frames are idempotent (kafka-python's and librdkafka's
captured frames) and were appended once, unmodified, before fuzzing. A mutation that keeps the batch intact
is a retry of that batch, which the broker answers without appending; a mutation inside the batch either
breaks its framing or its CRC-32C. The CRC rule is fuzzed on its own with the non-idempotent aiokafka
frame: every in-place corruption of a CRC-covered byte must be refused with CORRUPT_MESSAGE."""

import struct
import warnings
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from broker.clientplane.protocol.versions import SUPPORTED_VERSIONS, ApiKey
from tests.client.support import (
    RESPONSES,
    RawConnection,
    create_topic,
    decode_exactly,
    latest_offset,
    leader_of,
    metadata_ok,
    produce_request,
    record_batch,
)
from tests.protocol.captured import CAPTURED

pytestmark = [pytest.mark.processes, pytest.mark.slow]

LIVE_FUZZ = settings(max_examples=200, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ANSWER_TIMEOUT_S = 10     # generous: a loaded 2-core machine still answers well within this
LONG_POLL_GRACE_S = 1.0   # how long to watch a Fetch that may legitimately wait in the purgatory
INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
NONE, CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION = 0, 2, 3
SOCKET_REQUEST_MAX_BYTES = 104_857_600  # Kafka's default, which the broker uses

# Record batch v2 (wire-compat.md section 5.1): the CRC covers everything from the attributes on, the
# producer id, epoch and base sequence included.
CRC_COVERED_FROM = 21


def captured(frame_id: str) -> bytes:
    return next(c.frame for c in CAPTURED if c.id == frame_id)


IDEMPOTENT_PRODUCE = [captured("rec/kafka_PRODUCE_v8"), captured("rec/rdkafka_PRODUCE_v8")]
FUZZED = [*IDEMPOTENT_PRODUCE, *(c.frame for c in CAPTURED if c.matrix == "rec"
                                 and c.api_key in (ApiKey.FETCH, ApiKey.METADATA))]
NON_IDEMPOTENT_PRODUCE = captured("rec/aiokafka_PRODUCE_v7")


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    # The captured frames all name topic t1, partition 0.
    create_topic(shared_cluster, "t1", 1)
    with RawConnection(port_of_t1_leader(shared_cluster)) as connection:
        seeded = connection.request(produce_request("t1", 0, record_batch([b"seed-%d" % i for i in range(10)])), 8)
        assert seeded.responses[0].partition_responses[0].error_code == NONE
        for frame in IDEMPOTENT_PRODUCE:  # appended once: from now on an intact copy is a retry
            connection.send_frame(frame)
            first = decode_exactly(ProduceResponse, connection.read_frame(), 8)
            assert first.responses[0].partition_responses[0].error_code == NONE
    return shared_cluster


@pytest.fixture(scope="module")
def port(cluster) -> int:
    """The fuzzed broker: the leader of t1 (nothing moves leaders in this module)."""
    return port_of_t1_leader(cluster)


@pytest.fixture(scope="module")
def watcher(port):
    """A well-behaved client that stays connected to the fuzzed broker throughout."""
    with RawConnection(port) as connection:
        yield connection


def port_of_t1_leader(cluster) -> int:
    return cluster.spec.broker(leader_of(cluster, "t1")).client_port


def mutate(draw, frame: bytes, positions: Sequence[int] | None = None, resize: bool = True) -> bytes:
    """1-4 mutations as tests/protocol/test_fuzz.py makes them, at ``positions`` (default: anywhere);
    ``resize=False`` corrupts in place and never changes the length."""
    out = bytearray(frame)
    kinds = ["flip", "int32", "int16", "byte"] + (["truncate", "insert"] if resize else [])
    for _ in range(draw(st.integers(1, 4))):
        if not out:
            break
        at = min(draw(st.sampled_from(positions or range(len(out)))), len(out) - 1)
        kind = draw(st.sampled_from(kinds))
        if kind == "flip":
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del out[at:]
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "byte":
            out[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        else:  # forged array, string and bytes lengths
            packed = struct.pack(">i", draw(INT32)) if kind == "int32" else struct.pack(">h", draw(INT16))
            out[at:at + len(packed)] = packed if resize else packed[: len(out) - at]
    return bytes(out)


@st.composite
def mutated_frames(draw) -> bytes:
    return mutate(draw, draw(st.sampled_from(FUZZED)))


def quiet_decode(request_class, frame: bytes, version: int):
    """kafka-python's reading of a (mutated) request, or None if it cannot read it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return request_class.decode(frame, version=version, header=True)
    except Exception:
        return None


def silence_allowed_after(frame: bytes) -> float | None:
    """Seconds after which no answer is acceptable: a produce with acks=0 is never answered, and a Fetch
    may wait in the purgatory up to its max_wait_ms. None when the frame must be answered or closed."""
    api_key, version = struct.unpack_from(">hh", frame)
    if api_key == ApiKey.PRODUCE and 3 <= version <= 8:
        request = quiet_decode(ProduceRequest, frame, version)
        if request is not None and request.acks == 0:
            return LONG_POLL_GRACE_S
    if api_key == ApiKey.FETCH and 4 <= version <= 11:
        request = quiet_decode(FetchRequest, frame, version)
        if request is not None and request.max_wait_ms > LONG_POLL_GRACE_S * 1000:
            return LONG_POLL_GRACE_S
    return None


def send_once(port: int, frame: bytes) -> tuple[str, bytes | None]:
    """('answer', bytes), ('closed', None) or ('silent', None) for one frame on a fresh connection."""
    grace = silence_allowed_after(frame) if len(frame) >= 4 else None
    with RawConnection(port, timeout_s=grace or ANSWER_TIMEOUT_S) as connection:
        connection.send_frame(frame)
        try:
            return "answer", connection.read_frame()
        except ConnectionError:
            return "closed", None
        except TimeoutError:
            assert grace is not None, (
                f"the broker neither answered nor closed within {ANSWER_TIMEOUT_S} s; frame {frame.hex()}")
            return "silent", None


def check_answer(frame: bytes, answer: bytes) -> None:
    """An answer must be for this request and readable by a client at the version asked for."""
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
    assert struct.unpack_from(">i", answer)[0] == correlation_id
    if api_key == ApiKey.API_VERSIONS:
        decode_exactly(ApiVersionsResponse, answer, version if 0 <= version <= 3 else 0)
    elif api_key == ApiKey.PRODUCE:
        assert silence_allowed_after(frame) is None, "a produce with acks=0 was answered"
        decode_exactly(ProduceResponse, answer, version)
    elif api_key in RESPONSES:
        supported = SUPPORTED_VERSIONS[ApiKey(api_key)]
        assert supported.implemented_from <= version <= supported.max_version
        decode_exactly(RESPONSES[api_key], answer, version)
    else:
        pytest.fail(f"API {api_key} v{version} was answered, but kafkasim does not serve it")


@LIVE_FUZZ
@given(frame=mutated_frames())
def test_mutated_frames_are_answered_or_close_only_their_connection_and_append_nothing(port, watcher, frame):
    before = latest_offset(watcher, "t1")
    outcome, answer = send_once(port, frame)
    if outcome == "answer":
        check_answer(frame, answer)
    # the broker still serves its other clients, and the log did not grow
    assert metadata_ok(watcher, "t1")
    assert latest_offset(watcher, "t1") == before


@st.composite
def corrupted_batches(draw) -> bytes:
    """The aiokafka Produce frame with 1-4 in-place corruptions of CRC-covered bytes of its batch."""
    frame = NON_IDEMPOTENT_PRODUCE
    records = ProduceRequest.decode(frame, version=7, header=True).topic_data[0].partition_data[0].records
    start = frame.index(records)
    corrupted = bytearray(mutate(draw, frame, positions=range(start + CRC_COVERED_FROM, len(frame)), resize=False))
    if corrupted == frame:
        corrupted[-1] ^= 0x01
    return bytes(corrupted)


@LIVE_FUZZ
@given(frame=corrupted_batches())
def test_a_batch_with_a_bad_crc_is_refused_as_corrupt_and_not_appended(port, watcher, frame):
    before = latest_offset(watcher, "t1")
    outcome, answer = send_once(port, frame)
    assert outcome == "answer"
    reply = decode_exactly(ProduceResponse, answer, 7)
    assert reply.responses[0].partition_responses[0].error_code == CORRUPT_MESSAGE
    assert latest_offset(watcher, "t1") == before


def corrupt_last_record(batch: bytes) -> bytes:
    return batch[:-2] + bytes([batch[-2] ^ 0x01]) + batch[-1:]


def produce_raw(connection: RawConnection, batch: bytes):
    return connection.request(produce_request("t1", 0, batch), 8).responses[0].partition_responses[0]


# Kafka validates a batch's CRC (Log.analyzeAndValidateRecords) before its producer state: a corrupt batch is
# CORRUPT_MESSAGE even when its header looks like a retry (answered as a duplicate) or a gap in sequence.
def test_a_retried_idempotent_batch_with_a_corrupted_record_is_refused_as_corrupt(watcher):
    batch = record_batch([b"a", b"b", b"c"], producer_id=424242, producer_epoch=0, base_sequence=0)
    assert produce_raw(watcher, batch).error_code == NONE
    end = latest_offset(watcher, "t1")
    answer = produce_raw(watcher, corrupt_last_record(batch))
    assert latest_offset(watcher, "t1") == end
    assert answer.error_code == CORRUPT_MESSAGE


def test_an_idempotent_batch_with_a_bad_crc_and_a_gap_in_sequence_is_refused_as_corrupt(watcher):
    first = record_batch([b"a"], producer_id=434343, producer_epoch=0, base_sequence=0)
    assert produce_raw(watcher, first).error_code == NONE
    end = latest_offset(watcher, "t1")
    gap = record_batch([b"b"], producer_id=434343, producer_epoch=0, base_sequence=5)
    answer = produce_raw(watcher, corrupt_last_record(gap))
    assert latest_offset(watcher, "t1") == end
    assert answer.error_code == CORRUPT_MESSAGE


def test_a_frame_larger_than_socket_request_max_bytes_closes_only_its_connection(port, watcher):
    with RawConnection(port) as other:
        with RawConnection(port) as big:
            # only the size prefix: the broker must refuse before reading (or allocating) 100 MiB
            big.sock.sendall(struct.pack(">i", SOCKET_REQUEST_MAX_BYTES + 1))
            assert big.sock.recv(1) == b""
        assert metadata_ok(other, "t1") and metadata_ok(watcher, "t1")
    # exactly the limit is not refused at the size prefix: the connection waits for the body
    with RawConnection(port, timeout_s=LONG_POLL_GRACE_S) as at_limit:
        at_limit.sock.sendall(struct.pack(">i", SOCKET_REQUEST_MAX_BYTES))
        with pytest.raises(TimeoutError):
            at_limit.sock.recv(1)


def test_an_unknown_api_key_closes_only_its_connection(port, watcher):
    with RawConnection(port) as other:
        with RawConnection(port) as unknown:
            unknown.send_frame(struct.pack(">hhih", 999, 0, 5, 4) + b"fuzz")
            assert unknown.sock.recv(1) == b""
        assert metadata_ok(other, "t1") and metadata_ok(watcher, "t1")
