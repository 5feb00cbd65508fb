"""VJP rules for causal.*: the analytic gradients of the op ``causal.vjp`` (see
``caramba.ops.causal``); the intervention mask gets no cotangent."""

from __future__ import annotations

from caramba.autodiff.rules import rule
from caramba.ops.causal import VJP_ATTRS, VJP_OF


def _vjp(of: str):
    _, _, arity, positions = VJP_OF[of]
    names = {a.name for a in VJP_ATTRS}

    def fn(c, *cts):
        attrs = {k: v for k, v in c.node.attrs.items() if k in names}
        grads = c.call("causal.vjp", (*cts, *c.x), {**attrs, "of": of})
        grads = grads if isinstance(grads, tuple) else (grads,)
        out = [None] * arity
        for i, g in zip(positions, grads, strict=True):
            out[i] = g if c.needs[i] else None
        return tuple(out)

    return fn


for _of in VJP_OF:
    rule(f"causal.{_of}")(_vjp(_of))
