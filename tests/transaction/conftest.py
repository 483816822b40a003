"""kafka-python 3.0.12 loads its JSON message specs at import time through importlib.resources calls deprecated since
Python 3.11; import it once, quietly (as tests/client does). And a 3-broker cluster in network namespaces of its own,
for the tests that cut a coordinator off from ZooKeeper."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_netns import remove_by_name, start
from tests.harness import RunningCluster

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    for module in ("kafka.protocol.api_message", "kafka.protocol.metadata", "kafka.protocol.consumer"):
        importlib.import_module(module)


@pytest.fixture
def netns_cluster(tmp_path: Path) -> Iterator[RunningCluster]:
    """Its namespaces, bridge and rules are removed by name whatever the test did."""
    data_dir = tmp_path / "cluster"
    try:
        yield start(data_dir, brokers=3)
    finally:
        remove_by_name(data_dir)
