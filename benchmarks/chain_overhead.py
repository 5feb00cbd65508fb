"""Per-node cost of a compiled 200-node chain of tiny elementwise ops on the cpu backend.

    python -m benchmarks.chain_overhead [--n 16] [--repeat 7]

Times one call of the compiled executable (full pipeline: the chain becomes one generated
kernel; and with ``fuse`` disabled: 200 straight-line kernel calls into planned buffers) and
divides by the 200 graph nodes; NumPy eager runs the same ufunc calls for comparison. The
chain is the one of ``benchmarks/workloads/chain.py`` (mul/add/sub by constants, sin, tanh,
exp). Machines here are noisy: numbers are the best of several samples of many calls.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.workloads.chain import N_OPS, apply_chain, numpy_chain


def best_per_call(fn, repeat: int, min_s: float = 0.05) -> float:
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    calls = max(1, int(min_s / one))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def measure(n: int = 16, repeat: int = 7) -> dict[str, float]:
    import caramba
    from caramba import ops
    from caramba.compiler import optional_stages
    from caramba.compute import new

    g = caramba.trace(lambda x: apply_chain(x, ops.sin, ops.tanh, ops.exp), (n,), name="chain")
    nodes = sum(1 for m in g.nodes if m.op not in ("graph.input", "graph.constant"))  # constants are not work
    assert nodes == N_OPS
    x = np.random.default_rng(0).uniform(-1, 1, n)
    ref = numpy_chain(x.copy())
    out: dict[str, float] = {"nodes": nodes}
    with new("cpu") as runner:
        xt = runner.upload(x)
        variants = {
            "full pipeline": (),
            "fuse disabled": ("fuse",),
            "no optional pass": tuple(optional_stages()),
        }
        for label, disable in variants.items():
            exe = runner.compile(g, disable=disable)
            got = exe.run({"x": xt})["out"].download()
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-300)
            inputs = {"x": xt}
            t = best_per_call(lambda exe=exe, inputs=inputs: exe.run(inputs), repeat)
            out[f"{label}: us/call"] = t * 1e6
            out[f"{label}: us/node"] = t * 1e6 / nodes
            out[f"{label}: kernels"] = sum(1 for m in exe.graph.nodes if m.op not in ("graph.input", "graph.constant"))
    fns = []
    for op, c in __import__("benchmarks.workloads.chain", fromlist=["steps"]).steps():
        if op in ("mul", "add", "sub"):
            fns.append(({"mul": np.multiply, "add": np.add, "sub": np.subtract}[op], np.float64(c)))
        else:
            fns.append(({"sin": np.sin, "tanh": np.tanh, "exp": np.exp}[op], None))

    def eager():
        v = x
        for f, c in fns:
            v = f(v) if c is None else f(v, c)
        return v

    t = best_per_call(eager, repeat)
    out["numpy eager: us/op"] = t * 1e6 / N_OPS
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16, help="vector length (default 16)")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    res = measure(args.n, args.repeat)
    width = max(map(len, res))
    for k, v in res.items():
        print(f"{k:<{width}}  {v:10.3f}" if isinstance(v, float) else f"{k:<{width}}  {v:>10}")


if __name__ == "__main__":
    main()
