"""markov_blanket.*: Markov-blanket partitions, mutual information and blanket flows.

The partition follows Pearl (1988, "Probabilistic reasoning in intelligent systems", the Markov
blanket of a node set in a directed graph: parents, children and the children's other parents)
and Friston's labelling of the blanket (Friston 2013, "Life as we know it", J. R. Soc. Interface
10; Parr, Da Costa & Friston 2020, "Markov blankets, information geometry and stochastic
thermodynamics", Phil. Trans. R. Soc. A 378):

- ``partition(adj [n, n], internal bool [n]) -> labels int64 [n]``. ``adj[i, j] != 0`` is a
  directed edge (an influence) ``i -> j``; the diagonal is ignored. With ``I`` the internal
  nodes, ``pa``/``ch`` parents/children in the graph, the blanket is
  ``b = (pa(I) | ch(I) | pa(ch(I))) - I``; of the blanket, the **active** states are those
  influenced by an internal state (``ch(I) - I``), the **sensory** states the rest (they
  influence internal states or share a child with them but are not driven by them); every other
  node is **external**. Labels: ``0`` sensory, ``1`` active, ``2`` internal, ``3`` external.
  Given the blanket, internal and external nodes are conditionally independent (d-separation).
- ``mutual_information(x; kind)`` in nats. ``kind: gaussian``: ``x = Sigma [..., n, n]`` a
  covariance, index sets ``a`` and ``b`` (attributes, disjoint, in ``[0, n)``):
  ``I(X_a; X_b) = 0.5 ln( det Sigma_aa det Sigma_bb / det Sigma_(a+b)(a+b) )`` (Cover & Thomas,
  "Elements of information theory", eq. 8.56 / 9.x). ``kind: discrete``: ``x = p [..., X, Y]``
  a joint table (counts are normalised: ``P = p / sum p``),
  ``I = sum P ln(P / (P_x P_y))`` with ``0 ln 0 = 0`` (scikit-learn's ``mutual_info_score`` on
  the contingency table). Sub-determinants are taken of ``M Sigma M + (I - M)`` (``M`` the
  diagonal mask of an index set), so shapes stay static; a sub-determinant ``<= 0`` (not a
  covariance) gives NaN. An all-zero joint table gives NaN.
- ``flow_internal(x_sens [..., ns], W [ns, ni], b [ni]) = tanh(x_sens W + b)`` and
  ``flow_active(x_int [..., ni], W [ni, na], b [na]) = tanh(x_int W + b)``: the blanket-mediated
  flows of the ``markov_blanket/flow`` block (internal states driven by sensory states, active
  states by internal states; the original Caramba's definition).

``markov_blanket.vjp`` (attribute ``of``: ``mutual_information`` or ``flow``, with the forward's
``kind``, ``a``, ``b``) takes the cotangent first, then the op's inputs, and returns the
cotangents of its float inputs. ``d ln det X / dX = X^{-T}`` (no symmetrisation: every entry of
Sigma is an independent input); the discrete gradient ``(g - sum g P) / sum p`` with
``g = ln P - ln P_x - ln P_y`` is taken as 0 in the ``ln P`` term at empty cells.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.types import ValueType
from caramba.ops._define import define, require_dtype, same_dtype

SENSORY, ACTIVE, INTERNAL, EXTERNAL = 0, 1, 2, 3
LABELS = ("sensory", "active", "internal", "external")


def _partition(ins, a):
    op = "markov_blanket.partition"
    adj, internal = ins
    require_dtype(op, adj, FLOATS, "adj")
    if adj.rank != 2 or adj.shape[0] != adj.shape[1] or adj.shape[0] < 1:
        raise GraphError(f"{op} adj must be a square [n, n] adjacency matrix (adj[i, j] != 0: i -> j), got {adj}")
    if internal.dtype is not DType.bool or internal.shape != (adj.shape[0],):
        raise GraphError(f"{op} internal must be a bool mask [n] = [{adj.shape[0]}] of the internal nodes, got {internal}")
    return (ValueType((adj.shape[0],), DType.int64),)


partition = define(
    "markov_blanket.partition", _partition, 2, (), differentiable=False,
    doc="labels int64 [n] (0 sensory, 1 active, 2 internal, 3 external) from (adj [n, n], internal bool [n]);"
    " see caramba.ops.markov_blanket.",
)

MI_ATTRS = (
    Attr("kind", "str", "gaussian", choices=("gaussian", "discrete"), doc="gaussian (covariance) or discrete (joint)"),
    Attr("a", "ints", (), doc="gaussian: the first index set"),
    Attr("b", "ints", (), doc="gaussian: the second index set"),
)


def _index_sets(op: str, n: int, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    for name, idx in (("a", a), ("b", b)):
        if not idx:
            raise GraphError(f"{op} (gaussian) index set {name} is empty; give the variables, e.g. {name}: [0]")
        bad = [i for i in idx if not 0 <= i < n]
        if bad:
            raise GraphError(f"{op} (gaussian) index set {name} has {bad} outside [0, {n}) for a {n}x{n} covariance")
        if len(set(idx)) != len(idx):
            raise GraphError(f"{op} (gaussian) index set {name} repeats an index: {list(idx)}")
    common = sorted(set(a) & set(b))
    if common:
        raise GraphError(f"{op} (gaussian) index sets a and b must be disjoint; both hold {common}")


def _mutual_information(ins, a):
    op = "markov_blanket.mutual_information"
    (x,) = ins
    require_dtype(op, x, FLOATS, "x")
    if a["kind"] == "gaussian":
        if x.rank < 2 or x.shape[-1] != x.shape[-2]:
            raise GraphError(f"{op} (gaussian) x must be a covariance [..., n, n], got {x}")
        _index_sets(op, x.shape[-1], a["a"], a["b"])
    elif x.rank < 2 or x.shape[-1] < 1 or x.shape[-2] < 1:
        raise GraphError(f"{op} (discrete) x must be a joint table [..., X, Y], got {x}")
    return (ValueType(x.shape[:-2], x.dtype),)


mutual_information = define(
    "markov_blanket.mutual_information", _mutual_information, 1, MI_ATTRS,
    doc="I(X_a; X_b) in nats: gaussian from a covariance [..., n, n] and index sets a, b; discrete from a joint"
    " table [..., X, Y] -> [...]; see caramba.ops.markov_blanket.",
)


def _flow(op: str):
    def infer(ins, a):
        d = same_dtype(op, ins)
        require_dtype(op, ins[0], FLOATS, "x")
        x, w, b = ins
        if x.rank < 1 or w.rank != 2 or w.shape[0] != x.shape[-1]:
            raise GraphError(f"{op} W must be [{x.shape[-1] if x.rank else 'n_in'}, n_out] for x {x}, got {w}")
        if b.shape != (w.shape[1],):
            raise GraphError(f"{op} bias must be [n_out] = [{w.shape[1]}], got {b}")
        return (ValueType(x.shape[:-1] + (w.shape[1],), d),)

    return infer


flow_internal = define(
    "markov_blanket.flow_internal", _flow("markov_blanket.flow_internal"), 3, (),
    doc="internal flow tanh(x_sens W + b): (x_sens [..., ns], W [ns, ni], b [ni]) -> [..., ni];"
    " see caramba.ops.markov_blanket.",
)
flow_active = define(
    "markov_blanket.flow_active", _flow("markov_blanket.flow_active"), 3, (),
    doc="active flow tanh(x_int W + b): (x_int [..., ni], W [ni, na], b [na]) -> [..., na];"
    " see caramba.ops.markov_blanket.",
)


def _vjp(ins, a):
    of = a["of"]
    n = 1 if of == "mutual_information" else 3
    if len(ins) != n + 1:
        raise GraphError(f"markov_blanket.vjp of {of} takes the cotangent and {n} inputs, got {len(ins)} inputs")
    (y,) = (_mutual_information if n == 1 else _flow("markov_blanket.vjp"))(ins[1:], a)
    if ins[0] != y:
        raise GraphError(f"markov_blanket.vjp of {of}: the cotangent must be {y} like the op's output, got {ins[0]}")
    return tuple(ins[1:])


vjp = define(
    "markov_blanket.vjp", _vjp, (2, 4),
    (Attr("of", "str", choices=("mutual_information", "flow"), doc="the op differentiated"), *MI_ATTRS),
    differentiable=False,
    doc="cotangents of the float inputs of markov_blanket.mutual_information / flow_*, given the output"
    " cotangent and the inputs; see caramba.ops.markov_blanket.",
)


# ---- the definitions, for an array module xp (numpy, jax.numpy) ---------------------------------


def partition_xp(adj, internal, xp: Any = np):
    """labels int64 [n] (see the module docstring)."""
    n = adj.shape[0]
    e = ((adj != 0) & ~xp.eye(n, dtype=bool)).astype(xp.int64)
    i = internal.astype(xp.int64)
    ch = (i @ e) > 0  # some internal node -> j
    pa = (e @ i) > 0  # i -> some internal node
    co = (e @ ch.astype(xp.int64)) > 0  # parent of a child of I
    blanket = (pa | ch | co) & ~internal
    active = ch & ~internal
    sensory = blanket & ~active
    return xp.where(internal, INTERNAL, xp.where(active, ACTIVE, xp.where(sensory, SENSORY, EXTERNAL))).astype(xp.int64)


def masks(n: int, a: tuple[int, ...], b: tuple[int, ...]) -> list[np.ndarray]:
    """The float masks of a, b and a + b (host NumPy, [n])."""
    out = []
    for idx in (a, b, tuple(a) + tuple(b)):
        m = np.zeros(n)
        m[list(idx)] = 1.0
        out.append(m)
    return out


def _sub(x, m, xp):
    """``M X M + (I - M)``: det equals det of the submatrix on the mask."""
    m = xp.asarray(m, x.dtype)
    return x * m[:, None] * m[None, :] + xp.diag(1.0 - m)


def _logdet(x, xp):
    """``ln det x``, NaN where ``det x <= 0`` (not a covariance)."""
    sign, logabs = xp.linalg.slogdet(x)
    return xp.where(sign > 0, logabs, xp.asarray(np.nan, logabs.dtype))


def mi_gaussian_xp(cov, a, b, xp: Any = np, ct: Any = None):
    """I [...] from Sigma [..., n, n]; with a cotangent instead (dSigma,)."""
    ms = masks(cov.shape[-1], a, b)
    subs = [_sub(cov, m, xp) for m in ms]
    if ct is None:
        la, lb, lab = (_logdet(s, xp) for s in subs)
        return 0.5 * (la + lb - lab)
    out = xp.zeros_like(cov)
    for s, m, sign in zip(subs, ms, (1.0, 1.0, -1.0), strict=True):
        mm = xp.asarray(m, cov.dtype)
        out = out + sign * xp.swapaxes(xp.linalg.inv(s), -1, -2) * mm[:, None] * mm[None, :]
    return (0.5 * ct[..., None, None] * out,)


def _log0(x, xp):
    pos = x > 0
    return xp.where(pos, xp.log(xp.where(pos, x, xp.ones_like(x))), xp.zeros_like(x))


def mi_discrete_xp(p, xp: Any = np, ct: Any = None):
    """I [...] from a joint table p [..., X, Y]; with a cotangent instead (dp,)."""
    z = xp.sum(p, axis=(-2, -1), keepdims=True)
    pn = p / z
    px = xp.sum(pn, axis=-1, keepdims=True)
    py = xp.sum(pn, axis=-2, keepdims=True)
    if ct is None:
        return (xp.sum(pn * _log0(pn, xp), axis=(-2, -1)) - xp.sum(px * _log0(px, xp), axis=(-2, -1))
                - xp.sum(py * _log0(py, xp), axis=(-2, -1)))
    g = _log0(pn, xp) - _log0(px, xp) - _log0(py, xp)
    g = g - xp.sum(g * pn, axis=(-2, -1), keepdims=True)
    return (ct[..., None, None] * g / z,)


def mutual_information_xp(x, kind: str, a=(), b=(), xp: Any = np, ct: Any = None):
    if kind == "gaussian":
        return mi_gaussian_xp(x, a, b, xp, ct)
    return mi_discrete_xp(x, xp, ct)


def flow_xp(x, w, b, xp: Any = np, ct: Any = None):
    """tanh(x W + b); with a cotangent instead (dx, dW, db)."""
    y = xp.tanh(x @ w + b)
    if ct is None:
        return y
    dz = ct * (1.0 - y * y)
    dz2 = xp.reshape(dz, (-1, w.shape[1]))
    return dz @ w.T, xp.reshape(x, (-1, w.shape[0])).T @ dz2, xp.sum(dz2, axis=0)


__all__ = [
    "ACTIVE", "EXTERNAL", "INTERNAL", "LABELS", "SENSORY", "flow_active", "flow_internal", "flow_xp", "masks",
    "mi_discrete_xp", "mi_gaussian_xp", "mutual_information", "mutual_information_xp", "partition", "partition_xp",
    "vjp",
]
