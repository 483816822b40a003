"""One running 3-broker cluster per test module: starting one takes seconds, and these tests only add
topics of their own, so they can share it."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterator

import pytest

from tests.harness import RunningCluster, start_cluster

# kafka-python 3.0.12 loads its JSON message specs at import time through importlib.resources calls
# deprecated since Python 3.11; import it once, quietly (as tests/protocol does).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    for module in ("kafka.protocol.api_message", "kafka.protocol.metadata"):
        importlib.import_module(module)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory, zk_server: str) -> Iterator[RunningCluster]:
    running = start_cluster(tmp_path_factory.mktemp("client-cluster"), zk_server)
    try:
        yield running
    finally:
        running.stop_all()
