"""VJP rules for hawkes.*: the analytic gradients of the op ``hawkes.vjp`` (computed alongside
the forward recursion or dense sums); event times, marks and T get no cotangent."""

from __future__ import annotations

from caramba.autodiff.rules import rule


def _vjp(of: str, n_params: int):
    def fn(c, ct):
        grads = c.call("hawkes.vjp", (ct, *c.x), {"of": of})
        grads = grads if isinstance(grads, tuple) else (grads,)
        out = [g if c.needs[i] else None for i, g in enumerate(grads)]
        return (*out, *([None] * (len(c.x) - n_params)))

    return fn


rule("hawkes.intensity")(_vjp("intensity", 3))
rule("hawkes.kernel_matrix")(_vjp("kernel_matrix", 2))
rule("hawkes.log_likelihood")(_vjp("log_likelihood", 3))
