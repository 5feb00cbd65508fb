"""cpu kernels for causal.*: the NumPy definitions written once in ``caramba.ops.causal``, run
with ``xp = numpy``."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.kernels import kernel
from caramba.ir.dtypes import DType
from caramba.ops import causal

# float16 is not claimed: least squares and matrix inverses in half precision are not worth the name
FLOAT = frozenset({DType.float64, DType.float32})
SCM = FLOAT | {DType.bool}  # bool: the intervention mask


@kernel("causal.do_calculus", SCM)
def _do_calculus(node, ins):
    return lambda w, b, s, mask, v: causal.do_calculus_xp(w, b, s, mask, v, np)


@kernel("causal.counterfactual", SCM)
def _counterfactual(node, ins):
    return lambda w, x, mask, v: causal.counterfactual_xp(w, x, mask, v, np)


@kernel("causal.dag_markov_factorization", FLOAT)
def _dag(node, ins):
    return lambda w, b, s, x: np.asarray(causal.dag_markov_factorization_xp(w, b, s, x, np))


def _singular(node, fn):
    def run(*xs):
        try:
            return fn(*xs)
        except np.linalg.LinAlgError as exc:
            raise causal.EstimationError(f"{node.op} (node {node.id}): {exc}: the least squares has no unique "
                                         "solution (a constant, duplicated or collinear column?)") from None

    return run


def _estimator(of: str):
    def factory(node, ins):
        attrs = dict(node.attrs)
        return _singular(node, lambda data: np.asarray(causal.estimator_xp(of, data, attrs, np)))

    return factory


for _of in ("backdoor_adjustment", "frontdoor_adjustment", "cate", "iv_estimate"):
    kernel(f"causal.{_of}", FLOAT)(_estimator(_of))


@kernel("causal.vjp", SCM)
def _vjp(node, ins):
    of = node.attrs["of"]
    attrs = dict(node.attrs)
    n_ct = causal.VJP_OF[of][1]

    def vjp(*xs):
        out = causal.vjp_xp(of, xs[:n_ct], xs[n_ct:], attrs, np)
        return out if len(out) > 1 else np.asarray(out[0])

    return _singular(node, vjp)
