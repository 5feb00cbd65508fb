"""Peak memory of a 12-layer MLP forward on the cpu backend, with and without the memory planner.

    python -m benchmarks.mlp_memory [--batch 256] [--width 1024] [--layers 12]

Each layer is gelu(x @ W + b) in float64 (the fuse pass makes it one ``fused.linear``).
Measured with tracemalloc (NumPy reports its allocations to it): the bytes allocated while one
call runs, at their peak, plus the planned arena the executable holds between calls. The plan's
own numbers (every intermediate in its own buffer vs. after reuse) are printed beside them.
"""

from __future__ import annotations

import argparse
import math
import time
import tracemalloc

import numpy as np


def build(batch: int, width: int, layers: int):
    import caramba
    from caramba import ops

    with caramba.Graph("mlp12") as g:
        h = g.input("x", (batch, width))
        for i in range(layers):
            w = g.variable(f"l{i}.w", (width, width))
            b = g.variable(f"l{i}.b", (width,))
            h = ops.gelu(h @ w + b, name=f"l{i}.act")
        g.output("y", h)
    return g


def measure(batch: int = 256, width: int = 1024, layers: int = 12) -> list[dict]:
    from caramba.compute import new

    g = build(batch, width, layers)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, width))
    rows = []
    with new("cpu") as runner:
        for i in range(layers):
            runner.state[f"l{i}.w"] = runner.upload(rng.standard_normal((width, width)) / math.sqrt(width))
            runner.state[f"l{i}.b"] = runner.upload(rng.standard_normal(width) * 0.1)
        xt = runner.upload(x)
        results = {}
        for label, disable in (("with planner", ()), ("without planner", ("memory",))):
            exe = runner.compile(g, disable=disable)
            exe.run({"x": xt})  # warm: kernels compiled and loaded
            tracemalloc.start()
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            t0 = time.perf_counter()
            out = exe.run({"x": xt})
            dt = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.stop()
            results[label] = out["y"].download()
            plan = exe.plan
            arena = plan.arena_bytes if plan is not None else 0
            rows.append({
                "variant": label,
                "peak_during_call": peak,
                "arena": arena,
                "total": peak + arena,
                "plan_naive": plan.naive_bytes if plan is not None else None,
                "plan_peak": plan.peak_bytes if plan is not None else None,
                "ms": dt * 1e3,
            })
        np.testing.assert_allclose(results["with planner"], results["without planner"], rtol=1e-12, atol=1e-12)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    args = ap.parse_args()
    mib = 1 << 20
    print(f"{args.layers}-layer MLP forward, x[{args.batch},{args.width}] float64, one activation = "
          f"{args.batch * args.width * 8 / mib:.1f} MiB")
    for r in measure(args.batch, args.width, args.layers):
        plan = f"; plan: {r['plan_naive'] / mib:.1f} MiB without reuse -> {r['plan_peak'] / mib:.1f} MiB" if r["plan_naive"] else ""
        print(f"{r['variant']:<16} peak {r['total'] / mib:7.1f} MiB (allocated during the call {r['peak_during_call'] / mib:.1f} "
              f"+ arena {r['arena'] / mib:.1f}){plan}; {r['ms']:.1f} ms")


if __name__ == "__main__":
    main()
