"""causal/discovery: structure learning of a linear-Gaussian DAG by NOTEARS.

**Which and why.** NOTEARS (Zheng, Aragam, Ravikumar & Xing 2018, "DAGs with NO TEARS:
Continuous Optimization for Structure Learning", NeurIPS) rather than the PC algorithm: it
writes acyclicity as a smooth equality constraint, so the whole search is a differentiable
objective that caramba's IR and autodiff compute (the objective is a block, trainable like any
other), where PC is a sequence of discrete conditional-independence tests with no gradient.
It assumes a linear SEM with (roughly) equal noise variances; causal-learn's PC is the
independent reference the tests compare its skeleton with.

Model: data ``x [n, d]`` from ``x = x W + e``, ``W [d, d]`` (``W[i, j]`` the effect of
``x_i`` on ``x_j``). NOTEARS solves

    min_W  F(W) = 1/(2n) |x - x W|_F^2 + lambda1 |W|_1   subject to   h(W) = tr(e^{W o W}) - d = 0

(``o`` the Hadamard product; ``h(W) = 0`` iff ``W`` is a DAG, ``grad h = (e^{W o W})^T o 2W``)
by the augmented Lagrangian ``F + alpha h + rho/2 h^2``: minimise in ``W`` (L-BFGS-B on
``W = W+ - W-``, ``W+/- >= 0``, so the l1 term is linear), then ``alpha <- alpha + rho h``;
``rho <- 10 rho`` while ``h`` has not fallen below a quarter of its previous value (Zheng et
al. Algorithm 1). Edges are the entries with ``|W_ij| > w_threshold`` (0.3, as the paper).

The smooth part ``1/(2n) |x - x W|^2 + alpha h + rho/2 h^2`` is the IR op chain of
``causal.notears_objective`` (``caramba/manifest/layers_causal_discovery.py``); the matrix
exponential is scaling and squaring, ``e^A = (T_K(A / 2^s))^{2^s}`` with ``T_K`` the degree-K
Taylor polynomial (K = 12, s = 8: relative error below 1e-12 for ``|A| <= 40``), matmuls only,
so it runs and differentiates on every backend that has matmul. :func:`notears` is the driver:
its objective and gradient come from that graph on a caramba backend (autodiff), the outer
loop and L-BFGS-B from scipy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from caramba.errors import CarambaError

TAYLOR_DEGREE = 12
SQUARINGS = 8


def notears_terms(call: Callable[..., Any], const: Callable[[Any], Any], w: Any, cov: Any, alpha: Any, rho: Any,
                  d: int) -> tuple[Any, Any]:
    """(objective, h) for ``W [d, d]``, the second moments ``cov = x^T x / n [d, d]`` and scalars
    ``alpha, rho``, built with ``call(op_id, inputs, attrs)`` and ``const(array)`` (a graph
    builder or a layer context). ``1/(2n) |x - x W|^2 = 1/2 sum((I - W) o cov (I - W))``."""
    eye = np.eye(d)
    iw = call("math.sub", (const(eye), w))
    ls = call("math.mul", (call("reduce.sum", (call("math.mul", (iw, call("linalg.matmul", (cov, iw)))),), {"axes": (0, 1)}),
                           const(np.asarray(0.5))))
    a = call("math.mul", (w, w))
    b = call("math.mul", (a, const(np.asarray(2.0 ** -SQUARINGS))))
    ident = const(eye)
    t = ident  # Horner: T = I + B/1 (I + B/2 (... (I + B/K)))
    for k in range(TAYLOR_DEGREE, 0, -1):
        t = call("math.add", (ident, call("math.mul", (call("linalg.matmul", (b, t)), const(np.asarray(1.0 / k))))))
    for _ in range(SQUARINGS):
        t = call("linalg.matmul", (t, t))
    h = call("math.sub", (call("reduce.sum", (call("math.mul", (t, ident)),), {"axes": (0, 1)}), const(np.asarray(float(d)))))
    pen = call("math.add", (call("math.mul", (alpha, h)),
                            call("math.mul", (call("math.mul", (rho, call("math.square", (h,)))), const(np.asarray(0.5))))))
    return call("math.add", (ls, pen)), h


@dataclass
class NotearsResult:
    """``weights`` after thresholding, the raw estimate, the final ``h`` and the iterations."""

    weights: np.ndarray
    raw: np.ndarray
    h: float
    iterations: int

    @property
    def edges(self) -> set[tuple[int, int]]:
        return {(int(i), int(j)) for i, j in zip(*np.nonzero(self.weights))}

    @property
    def skeleton(self) -> set[frozenset[int]]:
        return {frozenset(e) for e in self.edges}


class _Objective:
    """Value and gradient of the smooth NOTEARS objective from a compiled caramba graph."""

    def __init__(self, x: np.ndarray, backend: str) -> None:
        import caramba
        from caramba import autodiff
        from caramba.compute import new

        n, d = x.shape
        self.d = d
        self.runner = new(backend)
        with caramba.Graph("notears") as g:
            w = g.input("W", (d, d), dtype="float64")
            cv = g.input("cov", (d, d), dtype="float64")
            al = g.input("alpha", (), dtype="float64")
            rh = g.input("rho", (), dtype="float64")
            obj, h = notears_terms(lambda op, ins, attrs=None: g.call(op, ins, attrs), g.constant, w, cv, al, rh, d)
            g.output("f", obj)
            g.output("h", h)
            g.output("g", autodiff.grad(obj, w))
        self.exe = self.runner.compile(g)
        self.cov = self.runner.upload(x.T @ x / n)

    def __call__(self, w: np.ndarray, alpha: float, rho: float) -> tuple[float, np.ndarray, float]:
        r = self.runner
        out = self.exe.run({"W": r.upload(w), "cov": self.cov, "alpha": r.upload(np.asarray(alpha)),
                            "rho": r.upload(np.asarray(rho))})
        return float(out["f"].download()), out["g"].download(), float(out["h"].download())


def notears(x: np.ndarray, *, lambda1: float = 0.1, w_threshold: float = 0.3, max_iter: int = 100,
            h_tol: float = 1e-8, rho_max: float = 1e16, backend: str = "cpu") -> NotearsResult:
    """Learn a DAG from ``x [n, d]`` (columns centred here) by NOTEARS (module docstring)."""
    import scipy.optimize as sopt

    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 1:
        raise CarambaError(f"notears needs data [n >= 2, d >= 1], got shape {list(x.shape)}")
    if not np.all(np.isfinite(x)):
        raise CarambaError("notears: the data contain NaN or inf values; drop or impute them first")
    for name, v in (("lambda1", lambda1), ("w_threshold", w_threshold)):
        if not (np.isfinite(v) and v >= 0):
            raise CarambaError(f"notears: {name} must be a finite number >= 0, got {v}")
    x = x - x.mean(axis=0, keepdims=True)
    d = x.shape[1]
    fn = _Objective(x, backend)
    wp = np.zeros(2 * d * d)
    rho, alpha, h = 1.0, 0.0, np.inf
    bounds = [(0, 0) if i == j else (0, None) for _ in range(2) for i in range(d) for j in range(d)]

    def fun(v: np.ndarray) -> tuple[float, np.ndarray]:
        w = (v[: d * d] - v[d * d:]).reshape(d, d)
        f, g, _ = fn(w, alpha, rho)
        g = g.reshape(-1)
        return f + lambda1 * v.sum(), np.concatenate([g + lambda1, -g + lambda1])

    it = 0
    for _ in range(max_iter):
        it += 1
        while rho < rho_max:
            sol = sopt.minimize(fun, wp, method="L-BFGS-B", jac=True, bounds=bounds)
            w_new = (sol.x[: d * d] - sol.x[d * d:]).reshape(d, d)
            h_new = fn(w_new, alpha, rho)[2]
            if h_new > 0.25 * h:
                rho *= 10
            else:
                break
        wp, h = sol.x, h_new
        alpha += rho * h
        if h <= h_tol or rho >= rho_max:
            break
    raw = (wp[: d * d] - wp[d * d:]).reshape(d, d)
    w = np.where(np.abs(raw) > w_threshold, raw, 0.0)
    return NotearsResult(w, raw, float(h), it)
