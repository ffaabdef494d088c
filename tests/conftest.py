"""Shared fixtures for the top-level tests."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def examples() -> Path:
    return ROOT / "examples"
