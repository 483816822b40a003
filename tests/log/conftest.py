"""Fixtures shared by the log tests."""

from __future__ import annotations

import pytest

from tests.log.support import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
