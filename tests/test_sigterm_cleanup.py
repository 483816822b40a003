"""tests/conftest.py turns SIGTERM into KeyboardInterrupt: a pytest run killed with SIGTERM still tears its
fixtures down (the processes they started, namespaces, mounts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import wait_until

ROOT = Path(__file__).resolve().parents[1]

SUBJECT = '''
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture
def cleaned_up():
    yield
    (HERE / "torn-down").write_text("teardown ran")


def test_waits_to_be_killed(cleaned_up):
    (HERE / "started").write_text("")
    time.sleep(120)
    (HERE / "finished").write_text("")
'''


def test_a_run_killed_with_sigterm_tears_its_fixtures_down(tmp_path):
    (tmp_path / "test_subject.py").write_text(SUBJECT)
    # -p loads the project's conftest as a plugin: the subject lives outside tests/, where pytest would not find it
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                            "test_subject.py"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: (tmp_path / "started").exists() or run.poll() is not None, 60, "the subject test to start")
        assert run.poll() is None, run.communicate()[0]
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert (tmp_path / "torn-down").read_text() == "teardown ran", output
    assert not (tmp_path / "finished").exists()
    assert run.returncode == pytest.ExitCode.INTERRUPTED, output
