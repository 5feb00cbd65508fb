"""xla rules for active_inference.* and markov_blanket.*: the definitions in
``caramba.ops.{active_inference, markov_blanket}`` with ``xp = jax.numpy`` (the same steps as
the cpu kernels; the policy horizon is unrolled)."""

from __future__ import annotations

import jax.numpy as jnp

from caramba.backends.xla.lowering import BOOL, KEY, rule
from caramba.ir.dtypes import DType
from caramba.ops import active_inference as ai
from caramba.ops import markov_blanket as mb

# float16 is not claimed: ln max(x, 2**-52) and the entropies need float32's range at least
FLOAT = frozenset({DType.float64, DType.float32})
WITH_INTS = FLOAT | KEY | BOOL


def _policies(ctx, node, policies, u):
    ctx.check_range(node, policies, 0, u, f"{node.op}: policies hold actions outside [0, {u}) for B with {u} actions")


# ---- active_inference -------------------------------------------------------------------------
@rule("active_inference.belief_update", FLOAT)
def _belief_update(node, ins, ctx):
    return lambda a, obs, prior: ai.belief_update_xp(a, obs, prior, jnp)


@rule("active_inference.free_energy", FLOAT)
def _free_energy(node, ins, ctx):
    return lambda q, a, obs, prior: ai.free_energy_xp(q, a, obs, prior, jnp)


@rule("active_inference.expected_free_energy", WITH_INTS)
def _expected_free_energy(node, ins, ctx):
    def efe(q, a, b, c, policies):
        _policies(ctx, node, policies, b.shape[2])
        return ai.expected_free_energy_xp(q, a, b, c, policies, jnp)

    return efe


@rule("active_inference.precision_weight", FLOAT)
def _precision_weight(node, ins, ctx):
    return lambda g, gamma, e=None: ai.precision_weight_xp(g, gamma, e, jnp)


@rule("active_inference.vjp", WITH_INTS)
def _ai_vjp(node, ins, ctx):
    of = node.attrs["of"]

    def vjp(ct, *xs):
        if of == "belief_update":
            return ai.belief_update_xp(*xs, jnp, ct=ct)
        if of == "free_energy":
            return ai.free_energy_xp(*xs, jnp, ct=ct)
        if of == "precision_weight":
            g, gamma, *e = xs
            return ai.precision_weight_xp(g, gamma, e[0] if e else None, jnp, ct=ct)
        _policies(ctx, node, xs[4], xs[2].shape[2])
        return ai.expected_free_energy_xp(*xs, jnp, ct=ct)

    return vjp


# ---- markov_blanket ---------------------------------------------------------------------------
@rule("markov_blanket.partition", WITH_INTS)
def _partition(node, ins, ctx):
    return lambda adj, internal: mb.partition_xp(adj, internal, jnp)


@rule("markov_blanket.mutual_information", FLOAT)
def _mutual_information(node, ins, ctx):
    kind, a, b = node.attrs["kind"], node.attrs["a"], node.attrs["b"]
    return lambda x: mb.mutual_information_xp(x, kind, a, b, jnp)


@rule("markov_blanket.flow_internal", FLOAT)
def _flow_internal(node, ins, ctx):
    return lambda x, w, b: mb.flow_xp(x, w, b, jnp)


@rule("markov_blanket.flow_active", FLOAT)
def _flow_active(node, ins, ctx):
    return lambda x, w, b: mb.flow_xp(x, w, b, jnp)


@rule("markov_blanket.vjp", FLOAT)
def _mb_vjp(node, ins, ctx):
    of, kind, a, b = node.attrs["of"], node.attrs["kind"], node.attrs["a"], node.attrs["b"]

    def vjp(ct, *xs):
        if of == "flow":
            return mb.flow_xp(*xs, jnp, ct=ct)
        return mb.mutual_information_xp(xs[0], kind, a, b, jnp, ct=ct)[0]  # one output: the array itself

    return vjp
