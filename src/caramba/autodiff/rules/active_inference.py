"""VJP rules for active_inference.*: the analytic gradients of the op ``active_inference.vjp``
(see ``caramba.ops.active_inference``); policies (int64) get no cotangent."""

from __future__ import annotations

from caramba.autodiff.rules import rule


def _vjp(of: str):
    def fn(c, ct):
        grads = c.call("active_inference.vjp", (ct, *c.x), {"of": of})
        grads = list(grads if isinstance(grads, tuple) else (grads,))
        out = []
        for i, x in enumerate(c.x):
            if x.dtype.is_float:
                g = grads.pop(0)
                out.append(g if c.needs[i] else None)
            else:
                out.append(None)
        return tuple(out)

    return fn


for _of in ("belief_update", "free_energy", "expected_free_energy", "precision_weight"):
    rule(f"active_inference.{_of}")(_vjp(_of))
