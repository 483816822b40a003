"""zoo.cfg as ZooKeeper's java.util.Properties reads it: awkward data directories reach the server intact."""

from __future__ import annotations

import os
import signal

import pytest

from zk.server import ZooKeeperServer

pytestmark = pytest.mark.processes


def test_a_data_dir_with_spaces_and_non_ascii_is_the_one_zookeeper_uses(tmp_path):
    # no ':' here: the same directory is on Java's class path, where ':' separates entries
    data_dir = tmp_path / "zoo keeper é#1=x"
    data_dir.mkdir()
    server = ZooKeeperServer(data_dir, port=0)
    process = server.spawn(tmp_path / "zookeeper.log")
    try:
        server.wait_ready(process)
        assert (data_dir / "data" / "version-2").is_dir()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
