"""A running ``kafkasim dashboard`` process for the tests and the bench's shape: started on a free port,
stopped by its PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.harness import wait_until
from zk.server import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts" / "dashboard"


@contextmanager
def dashboard_process(data_dir: Path, *options: str) -> Iterator[str]:
    """The dashboard of the cluster in ``data_dir``; yields its URL once it answers."""
    port = free_port()
    log = open(data_dir / f"dashboard-{port}.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "cluster.cli", "--data-dir", str(data_dir), "dashboard",
                                "--port", str(port), *options], stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        def answers() -> bool:
            assert process.poll() is None, f"the dashboard exited: {(data_dir / f'dashboard-{port}.log').read_text()}"
            with urllib.request.urlopen(url + "api/state", timeout=2) as response:
                return response.status == 200
        wait_until(answers, 30, "the dashboard to answer")
        yield url
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def chromium():
    """Debian's headless Chromium through its chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                     "--disable-gpu"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
