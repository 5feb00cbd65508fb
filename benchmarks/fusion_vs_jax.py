"""Fused kernels of the cpu backend against JAX jit (CPU, x64), in one process run.

    python -m benchmarks.fusion_vs_jax [--quick]

Cases (float64):
- dense + bias + exact GELU, x[256,1024] @ W[1024,4096] + b: caramba runs it as one
  ``fused.linear`` (BLAS matmul into its planned buffer, then a generated epilogue);
- the 200-op elementwise chain of ``benchmarks/workloads/chain.py`` on [16] and on [2**20]
  elements: caramba runs it as one generated ``fused.elementwise`` kernel.

Both sides are compiled first and then timed alternately (A B A B ...) so drift on this noisy
machine hits both; each sample averages enough calls to last ~50 ms and the ratio is of the
medians. Every result is checked against a float64 NumPy reference first.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import scipy.special as sc

from benchmarks.workloads.chain import apply_chain, numpy_chain


def _calls_for(fn, min_s: float) -> int:
    fn()
    t0 = time.perf_counter()
    fn()
    return max(1, int(min_s / max(time.perf_counter() - t0, 1e-7)))


def alternate(fns: dict, samples: int, min_s: float) -> dict[str, float]:
    """Median seconds per call of each fn, sampled alternately."""
    calls = {k: _calls_for(f, min_s) for k, f in fns.items()}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(samples):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls[k]):
                f()
            times[k].append((time.perf_counter() - t0) / calls[k])
    return {k: statistics.median(v) for k, v in times.items()}


def _jax(fn, args):
    import jax

    with jax.enable_x64(True):
        dev = [jax.device_put(a) for a in args]
        jf = jax.jit(fn)
        jax.block_until_ready(jf(*dev))

    def run():
        with jax.enable_x64(True):
            return jax.block_until_ready(jf(*dev))

    return run


def _caramba(runner, graph, inputs, output="out"):
    exe = runner.compile(graph)
    tensors = {k: runner.upload(v) for k, v in inputs.items()}

    def run():
        return exe.run(tensors)

    return run, exe, lambda: exe.run(tensors)[output].download()


def dense_gelu(runner, samples: int, m: int = 256, k: int = 1024, n: int = 4096) -> dict:
    import jax

    import caramba
    from caramba import ops

    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k))
    w = rng.standard_normal((k, n)) / math.sqrt(k)
    b = rng.standard_normal(n)
    ref = x @ w + b
    ref = 0.5 * ref * sc.erfc(-ref / math.sqrt(2.0))
    with caramba.Graph("dense_gelu") as g:
        xv, wv, bv = g.input("x", (m, k)), g.input("w", (k, n)), g.input("b", (n,))
        g.output("out", ops.gelu(xv @ wv + bv))
    car, exe, fetch = _caramba(runner, g, {"x": x, "w": w, "b": b})
    assert [nd.op for nd in exe.graph.nodes if nd.op != "graph.input"] == ["fused.linear"], exe.graph
    np.testing.assert_allclose(fetch(), ref, rtol=1e-12, atol=1e-12)
    jx = _jax(lambda x, w, b: jax.nn.gelu(x @ w + b, approximate=False), [x, w, b])
    with jax.enable_x64(True):
        np.testing.assert_allclose(np.asarray(jx()), ref, rtol=1e-9, atol=1e-12)
    t = alternate({"caramba": car, "jax": jx}, samples, 0.2)
    flops = 2.0 * m * k * n
    return {
        "case": f"dense+bias+gelu f64 [{m},{k}]x[{k},{n}]",
        "caramba_ms": t["caramba"] * 1e3,
        "jax_ms": t["jax"] * 1e3,
        "ratio": t["caramba"] / t["jax"],
        "caramba_gflops": flops / t["caramba"] / 1e9,
    }


def chain(runner, samples: int, n: int) -> dict:
    import jax.numpy as jnp

    import caramba
    from caramba import ops

    x = np.random.default_rng(0).uniform(-1, 1, n)
    ref = numpy_chain(x.copy())
    g = caramba.trace(lambda x: apply_chain(x, ops.sin, ops.tanh, ops.exp), (n,), name="chain")
    car, exe, fetch = _caramba(runner, g, {"x": x})
    assert [nd.op for nd in exe.graph.nodes if nd.op != "graph.input"] == ["fused.elementwise"], exe.graph
    np.testing.assert_allclose(fetch(), ref, rtol=1e-12, atol=1e-300)
    jx = _jax(lambda x: apply_chain(x, jnp.sin, jnp.tanh, jnp.exp), [x])
    np.testing.assert_allclose(np.asarray(jx()), ref, rtol=1e-9, atol=1e-300)
    t = alternate({"caramba": car, "jax": jx}, samples, 0.05 if n < 4096 else 0.3)
    return {
        "case": f"200-op elementwise chain f64 [{n}]",
        "caramba_ms": t["caramba"] * 1e3,
        "jax_ms": t["jax"] * 1e3,
        "ratio": t["caramba"] / t["jax"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples")
    args = ap.parse_args()
    samples = 3 if args.quick else 7

    from caramba.compute import new

    with new("cpu") as runner:
        rows = [dense_gelu(runner, samples), chain(runner, samples, 16), chain(runner, samples, 1 << 20)]
    for r in rows:
        extra = f"  ({r['caramba_gflops']:.1f} GFLOP/s)" if "caramba_gflops" in r else ""
        print(f"{r['case']:<45} caramba {r['caramba_ms']:9.4f} ms  jax {r['jax_ms']:9.4f} ms  "
              f"ratio {r['ratio']:.2f}{extra}")


if __name__ == "__main__":
    main()
