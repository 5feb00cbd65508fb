"""xla rules for causal.*: the definitions in ``caramba.ops.causal`` with ``xp = jax.numpy`` (the
same steps as the cpu kernels: reduced QR least squares, LU solves and inverses)."""

from __future__ import annotations

import jax.numpy as jnp

from caramba.backends.xla.lowering import rule
from caramba.ir.dtypes import DType
from caramba.ops import causal

# float16 is not claimed: XLA's QR and LU decompositions take float32/float64 only
FLOAT = frozenset({DType.float64, DType.float32})
SCM = FLOAT | {DType.bool}  # bool: the intervention mask


@rule("causal.do_calculus", SCM)
def _do_calculus(node, ins, ctx):
    return lambda w, b, s, mask, v: causal.do_calculus_xp(w, b, s, mask, v, jnp)


@rule("causal.counterfactual", SCM)
def _counterfactual(node, ins, ctx):
    return lambda w, x, mask, v: causal.counterfactual_xp(w, x, mask, v, jnp)


@rule("causal.dag_markov_factorization", FLOAT)
def _dag(node, ins, ctx):
    return lambda w, b, s, x: causal.dag_markov_factorization_xp(w, b, s, x, jnp)


def _estimator(of: str):
    def factory(node, ins, ctx):
        attrs = dict(node.attrs)
        return lambda data: causal.estimator_xp(of, data, attrs, jnp)

    return factory


for _of in ("backdoor_adjustment", "frontdoor_adjustment", "cate", "iv_estimate"):
    rule(f"causal.{_of}", FLOAT)(_estimator(_of))


@rule("causal.vjp", SCM)
def _vjp(node, ins, ctx):
    of = node.attrs["of"]
    attrs = dict(node.attrs)
    n_ct = causal.VJP_OF[of][1]

    def vjp(*xs):
        out = causal.vjp_xp(of, xs[:n_ct], xs[n_ct:], attrs, jnp)
        return out if len(out) > 1 else out[0]

    return vjp
