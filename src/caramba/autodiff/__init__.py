"""caramba.autodiff: reverse-mode differentiation of IR graphs.

The transform is small (``core.py``): find the values between the differentiated inputs and
the output, walk the nodes backwards, and ask each op's VJP rule (``rules/<family>.py``) for
the cotangents of its inputs. Rules are built from ordinary IR ops, so the backward pass is
part of the same graph and runs on every backend that runs the forward ops::

    with Graph() as g:
        x = g.input("x", (4, 8))
        w = g.variable("w", (8, 3))
        loss = ((x @ w) ** 2.0).mean()
        dw, dx = autodiff.grad(loss, ["w", x])   # a state name counts every read of it
"""

from caramba.autodiff.api import grad, grad_graph, value_and_grad, vjp, vjp_graph
from caramba.autodiff.core import MissingVJP, NotDifferentiable
from caramba.autodiff.rules import RULES, rule

__all__ = ["RULES", "MissingVJP", "NotDifferentiable", "grad", "grad_graph", "rule", "value_and_grad", "vjp", "vjp_graph"]
