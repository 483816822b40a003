"""bounds.py exists because kio 0.6.5 aborts the process on a forged array count; prove both sides.

Each check runs in a child process with a 2 GiB address-space limit, so an allocation kio would get
away with on a large machine (overcommit) fails the way it would in a small container.
"""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

resource = pytest.importorskip("resource")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="RLIMIT_AS semantics are Linux's"
)

REPO_ROOT = Path(__file__).resolve().parents[2]
ADDRESS_SPACE_LIMIT = 2 << 30

# Metadata v4, client_id "t", topics array claiming 2**31 - 1 elements: kio reserves 16 GiB.
FORGED_FRAME = "struct.pack('>hhihsi', 3, 4, 1, 1, b't', 2**31 - 1) + b'\\x00\\x01a\\x01'"


def _run_limited(code: str) -> subprocess.CompletedProcess:
    def limit_address_space():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        preexec_fn=limit_address_space,
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "RUST_BACKTRACE": "0"},
    )


def test_kio_alone_aborts_the_process_on_a_forged_array_count():
    # If this starts failing, kio bounds array counts itself and bounds.py may be retired.
    child = _run_limited(f"""
        import struct
        from kio.index import load_request_schema
        from kio.serial import entity_reader
        frame = {FORGED_FRAME}
        request_class = load_request_schema(3, 4)
        _, header_size = entity_reader(request_class.__header_schema__)(frame, 0)
        entity_reader(request_class)(frame, header_size)
    """)
    assert child.returncode == -signal.SIGABRT, child.stderr
    assert "memory allocation" in child.stderr


def test_decode_request_answers_malformed_for_the_same_frame():
    child = _run_limited(f"""
        import struct
        from broker.clientplane.protocol.codec import decode_request
        print(type(decode_request({FORGED_FRAME})).__name__)
    """)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "MalformedRequest"


def test_thousands_of_forged_lengths_in_real_frames_stay_within_the_memory_limit():
    child = _run_limited("""
        import random, struct
        from pathlib import Path
        from broker.clientplane.protocol.codec import decode_request
        frames = [p.read_bytes() for p in sorted(Path("tests/protocol/client_frames").glob("*/*.bin"))]
        rng = random.Random(20261121)
        for _ in range(40_000):
            frame = bytearray(rng.choice(frames))
            at = rng.randrange(len(frame))
            frame[at : at + 4] = struct.pack(">i", rng.choice([2**31 - 1, 2**30, 2**24, -1, -2, 1000]))
            decode_request(bytes(frame))
        print("ok")
    """)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "ok"
