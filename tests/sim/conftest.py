"""Fixtures for the simulator tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_helpers import DATA


@pytest.fixture
def data() -> Path:
    return DATA
