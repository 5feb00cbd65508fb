"""active_inference.*: discrete-state active inference in the A/B/C/D formulation.

A single hidden-state factor with ``S`` states, one observation modality with ``O`` outcomes and
``U`` actions (Friston et al. 2017, "Active inference: a process theory", Neural Computation
29(1); Da Costa et al. 2020, "Active inference on discrete state-spaces: a synthesis", J. Math.
Psychol. 99; the conventions of ``pymdp``, Heins et al. 2022, JOSS 7(73)):

- ``A [O, S]``: likelihood ``P(o | s)`` (columns sum to 1);
- ``B [S, S, U]``: transitions ``P(s' | s, u) = B[s', s, u]`` (columns sum to 1);
- ``C [O]``: log-preferences over observations; the preferred distribution is
  ``P~(o) = softmax(C)`` (``ln P~ = C - logsumexp(C)``);
- ``D [S]``: the prior over initial states (the ``prior`` input below; any empirical prior
  ``B[:, :, u] q`` works the same).

Observations are distributions ``obs [..., O]`` (one-hot for an observed outcome ``o``); then
``ln A[o, s]`` generalises to ``sum_o obs_o ln A[o, s]`` (pymdp's ``distr_obs=True``). Logs of
the model (A, prior, policy prior E) are taken as ``ln max(x, eps)`` with ``eps = 2**-52``
(pymdp's ``MINVAL``, so zeros in A give ``-36.04`` rather than ``-inf``); entropies use
``0 ln 0 = 0``. Leading axes ``...`` are independent problems. Every float input has one dtype.

- ``belief_update(A, obs [..., O], prior [..., S]) -> q [..., S]``: the exact posterior of one
  factor and one observation, the fixed point of variational message passing (pymdp's
  ``run_vanilla_fpi``):  ``q(s) = softmax_s( sum_o obs_o ln A[o, s] + ln prior(s) )``.
- ``free_energy(q [..., S], A, obs [..., O], prior [..., S]) -> F [...]``: the variational free
  energy ``F = E_q[ ln q(s) - ln A[o, s] - ln prior(s) ]``
  ``= KL(q || P(s | o)) - ln P(o)``; minimal (``-ln P(o)``) at ``q = belief_update(...)``.
- ``expected_free_energy(q [..., S], A, B, C, policies int64 [P, T]) -> G [..., P]``: for each
  policy (a sequence of ``T`` actions), with ``Q_0 = q`` and ``Q_t = B[:, :, u_t] Q_{t-1}``,
  ``q_o,t = A Q_t``:

      G(pi) = sum_{t=1..T}  KL(q_o,t || softmax(C))              (risk)
                          + sum_s Q_t(s) H[A[:, s]]             (ambiguity)

  (Da Costa et al. eq. (8)). pymdp returns ``neg_efe = H[q_o] - E_Q H[A] + q_o . C`` summed
  over t, so ``G = -neg_efe + T logsumexp(C)`` (equal when C is already normalised). Action
  indices outside ``[0, U)`` are an error at run time.
- ``precision_weight(G [..., P], gamma [], E? [P]) -> [..., P]``: the policy posterior
  ``q(pi) = softmax(-gamma G + ln E)`` (E: prior over policies, uniform when omitted), pymdp's
  ``update_posterior_policies`` with ``neg_efe = -G``.

``active_inference.vjp`` (attribute ``of``) takes the cotangent first, then the op's inputs, and
returns the cotangents of its float inputs (policies get none), summed over broadcast axes.
Derivatives at clipped or zero points follow the forward's conventions: ``d ln max(x, eps)`` is
``0`` for ``x < eps``; ``d (q ln q) / dq`` at ``q = 0`` is taken as ``0`` (it is ``-inf``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.types import ValueType
from caramba.ops._define import define, require_dtype, same_dtype

EPS = 2.0**-52  # pymdp's MINVAL = finfo(float64).eps


def _floats(op_id: str, ts: tuple[ValueType, ...], names: tuple[str, ...]) -> DType:
    d = same_dtype(op_id, ts)
    require_dtype(op_id, ts[0], FLOATS, names[0])
    return d


def _likelihood(op_id: str, a: ValueType) -> tuple[int, int]:
    if a.rank != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise GraphError(f"{op_id} A (the likelihood P(o | s)) must be [O, S] with O, S >= 1, got {a}")
    return a.shape[0], a.shape[1]


def _obs_prior(op_id: str, o: int, s: int, obs: ValueType, prior: ValueType) -> tuple[int, ...]:
    if obs.rank < 1 or obs.shape[-1] != o:
        raise GraphError(f"{op_id} obs must be [..., O] = [..., {o}] (a distribution over A's outcomes), got {obs}")
    lead = obs.shape[:-1]
    if prior.shape != lead + (s,):
        raise GraphError(f"{op_id} prior must be {list(lead + (s,))} (obs's leading axes, then A's S), got {prior}")
    return lead


def _belief_update(ins, a):
    op = "active_inference.belief_update"
    d = _floats(op, ins, ("A", "obs", "prior"))
    o, s = _likelihood(op, ins[0])
    lead = _obs_prior(op, o, s, ins[1], ins[2])
    return (ValueType(lead + (s,), d),)


belief_update = define(
    "active_inference.belief_update", _belief_update, 3, (),
    doc="posterior q(s) = softmax(obs . ln A + ln prior): (A [O, S], obs [..., O], prior [..., S]) -> [..., S];"
    " see caramba.ops.active_inference.",
)


def _free_energy(ins, a):
    op = "active_inference.free_energy"
    d = _floats(op, ins, ("q", "A", "obs", "prior"))
    o, s = _likelihood(op, ins[1])
    lead = _obs_prior(op, o, s, ins[2], ins[3])
    if ins[0].shape != lead + (s,):
        raise GraphError(f"{op} q must be {list(lead + (s,))} like prior, got {ins[0]}")
    return (ValueType(lead, d),)


free_energy = define(
    "active_inference.free_energy", _free_energy, 4, (),
    doc="variational free energy E_q[ln q - obs . ln A - ln prior]: (q [..., S], A [O, S], obs [..., O],"
    " prior [..., S]) -> [...]; see caramba.ops.active_inference.",
)


def _expected_free_energy(ins, a):
    op = "active_inference.expected_free_energy"
    d = _floats(op, ins[:4], ("q", "A", "B", "C"))
    o, s = _likelihood(op, ins[1])
    q, b, c, pol = ins[0], ins[2], ins[3], ins[4]
    if q.rank < 1 or q.shape[-1] != s:
        raise GraphError(f"{op} q must be [..., S] = [..., {s}] (A's states), got {q}")
    if b.rank != 3 or b.shape[0] != s or b.shape[1] != s or b.shape[2] < 1:
        raise GraphError(f"{op} B (transitions P(s' | s, u)) must be [S, S, U] = [{s}, {s}, U] with U >= 1, got {b}")
    if c.shape != (o,):
        raise GraphError(f"{op} C (log-preferences) must be [O] = [{o}], got {c}")
    if pol.dtype is not DType.int64 or pol.rank != 2 or pol.shape[0] < 1 or pol.shape[1] < 1:
        raise GraphError(f"{op} policies must be int64 [P, T] (action indices) with P, T >= 1, got {pol}")
    return (ValueType(q.shape[:-1] + (pol.shape[0],), d),)


expected_free_energy = define(
    "active_inference.expected_free_energy", _expected_free_energy, 5, (),
    doc="G(pi) = sum_t KL(A Q_t || softmax(C)) + Q_t . H[A]: (q [..., S], A [O, S], B [S, S, U], C [O],"
    " policies int64 [P, T]) -> [..., P]; see caramba.ops.active_inference.",
)


def _precision_weight(ins, a):
    op = "active_inference.precision_weight"
    d = _floats(op, ins, ("G", "gamma", "E")[: len(ins)])
    g = ins[0]
    if g.rank < 1 or g.shape[-1] < 1:
        raise GraphError(f"{op} G must be [..., P] with P >= 1 policies, got {g}")
    if ins[1].shape != ():
        raise GraphError(f"{op} gamma (the precision) must be a scalar, got {ins[1]}")
    if len(ins) == 3 and ins[2].shape != (g.shape[-1],):
        raise GraphError(f"{op} E (the prior over policies) must be [P] = [{g.shape[-1]}], got {ins[2]}")
    return (ValueType(g.shape, d),)


precision_weight = define(
    "active_inference.precision_weight", _precision_weight, (2, 3), (),
    doc="policy posterior softmax(-gamma G + ln E): (G [..., P], gamma [], E? [P]) -> [..., P];"
    " see caramba.ops.active_inference.",
)

VJP_OF = {"belief_update": (3, 3), "free_energy": (4, 4), "expected_free_energy": (5, 5), "precision_weight": (2, 3)}
_FORWARD = {"belief_update": _belief_update, "free_energy": _free_energy,
            "expected_free_energy": _expected_free_energy, "precision_weight": _precision_weight}


def _vjp(ins, a):
    of = a["of"]
    lo, hi = VJP_OF[of]
    if not lo + 1 <= len(ins) <= hi + 1:
        raise GraphError(f"active_inference.vjp of {of} takes the cotangent and {lo}"
                         f"{'' if lo == hi else f'-{hi}'} inputs, got {len(ins)} inputs")
    (y,) = _FORWARD[of](ins[1:], a)
    if ins[0] != y:
        raise GraphError(f"active_inference.vjp of {of}: the cotangent must be {y} like the op's output, got {ins[0]}")
    return tuple(t for t in ins[1:] if t.dtype is not DType.int64)


vjp = define(
    "active_inference.vjp", _vjp, (3, 6), (Attr("of", "str", choices=tuple(VJP_OF), doc="the op differentiated"),),
    differentiable=False,
    doc="cotangents of the float inputs of an active_inference op, given its output cotangent and inputs;"
    " see caramba.ops.active_inference.",
)


# ---- the definitions, for an array module xp (numpy, jax.numpy) ---------------------------------


def safe_log(x: Any, xp: Any = np) -> Any:
    """``ln max(x, eps)`` (pymdp's ``log_stable``)."""
    return xp.log(xp.maximum(x, xp.asarray(EPS, x.dtype)))


def d_safe_log(x: Any, xp: Any = np) -> Any:
    """The derivative of ``safe_log``: ``1 / x`` where ``x > eps``, else 0."""
    big = x > EPS
    return xp.where(big, 1.0 / xp.where(big, x, xp.ones_like(x)), xp.zeros_like(x))


def xlogx(x: Any, xp: Any = np) -> Any:
    """``x ln x`` with ``0 ln 0 = 0``."""
    pos = x > 0
    return xp.where(pos, x * xp.log(xp.where(pos, x, xp.ones_like(x))), xp.zeros_like(x))


def d_xlogx(x: Any, xp: Any = np) -> Any:
    """``ln x + 1`` where ``x > 0``, else 0 (see the module docstring)."""
    pos = x > 0
    return xp.where(pos, xp.log(xp.where(pos, x, xp.ones_like(x))) + 1.0, xp.zeros_like(x))


def _softmax(z: Any, xp: Any) -> Any:
    e = xp.exp(z - xp.max(z, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


def _softmax_vjp(y: Any, ct: Any, xp: Any) -> Any:
    return y * (ct - xp.sum(ct * y, axis=-1, keepdims=True))


def _lead_sum(x: Any, keep: int, xp: Any) -> Any:
    """Sum ``x`` over all but its last ``keep`` axes."""
    return xp.sum(xp.reshape(x, (-1,) + tuple(x.shape[x.ndim - keep:])), axis=0)


def _evidence(a, obs, prior, xp):
    """``z = obs . ln A + ln prior`` [..., S]."""
    return xp.einsum("...o,os->...s", obs, safe_log(a, xp)) + safe_log(prior, xp)


def _evidence_vjp(a, obs, prior, dz, xp):
    """(dA, dobs, dprior) from the cotangent ``dz`` of ``_evidence``."""
    la = safe_log(a, xp)
    dobs = xp.einsum("...s,os->...o", dz, la)
    n, s = dz.shape[-1], a.shape[0]
    dla = xp.einsum("xo,xs->os", xp.reshape(obs, (-1, s)), xp.reshape(dz, (-1, n)))
    return dla * d_safe_log(a, xp), dobs, dz * d_safe_log(prior, xp)


def belief_update_xp(a, obs, prior, xp: Any = np, ct: Any = None):
    """q [..., S]; with a cotangent ``ct`` [..., S] instead (dA, dobs, dprior)."""
    q = _softmax(_evidence(a, obs, prior, xp), xp)
    if ct is None:
        return q
    return _evidence_vjp(a, obs, prior, _softmax_vjp(q, ct, xp), xp)


def free_energy_xp(q, a, obs, prior, xp: Any = np, ct: Any = None):
    """F [...]; with a cotangent ``ct`` [...] instead (dq, dA, dobs, dprior)."""
    z = _evidence(a, obs, prior, xp)
    if ct is None:
        return xp.sum(xlogx(q, xp) - q * z, axis=-1)
    c = ct[..., None]
    dq = c * (d_xlogx(q, xp) - z)
    return (dq, *_evidence_vjp(a, obs, prior, -c * q, xp))


def _log_softmax(c: Any, xp: Any) -> Any:
    m = xp.max(c)
    return c - (m + xp.log(xp.sum(xp.exp(c - m))))


def expected_free_energy_xp(q, a, b, c, policies, xp: Any = np, ct: Any = None):
    """G [..., P]; with a cotangent ``ct`` [..., P] instead (dq, dA, dB, dC)."""
    p, horizon = policies.shape
    s, u = b.shape[1], b.shape[2]
    lnc = _log_softmax(c, xp)
    ha = -xp.sum(xlogx(a, xp), axis=0)  # [S]: the entropy of each column of A
    qs = [xp.broadcast_to(q[..., None, :], q.shape[:-1] + (p, s))]
    g = xp.zeros(q.shape[:-1] + (p,), q.dtype)
    for t in range(horizon):
        bt = xp.take(b, policies[:, t], axis=2)  # [S', S, P]
        qt = xp.einsum("ijp,...pj->...pi", bt, qs[-1])
        qs.append(qt)
        if ct is None:
            qo = xp.einsum("os,...ps->...po", a, qt)
            g = g + xp.sum(xlogx(qo, xp) - qo * lnc, axis=-1) + xp.einsum("...ps,s->...p", qt, ha)
    if ct is None:
        return g
    da = xp.zeros_like(a)
    db = xp.zeros_like(b)
    dlnc = xp.zeros_like(c)
    dha = xp.zeros_like(ha)
    gq = xp.zeros_like(qs[-1])
    cp = ct[..., None]  # [..., P, 1]
    lead_p = (-1, p, s)
    for t in range(horizon, 0, -1):
        qt = qs[t]
        qo = xp.einsum("os,...ps->...po", a, qt)
        dqo = cp * (d_xlogx(qo, xp) - lnc)
        gq = gq + xp.einsum("...po,os->...ps", dqo, a) + cp * ha
        da = da + xp.einsum("xpo,xps->os", xp.reshape(dqo, (-1, p, a.shape[0])), xp.reshape(qt, lead_p))
        dha = dha + xp.einsum("xp,xps->s", xp.reshape(ct, (-1, p)), xp.reshape(qt, lead_p))
        dlnc = dlnc - xp.einsum("xp,xpo->o", xp.reshape(ct, (-1, p)), xp.reshape(qo, (-1, p, a.shape[0])))
        bt = xp.take(b, policies[:, t - 1], axis=2)
        prev = qs[t - 1]
        onehot = (policies[:, t - 1][:, None] == xp.arange(u)).astype(q.dtype)  # [P, U]
        db = db + xp.einsum("xpi,xpj,pu->iju", xp.reshape(gq, lead_p), xp.reshape(prev, lead_p), onehot)
        gq = xp.einsum("ijp,...pi->...pj", bt, gq)
    dq = xp.sum(gq, axis=-2)
    da = da - dha[None, :] * d_xlogx(a, xp)
    dc = dlnc - xp.exp(lnc) * xp.sum(dlnc)
    return dq, da, db, dc


def precision_weight_xp(g, gamma, e=None, xp: Any = np, ct: Any = None):
    """q(pi) [..., P]; with a cotangent ``ct`` instead (dG, dgamma, dE?)."""
    z = -gamma * g
    if e is not None:
        z = z + safe_log(e, xp)
    y = _softmax(z, xp)
    if ct is None:
        return y
    dz = _softmax_vjp(y, ct, xp)
    out = (-gamma * dz, -xp.sum(dz * g))
    if e is not None:
        out = (*out, _lead_sum(dz, 1, xp) * d_safe_log(e, xp))
    return out


__all__ = [
    "EPS", "VJP_OF", "belief_update", "belief_update_xp", "d_safe_log", "d_xlogx", "expected_free_energy",
    "expected_free_energy_xp", "free_energy", "free_energy_xp", "precision_weight", "precision_weight_xp", "safe_log",
    "vjp", "xlogx",
]
