"""Every differentiable op's VJP against central finite differences, float64, every backend.

For a case, the graph computes the op's outputs ``y_k`` and ``L = sum_k <y_k, c_k>`` for fixed
random cotangents ``c_k``; autodiff adds ``dL/dx_i`` for every float input. Each gradient is
compared with the central difference ``(L(x + h v) - L(x - h v)) / 2h`` (``h = 1e-5`` relative
to the input's scale: truncation and rounding errors both stay near 1e-10) along the coordinate
axes (small inputs) or along random directions (larger ones), all evaluated on the backend
under test:

    |fd - grad . v| <= 1e-6 * max |grad . v|   (over the directions of one input)
"""

from __future__ import annotations

import numpy as np
import pytest

from caramba import autodiff, ir
from caramba.ir.dtypes import DType

from .grad_specs import CASES, GradCase, by_op
from .harness import node_problems, seed_of

RTOL = 1e-6
MAX_BASIS = 12  # inputs up to this size are checked element by element
DIRECTIONS = 6  # random directions for larger inputs


def build(case: GradCase):
    g = ir.Graph(case.id)
    with g:
        ins = [g.input(f"x{i}", s.shape, s.dtype or DType.float64) for i, s in enumerate(case.args)]
        out = case.build(g, ins) if case.build is not None else g.call(case.op, ins, case.attrs)
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o.dtype.is_float]
        cts = [g.input(f"c{k}", o.shape, o.dtype) for k, o in enumerate(outs)]
        total = None
        for o, ct in zip(outs, cts, strict=True):
            term = (o * ct).sum()
            total = term if total is None else total + term
        g.output("L", total)
        wrt = [i for i, v in enumerate(ins) if v.dtype.is_float and (case.wrt is None or i in case.wrt)]
        grads = autodiff.vjp(outs, [ins[i] for i in wrt], cts)
        for i, gr in zip(wrt, grads, strict=True):
            g.output(f"g{i}", gr)
    return g, wrt


def host_values(case: GradCase, g: ir.Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed_of("grad", case.id))
    vals = {}
    for i, s in enumerate(case.args):
        d = s.dtype or DType.float64
        vals[f"x{i}"] = np.asarray(s.gen(rng, d, s.shape))
    for n in g.inputs:
        if n.id.startswith("c"):
            vals[n.id] = rng.standard_normal(n.types[0].shape)
    return vals


def check_gradients(runner, case: GradCase) -> None:
    g, wrt = build(case)
    unsupported, precision = node_problems(g, runner.capabilities)
    if unsupported or precision:
        ops_ = sorted({g.node(n).op for n in unsupported + precision})
        pytest.skip(f"{runner.location} does not claim {ops_} at float64 (the forward suite checks the refusal)")
    vals = host_values(case, g)
    full = runner.compile(g)
    loss = runner.compile(g, targets=["L"])

    def run(exe, values):
        return exe.run({k: runner.upload(v) for k, v in values.items()})

    got = {k: t.download() for k, t in run(full, vals).items()}

    def L(values) -> float:
        return float(run(loss, values)["L"].download())

    for i in wrt:
        name = f"x{i}"
        x = vals[name]
        grad = got[f"g{i}"]
        assert grad.shape == x.shape and grad.dtype == x.dtype, f"{case.id}: gradient {grad.dtype}{grad.shape} for {x.dtype}{x.shape}"
        if x.size <= MAX_BASIS:
            dirs = [np.eye(x.size)[j].reshape(x.shape) for j in range(x.size)]
        else:
            rng = np.random.default_rng(seed_of("dir", case.id, i))
            dirs = [rng.standard_normal(x.shape) for _ in range(DIRECTIONS)]
        fd, an = [], []
        for v in dirs:
            v = v / np.max(np.abs(v))
            h = 1e-5 * max(1.0, float(np.max(np.abs(x))) if x.size else 1.0)

            def at(t, v=v, name=name, x=x):
                return L({**vals, name: x + t * v})

            fd.append((at(h) - at(-h)) / (2 * h))
            an.append(float(np.sum(grad * v)))
        fd_a, an_a = np.array(fd), np.array(an)
        scale = max(float(np.max(np.abs(an_a), initial=0.0)), float(np.max(np.abs(fd_a), initial=0.0)), 1e-9)
        err = float(np.max(np.abs(fd_a - an_a), initial=0.0)) / scale
        assert err < RTOL, (
            f"{case.id} on {runner.location}: d/d{name} relative error {err:.3g} >= {RTOL}\n"
            f"  finite differences {fd_a[:8]}\n  autodiff           {an_a[:8]}"
        )


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_vjp_matches_finite_differences(runner, case):
    check_gradients(runner, case)


def test_every_differentiable_op_has_gradient_cases():
    """The table covers exactly the ops the registry declares differentiable."""
    differentiable = {k for k, v in ir.all_ops().items() if v.differentiable}
    covered = set(by_op())
    assert not differentiable - covered, f"differentiable ops without gradient cases: {sorted(differentiable - covered)}"
    assert not covered - differentiable, f"gradient cases for non-differentiable ops: {sorted(covered - differentiable)}"
