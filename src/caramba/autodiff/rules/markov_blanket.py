"""VJP rules for markov_blanket.*: the analytic gradients of the op ``markov_blanket.vjp`` (see
``caramba.ops.markov_blanket``); ``partition`` has integer output and no rule."""

from __future__ import annotations

from caramba.autodiff.rules import rule


def _vjp(of: str):
    def fn(c, ct):
        attrs = {"of": of}
        if of == "mutual_information":
            attrs.update({k: c.attrs[k] for k in ("kind", "a", "b")})
        grads = c.call("markov_blanket.vjp", (ct, *c.x), attrs)
        grads = grads if isinstance(grads, tuple) else (grads,)
        return tuple(g if c.needs[i] else None for i, g in enumerate(grads))

    return fn


rule("markov_blanket.mutual_information")(_vjp("mutual_information"))
rule("markov_blanket.flow_internal")(_vjp("flow"))
rule("markov_blanket.flow_active")(_vjp("flow"))
