"""One SparkSession for every analysis test (starting one costs ~10 s on this machine), and the real runs
the analysis is checked against."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from analysis.session import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator:
    session = spark_session("local[2]", app_name="kafkasim-tests", shuffle_partitions=2)
    yield session
    session.stop()
