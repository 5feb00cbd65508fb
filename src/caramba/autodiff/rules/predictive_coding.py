"""VJP rules for predictive_coding.*: the analytic gradients of the op ``predictive_coding.vjp``
(see ``caramba.ops.predictive_coding``); every input is a float and gets a cotangent."""

from __future__ import annotations

from caramba.autodiff.rules import rule


def _vjp(of: str):
    def fn(c, *cts):
        attrs = {"of": of, **{k: c.node.attrs[k] for k in ("activation", "lr") if k in c.node.attrs}}
        grads = c.call("predictive_coding.vjp", (*cts, *c.x), attrs)
        grads = grads if isinstance(grads, tuple) else (grads,)
        return tuple(g if c.needs[i] else None for i, g in enumerate(grads))

    return fn


for _of in ("prediction", "prediction_error", "update_representation", "update_weights"):
    rule(f"predictive_coding.{_of}")(_vjp(_of))
