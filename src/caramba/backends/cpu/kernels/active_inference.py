"""cpu kernels for active_inference.* and markov_blanket.*: the NumPy definitions written once in
``caramba.ops.{active_inference, markov_blanket}``, run with ``xp = numpy``."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.kernels import kernel
from caramba.backends.cpu.kernels.shape import IndexOutOfRange
from caramba.ir.dtypes import DType
from caramba.ops import active_inference as ai
from caramba.ops import markov_blanket as mb

# float16 is not claimed: ln max(x, 2**-52) and the entropies need float32's range at least
FLOAT = frozenset({DType.float64, DType.float32})
WITH_INTS = FLOAT | {DType.int64, DType.bool}  # int64: policies, partition labels; bool: internal mask


def check_policies(node, policies: np.ndarray, u: int) -> None:
    bad = (policies < 0) | (policies >= u)
    if np.any(bad):
        raise IndexOutOfRange(f"{node.op} (node {node.id}): policies hold actions {np.unique(policies[bad])[:5].tolist()}"
                              f" outside [0, {u}) for B with {u} actions")


# ---- active_inference -------------------------------------------------------------------------
@kernel("active_inference.belief_update", FLOAT)
def _belief_update(node, ins):
    return lambda a, obs, prior: ai.belief_update_xp(a, obs, prior, np)


@kernel("active_inference.free_energy", FLOAT)
def _free_energy(node, ins):
    return lambda q, a, obs, prior: np.asarray(ai.free_energy_xp(q, a, obs, prior, np))


@kernel("active_inference.expected_free_energy", WITH_INTS)
def _expected_free_energy(node, ins):
    def efe(q, a, b, c, policies):
        check_policies(node, policies, b.shape[2])
        return ai.expected_free_energy_xp(q, a, b, c, policies, np)

    return efe


@kernel("active_inference.precision_weight", FLOAT)
def _precision_weight(node, ins):
    return lambda g, gamma, e=None: ai.precision_weight_xp(g, gamma, e, np)


@kernel("active_inference.vjp", WITH_INTS)
def _ai_vjp(node, ins):
    of = node.attrs["of"]

    def vjp(ct, *xs):
        if of == "belief_update":
            return ai.belief_update_xp(*xs, np, ct=ct)
        if of == "free_energy":
            return ai.free_energy_xp(*xs, np, ct=ct)
        if of == "precision_weight":
            g, gamma, *e = xs
            return tuple(np.asarray(v) for v in ai.precision_weight_xp(g, gamma, e[0] if e else None, np, ct=ct))
        check_policies(node, xs[4], xs[2].shape[2])
        return ai.expected_free_energy_xp(*xs, np, ct=ct)

    return vjp


# ---- markov_blanket ---------------------------------------------------------------------------
@kernel("markov_blanket.partition", WITH_INTS)
def _partition(node, ins):
    return lambda adj, internal: mb.partition_xp(adj, internal, np)


@kernel("markov_blanket.mutual_information", FLOAT)
def _mutual_information(node, ins):
    kind, a, b = node.attrs["kind"], node.attrs["a"], node.attrs["b"]
    return lambda x: np.asarray(mb.mutual_information_xp(x, kind, a, b, np))


@kernel("markov_blanket.flow_internal", FLOAT)
def _flow_internal(node, ins):
    return lambda x, w, b: mb.flow_xp(x, w, b, np)


@kernel("markov_blanket.flow_active", FLOAT)
def _flow_active(node, ins):
    return lambda x, w, b: mb.flow_xp(x, w, b, np)


@kernel("markov_blanket.vjp", FLOAT)
def _mb_vjp(node, ins):
    of, kind, a, b = node.attrs["of"], node.attrs["kind"], node.attrs["a"], node.attrs["b"]

    def vjp(ct, *xs):
        if of == "flow":
            return mb.flow_xp(*xs, np, ct=ct)
        return mb.mutual_information_xp(xs[0], kind, a, b, np, ct=ct)[0]  # one output: the array itself

    return vjp
