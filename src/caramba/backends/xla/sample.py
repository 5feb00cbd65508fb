"""xla rule for sample.token: the float64 definition in ``caramba.ops.sample`` with ``np`` bound to
``jax.numpy`` (the same steps as the cpu kernel; uint64 stream arithmetic needs the x64 mode the
runner traces under)."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from caramba.backends.xla.lowering import BOOL, FLOAT, KEY, rule
from caramba.ops import sample


@rule("sample.token", FLOAT | KEY | BOOL)  # int64: key and tokens; bool: seen
def _token(node, ins, ctx):
    a, (k, s) = dict(node.attrs), sample.roles(ins)

    def token(logits, *rest):
        xs = (logits, *rest)
        return sample.draw(logits, a, None if k is None else xs[k], None if s is None else xs[s], jnp, kth_largest)

    return token


def kth_largest(x, k):
    return lax.top_k(x, k)[0][:, k - 1 : k]  # a selection like the cpu's np.partition: same value
