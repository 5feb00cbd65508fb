"""cpu kernels for random.*: Philox keyed by (seed, key), so draws are reproducible."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.kernels import FLOAT, kernel
from caramba.ir.dtypes import DType

MASK = (1 << 64) - 1


def generator(seed: int, key=None) -> np.random.Generator:
    k = 0 if key is None else int(key)
    return np.random.Generator(np.random.Philox(key=np.array([seed & MASK, k & MASK], dtype=np.uint64)))


@kernel("random.uniform", FLOAT)
def _uniform(node, ins):
    a = node.attrs
    shape, d, lo, hi = tuple(a["shape"]), a["dtype"].numpy, a["low"], a["high"]
    return lambda key=None: (lo + (hi - lo) * generator(a["seed"], key).random(shape)).astype(d)


@kernel("random.normal", FLOAT)
def _normal(node, ins):
    a = node.attrs
    shape, d, mu, sd = tuple(a["shape"]), a["dtype"].numpy, a["mean"], a["std"]
    return lambda key=None: (mu + sd * generator(a["seed"], key).standard_normal(shape)).astype(d)


@kernel("random.bernoulli", frozenset({DType.bool}))
def _bernoulli(node, ins):
    a = node.attrs
    shape, p = tuple(a["shape"]), a["p"]
    return lambda key=None: generator(a["seed"], key).random(shape) < p
