"""Fixtures of the cpu backend's unit tests."""

from __future__ import annotations

import pytest

from caramba import compute


@pytest.fixture(scope="module")
def cpu():
    """One cpu runner per test module."""
    r = compute.new("cpu")
    yield r
    r.close()
