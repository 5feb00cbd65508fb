"""Shared by test_fft / test_vsa / test_hawkes: run a small graph on a backend, and check a
graph's VJPs against central finite differences in float64 (computed from the forward graph)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pytest

import caramba
from caramba import autodiff, ops
from caramba.compute import build_info, new

RUNNERS: dict[str, object] = {}
BACKENDS = ("cpu", "xla")
WITH_ONNX = (*BACKENDS, "onnx")  # the families onnx lowers too: fft, vsa, causal, hawkes


def runner(name: str):
    info = build_info(name)
    if not info.available:
        pytest.skip(f"{name} unavailable: {info.reason}")
    if name not in RUNNERS:
        RUNNERS[name] = new(name)
    return RUNNERS[name]


def run(backend: str, build: Callable, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``build(g, values)`` adds outputs to a graph whose inputs are ``inputs`` (by name)."""
    r = runner(backend)
    with caramba.Graph("t") as g:
        vals = {k: g.input(k, v.shape, dtype=str(v.dtype)) for k, v in inputs.items()}
        build(g, vals)
    out = r.execute(g, inputs={k: r.upload(v) for k, v in inputs.items()})
    return {k: v.download() for k, v in out.items()}


def check_vjp(backend: str, fn: Callable, inputs: Mapping[str, np.ndarray], wrt: tuple[str, ...],
              eps: float = 1e-6, tol: float = 1e-7, seed: int = 0) -> None:
    """The gradient of ``sum(fn(values) * w)`` (w random) wrt ``wrt`` equals central differences."""
    rng = np.random.default_rng(seed)
    y0 = run(backend, lambda g, v: g.output("y", fn(v)), inputs)["y"]
    w = rng.normal(size=y0.shape)

    def value(x: Mapping[str, np.ndarray]) -> float:
        return float(np.sum(run(backend, lambda g, v: g.output("y", fn(v)), x)["y"] * w))

    def build(g, v):
        loss = ops.sum(fn(v) * g.constant(w))
        grads = autodiff.grad(loss, [v[k] for k in wrt])
        for k, gk in zip(wrt, grads if isinstance(grads, list | tuple) else [grads]):
            g.output("d_" + k, gk)

    got = run(backend, build, inputs)
    for k in wrt:
        fd = np.zeros_like(inputs[k])
        for idx in np.ndindex(inputs[k].shape):
            up, dn = dict(inputs), dict(inputs)
            up[k] = inputs[k].copy()
            dn[k] = inputs[k].copy()
            up[k][idx] += eps
            dn[k][idx] -= eps
            fd[idx] = (value(up) - value(dn)) / (2 * eps)
        scale = max(1.0, float(np.max(np.abs(fd))))
        np.testing.assert_allclose(got["d_" + k], fd, rtol=0, atol=tol * scale, err_msg=f"d/d{k} on {backend}")
