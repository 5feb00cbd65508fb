"""The WGSL math library against mpmath, on the device (float64 ports of fdlibm; float32 builtins
and polyfills): every function within a few ulps, IEEE special values exact."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from caramba.backends.codegen.cstyle import KernelWriter
from caramba.backends.codegen.kernels import map_finish, map_writer
from caramba.ir.dtypes import DType

mp.mp.dps = 60
INF, NAN = float("inf"), float("nan")


def kernel(e, name: str, d: DType, n: int, arity: int):
    w: KernelWriter = map_writer(e, f"test_{name}", n)
    ins = [w.param(f"in{i}", d, "read") for i in range(arity)]
    w.param("out0", d, "write")
    args = [w.let(d, w.load(x, "gid", d), "a") for x in ins]
    w.store("out0", "gid", w.fn(name, d, *args), d)
    return map_finish(w)


MP = {
    "sin_bounded": mp.sin, "cos_bounded": mp.cos,
    "exp": mp.exp, "log": mp.log, "expm1": mp.expm1, "log1p": mp.log1p, "sin": mp.sin, "cos": mp.cos,
    "tanh": mp.tanh, "erf": mp.erf, "erfc": mp.erfc, "sqrt": mp.sqrt, "pow": lambda x, y: mp.power(x, y),
}


def reference(name: str, args: list[float], d: DType) -> float:
    if any(np.isnan(a) for a in args) or any(np.isinf(a) for a in args) or (name == "pow" and args[0] <= 0):
        with np.errstate(all="ignore"):
            numpy_fn = {"sin_bounded": np.sin, "cos_bounded": np.cos, "expm1": np.expm1, "log1p": np.log1p, "sqrt": np.sqrt, "pow": np.power, "exp": np.exp,
                        "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh}
            if name in numpy_fn:
                return float(numpy_fn[name](*[np.float64(a) for a in args]))
            import scipy.special as sc

            return float({"erf": sc.erf, "erfc": sc.erfc}[name](args[0]))
    if name in ("log", "sqrt") and args[0] < 0:
        return NAN
    if name == "log" and args[0] == 0:
        return -INF
    if name == "log1p" and args[0] <= -1:
        return -INF if args[0] == -1 else NAN
    v = MP[name](*[mp.mpf(a) for a in args])
    return float(v)


def grid(name: str, d: DType, rng: np.random.Generator) -> list[np.ndarray]:
    f32 = d is DType.float32
    specials = [0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 0.5]
    big = 80.0 if f32 else 700.0
    pick = {
        "exp": [rng.uniform(-big, big, 200), rng.uniform(-1, 1, 100), [1e-10, -1e-10, 1e-30, -745.0, 709.7]],
        "log": [10.0 ** rng.uniform(-300 if not f32 else -37, 300 if not f32 else 37, 200), rng.uniform(0.5, 2, 100),
                [5e-324, 1e-310, -1.0, 1 + 2**-30]],
        "expm1": [rng.uniform(-40, big, 150), 10.0 ** rng.uniform(-20, 0, 100) * rng.choice([-1, 1], 100)],
        "log1p": [10.0 ** rng.uniform(-20, 5, 150) * rng.choice([-1, 1], 150), rng.uniform(-0.999, 3, 50), [-1.0, -2.0]],
        "sin": [rng.uniform(-10, 10, 200), 10.0 ** rng.uniform(0, 22 if not f32 else 4, 100),
                [np.pi / 2, np.pi, 1e300, 1.6470993291652855e6, 2.0**1023]],
        "tanh": [rng.uniform(-30, 30, 200), 10.0 ** rng.uniform(-20, 0, 100)],
        "erf": [rng.uniform(-7, 7, 200), 10.0 ** rng.uniform(-20, 0, 50), [0.84375, 1.25, 2.857142857142857, 6.0]],
        "erfc": [rng.uniform(-7, 27, 300), [0.84375, 1.25, 2.857142857142857, 6.0, 27.9, 28.0]],
        "sqrt": [10.0 ** rng.uniform(-300 if not f32 else -37, 300 if not f32 else 37, 100), [-1.0, 4.0]],
    }
    pick["cos"] = pick["sin"]
    pick["sin_bounded"] = pick["cos_bounded"] = [rng.uniform(-10, 10, 200), rng.uniform(-1.6e6, 1.6e6, 100), [np.pi / 2, np.pi, 1e5]]
    xs = np.concatenate([np.asarray(p, np.float64) for p in pick[name]] + [np.asarray(specials)])
    if f32:
        with np.errstate(over="ignore"):
            xs = xs.astype(np.float32).astype(np.float64)
    return [xs]


ULPS = {"pow": 8, "erfc": 4, "tanh": 3, "expm1": 3, "log1p": 3}
ULPS32 = {"sin": 4, "cos": 4, "sin_bounded": 4, "cos_bounded": 4, "pow": 32}


def check(name: str, d: DType, args: list[np.ndarray], got: np.ndarray) -> None:
    nd = d.numpy
    eps = float(np.finfo(nd).eps)
    tiny = float(np.finfo(nd).smallest_normal)
    ulps = (ULPS32 if d is DType.float32 else {}).get(name, ULPS.get(name, 2))
    bad = []
    for i in range(len(got)):
        a = [float(x[i]) for x in args]
        want = reference(name, a, d)
        with np.errstate(over="ignore"):
            want_d = float(np.asarray(want).astype(nd))
        g = float(got[i])
        if np.isnan(want_d):
            ok = np.isnan(g)
        elif np.isinf(want_d):
            ok = g == want_d
        else:
            # sin/cos of large arguments are tiny near zeros: absolute ulps of 1 there
            absolute = eps if name in ("sin", "cos", "sin_bounded", "cos_bounded", "tanh") else 0.0
            ok = abs(g - want) <= ulps * eps * abs(want) + absolute + ulps * tiny
        if not ok:
            bad.append((a, g, want))
    assert not bad, f"{name} {d}: {len(bad)} of {len(got)} wrong, e.g. {bad[:4]}"


@pytest.mark.parametrize(
    "name", ["exp", "log", "expm1", "log1p", "sin", "cos", "sin_bounded", "cos_bounded", "tanh", "erf", "erfc", "sqrt"]
)
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_unary(gpu, gpu32, run_kernel, name, precision):
    runner = gpu if precision == "float64" else gpu32
    d = DType.float64 if precision == "float64" and runner.emitter.float64 else DType.float32
    if precision == "float64" and d is DType.float32:
        pytest.skip("adapter has no shader-f64")
    rng = np.random.default_rng(7)
    (xs,) = grid(name, d, rng)
    k = kernel(runner.emitter, name, d, len(xs), 1)
    got = run_kernel(runner, k, [xs.astype(d.numpy)], d, len(xs))
    check(name, d, [xs], got)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_pow(gpu, gpu32, run_kernel, precision):
    runner = gpu if precision == "float64" else gpu32
    d = DType.float64 if precision == "float64" else DType.float32
    if precision == "float64" and not runner.emitter.float64:
        pytest.skip("adapter has no shader-f64")
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(0.01, 10, 200), rng.uniform(-3, -0.1, 40), [0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 2.0, 0.0, -0.0, -INF, 0.5]])
    y = np.concatenate([rng.uniform(-20, 20, 200), rng.integers(-5, 6, 40).astype(float), [3.0, 3.0, -2.0, 3.0, 0.0, NAN, INF, -INF, -3.0, -3.0, -3.0, INF]])
    if d is DType.float32:
        x, y = x.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64)
        y[:200] = np.clip(y[:200], -8, 8)
    k = kernel(runner.emitter, "pow", d, len(x), 2)
    got = run_kernel(runner, k, [x.astype(d.numpy), y.astype(d.numpy)], d, len(x))
    check("pow", d, [x, y], got)
