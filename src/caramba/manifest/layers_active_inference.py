"""Layer lowerings of the active-inference agent (``block.active_inference.agent``) and of the
Markov-blanket flow block (``block.markov_blanket.flow``).

- ``active_inference.model``: a learnable discrete POMDP of one factor: ``A = softmax(a_logits,
  axis=0)`` [O, S], ``B = softmax(b_logits, axis=0)`` [S, S, U] (columns are distributions), ``C``
  [O] log-preferences (parameters ``a_logits``, ``b_logits``, ``c``), and the policy precision
  ``gamma`` (a constant from the config).
- ``active_inference.policies``: every sequence of ``horizon`` actions out of ``actions``, as an
  int64 constant [actions ** horizon, horizon] in lexicographic order (pymdp's
  ``construct_policies`` for one control factor).
- ``active_inference.action``: the posterior over the first action, ``q(u) = sum_{pi: pi_1 = u}
  q(pi)`` [batch, U], and the action taken, its argmax (int64 [batch]).
- ``markov_blanket.coupling``: a learnable coupling ``W [n_in, n_out]`` (normal, std ``std``) and
  bias ``[n_out]`` (zeros), parameters ``weight`` and ``bias``.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from caramba.errors import CarambaError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Value
from caramba.manifest.lower import LayerContext, layer

MAX_POLICIES = 4096


def all_policies(actions: int, horizon: int) -> np.ndarray:
    """int64 [actions ** horizon, horizon]: every action sequence, lexicographic."""
    if actions < 1 or horizon < 1:
        raise CarambaError(f"active_inference: actions and horizon must be >= 1, got {actions} and {horizon}")
    if actions**horizon > MAX_POLICIES:
        raise CarambaError(f"active_inference: {actions} actions over a horizon of {horizon} make {actions**horizon} "
                           f"policies, more than {MAX_POLICIES}; shorten the horizon")
    return np.array(list(itertools.product(range(actions), repeat=horizon)), dtype=np.int64).reshape(-1, horizon)


@layer("active_inference_model")
def model(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, Value, Value, Value]:
    if ins:
        raise CarambaError(f"active_inference.model takes no inputs, got {len(ins)}")
    o, s, u = c["outcomes"], c["states"], c["actions"]
    gamma = c["gamma"]
    if not (np.isfinite(gamma) and gamma >= 0):
        raise CarambaError(f"gamma must be a finite number >= 0, got {gamma}")
    a = ctx.op("nn.softmax", (ctx.param("a_logits", (o, s), "normal", std=0.1),), {"axis": 0}, name="A")
    b = ctx.op("nn.softmax", (ctx.param("b_logits", (s, s, u), "normal", std=0.1),), {"axis": 0}, name="B")
    return a, b, ctx.param("c", (o,), "zeros"), ctx.const(float(gamma), name="gamma")


@layer("active_inference_policies")
def policies(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    if ins:
        raise CarambaError(f"active_inference.policies takes no inputs, got {len(ins)}")
    return ctx.const(all_policies(c["actions"], c["horizon"]), DType.int64, name="policies")


@layer("active_inference_action")
def action(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, Value]:
    pols = all_policies(c["actions"], c["horizon"])
    (q_pi,) = ins
    if q_pi.ndim < 1 or q_pi.shape[-1] != len(pols):
        raise CarambaError(f"active_inference.action needs q_pi [..., {len(pols)}] (one entry per policy), "
                           f"got {q_pi.type}")
    first = (pols[:, 0][:, None] == np.arange(c["actions"])).astype(np.float64)  # [P, U]
    q_u = ctx.op("linalg.matmul", (q_pi, ctx.const(first, q_pi.dtype, name="first_action")), name="q_u")
    return q_u, ctx.op("reduce.argmax", (q_u,), {"axis": -1}, name="action")


@layer("markov_blanket_coupling")
def coupling(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, Value]:
    if ins:
        raise CarambaError(f"markov_blanket.coupling takes no inputs, got {len(ins)}")
    std = c["std"]
    if not (np.isfinite(std) and std >= 0):
        raise CarambaError(f"std must be a finite number >= 0, got {std}")
    return (ctx.param("weight", (c["n_in"], c["n_out"]), "normal", std=float(std)),
            ctx.param("bias", (c["n_out"],), "zeros"))


@layer("markov_blanket_graph")
def graph(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, Value]:
    """A fixed directed graph for ``markov_blanket.partition``: ``adj [n, n]`` with ``adj[i, j] =
    1`` for each edge ``sources[k] -> targets[k]``, and the bool mask ``internal [n]``."""
    if ins:
        raise CarambaError(f"markov_blanket.graph takes no inputs, got {len(ins)}")
    n, src, dst, internal = c["nodes"], list(c["sources"]), list(c["targets"]), list(c["internal"])
    if len(src) != len(dst):
        raise CarambaError(f"markov_blanket.graph: sources has {len(src)} entries and targets {len(dst)}; "
                           "give one source and one target per edge")
    bad = [v for v in src + dst + internal if not 0 <= v < n]
    if bad:
        raise CarambaError(f"markov_blanket.graph: node {bad[0]} is outside [0, {n}) (nodes: {n})")
    adj = np.zeros((n, n))
    adj[src, dst] = 1.0
    mask = np.zeros(n, dtype=bool)
    mask[internal] = True
    return ctx.const(adj, name="adj"), ctx.const(mask, DType.bool, name="internal")
