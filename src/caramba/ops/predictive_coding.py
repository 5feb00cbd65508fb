"""predictive_coding.*: hierarchical predictive coding (Rao & Ballard 1999; the conventions of
Bogacz 2017, "A tutorial on the free-energy framework for modelling perception and learning",
J. Math. Psychol. 76, and Whittington & Bogacz 2017, "An approximation of the error
backpropagation algorithm in a predictive coding network with local Hebbian synaptic
plasticity", Neural Computation 29(5)).

Values are row vectors with leading batch axes ``...`` (like ``x @ W``). A layer with
representation ``r [..., k]`` predicts the layer below, ``x [..., n]``, through weights
``W [k, n]``, a bias ``b [n]`` and an activation ``f`` (attribute ``activation``: ``linear``
``f(a) = a``, ``tanh``, ``sigmoid`` ``1 / (1 + e^-a)``, ``relu`` ``max(a, 0)`` with
``f'(0) = 0``):

- ``prediction(r, W, b) -> mu [..., n]``:  ``mu = f(a)``, ``a = r W + b``.
- ``prediction_error(x [..., n], mu [..., n], Pi) -> eps [..., n]``: the precision-weighted
  error ``eps = Pi (x - mu)``, i.e. ``eps_i = sum_j Pi_ij (x_j - mu_j)``; ``Pi`` is a scalar
  ``[]``, a diagonal ``[n]`` (``eps = Pi * (x - mu)``) or a matrix ``[n, n]`` (the inverse
  covariance Sigma^-1 of the layer's Gaussian; symmetric in the model, not required here).
- ``update_representation(r, W, b, eps_below [..., n], eps_self [..., k]) -> r' [..., k]``:
  one inference step, gradient descent on the energy with rate ``lr`` (attribute):

      r' = r + lr * ( (f'(a) * eps_below) W^T - eps_self ),   a = r W + b

  ``eps_below`` is the error of the layer this one predicts, ``eps_self`` the error of this
  layer against the prediction from above (zeros for a top layer with a flat prior).
- ``update_weights(r, W, b, eps_below) -> (dW [k, n], db [n])``: the Hebbian, local weight
  update (pre-synaptic ``r`` times post-synaptic error), summed over the batch axes:

      dW = lr * r^T (f'(a) * eps_below),     db = lr * sum_batch f'(a) * eps_below

  to be added to ``W`` and ``b``.

The energy the two updates descend (Bogacz 2017 eq. 3.x; constants dropped) is
``F = sum_l 1/2 (x_l - mu_l)^T Pi_l (x_l - mu_l)`` over layers with ``eps_l = Pi_l (x_l - mu_l)``:
for a symmetric ``Pi``, ``-dF/dr = (f'(a) * eps_below) W^T - eps_self`` and
``-dF/dW = r^T (f'(a) * eps_below)``. With the input and the output layers clamped and the
hidden layers at the equilibrium of ``update_representation``, ``dW`` tends to ``lr`` times
minus the backprop gradient of ``1/2 Pi_out ||target - y||^2`` of the equivalent feedforward
net ``y = f(... f(x W_0 + b_0) ...)`` as the output precision goes to 0 (Whittington & Bogacz
2017; tested in ``tests/unit/ops/test_predictive_coding.py``).

``predictive_coding.vjp`` (attribute ``of``, plus the op's ``activation`` and ``lr``) takes the
cotangent(s) first (one per output of the op), then the op's inputs, and returns the cotangents
of every input (the second derivative ``f''`` enters the VJPs of the two update ops).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.types import ValueType
from caramba.ops._define import define, require_dtype, same_dtype

ACTIVATIONS = ("linear", "tanh", "sigmoid", "relu")
_ACT = Attr("activation", "str", "tanh", choices=ACTIVATIONS, doc="f of mu = f(r W + b)")
_LR = Attr("lr", "float", 0.1, doc="step size of the update")


def _floats(op_id: str, ts: tuple[ValueType, ...]) -> DType:
    d = same_dtype(op_id, ts)
    require_dtype(op_id, ts[0], FLOATS, "inputs")
    return d


def _layer(op_id: str, r: ValueType, w: ValueType, b: ValueType) -> tuple[tuple[int, ...], int, int]:
    """(leading axes, k, n) of a representation r [..., k], weights W [k, n], bias b [n]."""
    if w.rank != 2 or w.shape[0] < 1 or w.shape[1] < 1:
        raise GraphError(f"{op_id} W must be [k, n] (from k units above to n units below), got {w}")
    k, n = w.shape
    if r.rank < 1 or r.shape[-1] != k:
        raise GraphError(f"{op_id} r must be [..., k] = [..., {k}] (W's rows), got {r}")
    if b.shape != (n,):
        raise GraphError(f"{op_id} b must be [n] = [{n}] (W's columns), got {b}")
    return r.shape[:-1], k, n


def _lr(op_id: str, a) -> None:
    if "lr" in a and not (np.isfinite(a["lr"]) and a["lr"] > 0):
        raise GraphError(f"{op_id} needs a finite lr > 0, got {a['lr']}")


def _prediction(ins, a):
    op = "predictive_coding.prediction"
    d = _floats(op, ins)
    lead, _, n = _layer(op, *ins)
    return (ValueType(lead + (n,), d),)


prediction = define(
    "predictive_coding.prediction", _prediction, 3, (_ACT,),
    doc="top-down prediction mu = f(r W + b): (r [..., k], W [k, n], b [n]) -> [..., n];"
    " see caramba.ops.predictive_coding.",
)


def _prediction_error(ins, a):
    op = "predictive_coding.prediction_error"
    d = _floats(op, ins)
    x, mu, pi = ins
    if x.rank < 1 or mu.shape != x.shape:
        raise GraphError(f"{op} x and mu must be one shape [..., n], got {x} and {mu}")
    n = x.shape[-1]
    if pi.shape not in ((), (n,), (n, n)):
        raise GraphError(f"{op} Pi (the precision) must be a scalar, a diagonal [{n}] or a matrix [{n}, {n}], got {pi}")
    return (ValueType(x.shape, d),)


prediction_error = define(
    "predictive_coding.prediction_error", _prediction_error, 3, (),
    doc="precision-weighted error eps = Pi (x - mu): (x [..., n], mu [..., n], Pi [] | [n] | [n, n]) -> [..., n];"
    " see caramba.ops.predictive_coding.",
)


def _update_representation(ins, a):
    op = "predictive_coding.update_representation"
    d = _floats(op, ins)
    _lr(op, a)
    r, w, b, eb, es = ins
    lead, _, n = _layer(op, r, w, b)
    if eb.shape != lead + (n,):
        raise GraphError(f"{op} eps_below must be {list(lead + (n,))} (r's leading axes, then W's n), got {eb}")
    if es.shape != r.shape:
        raise GraphError(f"{op} eps_self must be {list(r.shape)} like r, got {es}")
    return (ValueType(r.shape, d),)


update_representation = define(
    "predictive_coding.update_representation", _update_representation, 5, (_ACT, _LR),
    doc="one inference step r + lr ((f'(r W + b) * eps_below) W^T - eps_self): (r [..., k], W [k, n], b [n],"
    " eps_below [..., n], eps_self [..., k]) -> [..., k]; see caramba.ops.predictive_coding.",
)


def _update_weights(ins, a):
    op = "predictive_coding.update_weights"
    d = _floats(op, ins)
    _lr(op, a)
    r, w, b, eb = ins
    lead, k, n = _layer(op, r, w, b)
    if eb.shape != lead + (n,):
        raise GraphError(f"{op} eps_below must be {list(lead + (n,))} (r's leading axes, then W's n), got {eb}")
    return ValueType((k, n), d), ValueType((n,), d)


update_weights = define(
    "predictive_coding.update_weights", _update_weights, 4, (_ACT, _LR),
    doc="Hebbian update dW = lr r^T (f'(a) * eps_below), db = lr sum f'(a) * eps_below: (r [..., k], W [k, n],"
    " b [n], eps_below [..., n]) -> (dW [k, n], db [n]); see caramba.ops.predictive_coding.",
)

# the forward type rule and the number of outputs (= cotangents the vjp takes) of each op
_FORWARD = {"prediction": (_prediction, 1), "prediction_error": (_prediction_error, 1),
            "update_representation": (_update_representation, 1), "update_weights": (_update_weights, 2)}


def _vjp(ins, a):
    of = a["of"]
    infer, n_out = _FORWARD[of]
    n_in = {"prediction": 3, "prediction_error": 3, "update_representation": 5, "update_weights": 4}[of]
    if len(ins) != n_out + n_in:
        raise GraphError(f"predictive_coding.vjp of {of} takes {n_out} cotangent(s) and {n_in} inputs, "
                         f"got {len(ins)} values")
    outs = infer(ins[n_out:], a)
    if tuple(ins[:n_out]) != tuple(outs):
        raise GraphError(f"predictive_coding.vjp of {of} takes {n_out} cotangent(s) shaped like the op's outputs "
                         f"{', '.join(str(o) for o in outs)}, then the op's inputs; got {', '.join(map(str, ins))}")
    return tuple(ins[n_out:])


vjp = define(
    "predictive_coding.vjp", _vjp, (4, 6),
    (Attr("of", "str", choices=tuple(_FORWARD), doc="the op differentiated"), _ACT, _LR),
    differentiable=False,
    doc="cotangents of the inputs of a predictive_coding op, given its output cotangent(s) and inputs;"
    " see caramba.ops.predictive_coding.",
)


# ---- the definitions, for an array module xp (numpy, jax.numpy) ---------------------------------


def activation_xp(a: Any, activation: str, xp: Any = np) -> tuple[Any, Any, Any]:
    """``(f(a), f'(a), f''(a))`` of the activation named ``activation``."""
    if activation == "linear":
        return a, xp.ones_like(a), xp.zeros_like(a)
    if activation == "tanh":
        t = xp.tanh(a)
        d = 1.0 - t * t
        return t, d, -2.0 * t * d
    if activation == "sigmoid":
        s = 0.5 * (xp.tanh(0.5 * a) + 1.0)  # stable for large |a|
        d = s * (1.0 - s)
        return s, d, d * (1.0 - 2.0 * s)
    if activation == "relu":
        pos = a > 0
        return xp.where(pos, a, xp.zeros_like(a)), pos.astype(a.dtype), xp.zeros_like(a)
    raise GraphError(f"unknown predictive_coding activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")


def _bsum(x: Any, xp: Any) -> Any:
    """Sum over all but the last axis."""
    return xp.sum(xp.reshape(x, (-1, x.shape[-1])), axis=0)


def _outer(u: Any, v: Any, xp: Any) -> Any:
    """``sum_batch u^T v`` [ku, kv] of u [..., ku], v [..., kv]."""
    return xp.reshape(u, (-1, u.shape[-1])).T @ xp.reshape(v, (-1, v.shape[-1]))


def prediction_xp(r, w, b, activation: str = "tanh", xp: Any = np, ct: Any = None):
    """mu [..., n]; with a cotangent ``ct`` [..., n] instead (dr, dW, db)."""
    mu, d1, _ = activation_xp(r @ w + b, activation, xp)
    if ct is None:
        return mu
    da = ct * d1
    return da @ w.T, _outer(r, da, xp), _bsum(da, xp)


def prediction_error_xp(x, mu, pi, xp: Any = np, ct: Any = None):
    """eps [..., n]; with a cotangent ``ct`` [..., n] instead (dx, dmu, dPi)."""
    e = x - mu
    if ct is None:
        return e @ pi.T if pi.ndim == 2 else pi * e
    if pi.ndim == 2:
        de, dpi = ct @ pi, _outer(ct, e, xp)
    elif pi.ndim == 1:
        de, dpi = ct * pi, _bsum(ct * e, xp)
    else:
        de, dpi = ct * pi, xp.sum(ct * e)
    return de, -de, dpi


def _back_through_a(r, w, da, xp):
    """(dr, dW, db) of ``a = r W + b`` from ``da`` [..., n]."""
    return da @ w.T, _outer(r, da, xp), _bsum(da, xp)


def update_representation_xp(r, w, b, eb, es, activation: str = "tanh", lr: float = 0.1, xp: Any = np,
                             ct: Any = None):
    """r' [..., k]; with a cotangent ``ct`` [..., k] instead (dr, dW, db, deps_below, deps_self)."""
    _, d1, d2 = activation_xp(r @ w + b, activation, xp)
    g = d1 * eb
    if ct is None:
        return r + lr * (g @ w.T - es)
    dg = lr * (ct @ w)  # [..., n]
    dr, dw, db = _back_through_a(r, w, dg * eb * d2, xp)
    return ct + dr, dw + lr * _outer(ct, g, xp), db, dg * d1, -lr * ct


def update_weights_xp(r, w, b, eb, activation: str = "tanh", lr: float = 0.1, xp: Any = np,
                      ct: Any = None):
    """(dW [k, n], db [n]); with cotangents ``ct = (cW, cb)`` instead (dr, dW, db, deps_below)."""
    _, d1, d2 = activation_xp(r @ w + b, activation, xp)
    g = d1 * eb
    if ct is None:
        return lr * _outer(r, g, xp), lr * _bsum(g, xp)
    cw, cb = ct
    dg = lr * (r @ cw + cb)  # [..., n]
    dr, dw, db = _back_through_a(r, w, dg * eb * d2, xp)
    return dr + lr * (g @ cw.T), dw, db, dg * d1


__all__ = [
    "ACTIVATIONS", "activation_xp", "prediction", "prediction_error", "prediction_error_xp", "prediction_xp",
    "update_representation", "update_representation_xp", "update_weights", "update_weights_xp", "vjp",
]
