"""Shared pieces for the train tests: a cpu runner and a generated classification problem."""

from __future__ import annotations

import numpy as np
import pytest

from caramba import compute


@pytest.fixture
def cpu():
    r = compute.new("cpu")
    yield r
    r.close()


def blobs(n: int = 512, d: int = 16, classes: int = 4, seed: int = 0, spread: float = 1.2):
    """Gaussian clusters that overlap a little: learnable, but not in a step or two."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((classes, d)) * 1.5
    y = rng.integers(0, classes, n)
    x = centers[y] + spread * rng.standard_normal((n, d))
    return x, y.astype(np.int64)


def batches(x, y, size: int, steps: int):
    n = len(x)
    for i in range(steps):
        j = (i * size) % n
        yield {"x": x[j : j + size], "y": y[j : j + size]}
