"""Float64-accurate special functions and a counter-based RNG, built from plain ONNX ops.

ONNX Runtime's CPU provider has no float64 ``Erf``, and its float64 ``Softplus``/``Elu``/
``Selu``/``LeakyRelu`` read float32 attributes; ONNX has no ``Log1p``/``Expm1`` at all. The
functions here compose ops that *do* have float64 kernels (Add, Mul, Div, Exp, Log, Floor,
Where, ...) with float64 constants stored as initializers, so every constant is the exact
float64 number.

Sources:

* erf / erfc: W. J. Cody, "Rational Chebyshev approximations for the error function",
  Math. Comp. 23 (1969) 631-637; coefficients and the three intervals (|x| <= 0.46875,
  <= 4, > 4) as in Cody's SPECFUN routine CALERF (netlib.org/specfun/erf), including its
  ``exp(-ysq*ysq) * exp(-del)`` split that keeps erfc accurate for large arguments.
* log1p: ``log(u) + (x - (u - 1)) / u`` with ``u = 1 + x`` (first-order correction of the
  rounding of ``u``; cf. D. Goldberg, "What every computer scientist should know about
  floating-point arithmetic", ACM Comput. Surv. 23 (1991), Theorem 4).
* expm1: W. Kahan's ``(u - 1) * x / log(u)`` with ``u = exp(x)`` (N. J. Higham, "Accuracy and
  Stability of Numerical Algorithms", 2nd ed., section 1.14.1).
* RNG: SplitMix64 (G. Steele, D. Lea, C. Flood, "Fast splittable pseudorandom number
  generators", OOPSLA 2014; constants of Vigna's splitmix64.c): element i of a draw is
  ``mix(s + (i + 1) * golden)``, a pure function of (seed, key, i), so a draw is reproducible.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from caramba.ir.dtypes import DType
from caramba.onnx.emitter import Emitter

# ---- Cody's CALERF coefficients -----------------------------------------------------------
A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02, 3.20937758913846947e03, 1.85777706184603153e-1)
B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
C = (
    5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
    8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
    2.15311535474403846e-8,
)
D = (
    1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
    3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03,
)
P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1, 6.05183413124413191e-2, 2.33520497626869185e-3)
SQRPI = 5.6418958354775628695e-1  # 1 / sqrt(pi)
THRESH = 0.46875
# Past this |x|, erfc(x) is below the smallest float64 subnormal; it also keeps x = inf out
# of the exp(-ysq*ysq) * exp(-del) product (where inf - inf would make a NaN).
XBIG = 27.3


# ONNX Runtime's CPU Where returns +0.0 where the condition picks a -0.0 from its *first*
# branch (the second branch is copied exactly). The decompositions below put any value that
# may be -0.0 in the second branch; ``where_signed`` fixes the general case. Negations are
# spelled ``Equal(b, false)``: ORT's NotWhereFusion would swap a Not(c) Where back.


def not_(e: Emitter, b: str) -> str:
    return e.op("Equal", b, e.const(np.asarray(False), hint="false"))


def where_signed(e: Emitter, c: str, x: str, y: str, d: DType) -> str:
    """Where(c, x, y) that keeps the sign of a zero taken from ``x`` (floats): where that
    happened, Where gave +0.0, and multiplying it by -1 restores -0.0."""
    r = e.op("Where", c, x, y)
    neg_zero_x = e.op("Equal", e.op("Div", e.scalar(1.0, d), x), e.scalar(-np.inf, d))
    fix = e.op("And", c, neg_zero_x)
    r = e.op("Where", fix, e.op("Abs", r), r)
    return e.op("Mul", r, e.op("Where", fix, e.scalar(-1.0, d), e.scalar(1.0, d)))


class Math:
    """Elementwise helpers on one dtype ``d`` (constants are made in ``d``)."""

    def __init__(self, e: Emitter, d: DType) -> None:
        self.e = e
        self.d = d

    def k(self, v: float) -> str:
        return self.e.scalar(v, self.d)

    def add(self, a: str, b: str) -> str:
        return self.e.op("Add", a, b)

    def sub(self, a: str, b: str) -> str:
        return self.e.op("Sub", a, b)

    def mul(self, a: str, b: str) -> str:
        return self.e.op("Mul", a, b)

    def div(self, a: str, b: str) -> str:
        return self.e.op("Div", a, b)

    def where(self, c: str, a: str, b: str) -> str:
        return self.e.op("Where", c, a, b)

    def less(self, a: str, b: str) -> str:
        return self.e.op("Less", a, b)

    def exp(self, a: str) -> str:
        return self.e.op("Exp", a)

    def log(self, a: str) -> str:
        return self.e.op("Log", a)

    def horner(self, t: str, lead: str, coeffs: tuple[float, ...]) -> str:
        """Cody's loop: ``xnum = lead; for c in coeffs: xnum = (xnum + c) * t``."""
        acc = lead
        for c in coeffs:
            acc = self.mul(self.add(acc, self.k(c)), t)
        return acc


def _erf_parts(m: Math, x: str) -> tuple[str, str, str]:
    """(y = |x|, erf(x) for |x| <= THRESH, erfc(|x|) for |x| > THRESH)."""
    e = m.e
    y = e.op("Abs", x)
    # |x| <= 0.46875: erf(x) = x * R(x^2)
    t = m.mul(y, y)
    num1 = m.add(m.horner(t, m.mul(m.k(A[4]), t), A[:3]), m.k(A[3]))
    den1 = m.add(m.horner(t, t, B[:3]), m.k(B[3]))
    erf_small = m.mul(x, m.div(num1, den1))
    # 0.46875 < |x| <= 4: erfc(y) = exp(-y^2) R(y)
    num2 = m.add(m.horner(y, m.mul(m.k(C[8]), y), C[:7]), m.k(C[7]))
    den2 = m.add(m.horner(y, y, D[:7]), m.k(D[7]))
    r2 = m.div(num2, den2)
    # |x| > 4: erfc(y) = exp(-y^2) / y * (1/sqrt(pi) - R(1/y^2) / y^2)
    t3 = m.div(m.k(1.0), t)
    num3 = m.add(m.horner(t3, m.mul(m.k(P[5]), t3), P[:4]), m.k(P[4]))
    den3 = m.add(m.horner(t3, t3, Q[:4]), m.k(Q[4]))
    r3 = m.div(m.sub(m.k(SQRPI), m.div(m.mul(t3, num3), den3)), y)
    r = m.where(e.op("LessOrEqual", y, m.k(4.0)), r2, r3)
    # exp(-y^2) as exp(-ysq^2) * exp(-del), ysq = trunc(16 y) / 16, exactly as CALERF.
    ysq = m.div(e.op("Floor", m.mul(y, m.k(16.0))), m.k(16.0))
    dl = m.mul(m.sub(y, ysq), m.add(y, ysq))
    scale = m.mul(m.exp(e.op("Neg", m.mul(ysq, ysq))), m.exp(e.op("Neg", dl)))
    erfc_big = m.where(e.op("GreaterOrEqual", y, m.k(XBIG)), m.k(0.0), m.mul(scale, r))  # NaN stays NaN
    return y, erf_small, erfc_big


def erf(e: Emitter, x: str, d: DType = DType.float64) -> str:
    m = Math(e, d)
    y, erf_small, erfc_big = _erf_parts(m, x)
    one_minus = m.sub(m.k(1.0), erfc_big)
    big = m.where(m.less(x, m.k(0.0)), e.op("Neg", one_minus), one_minus)
    return m.where(e.op("Greater", y, m.k(THRESH)), big, erf_small)


def erfc(e: Emitter, x: str, d: DType = DType.float64) -> str:
    m = Math(e, d)
    y, erf_small, erfc_big = _erf_parts(m, x)
    big = m.where(m.less(x, m.k(0.0)), m.sub(m.k(2.0), erfc_big), erfc_big)
    return m.where(e.op("LessOrEqual", y, m.k(THRESH)), m.sub(m.k(1.0), erf_small), big)


def log1p(e: Emitter, x: str, d: DType) -> str:
    m = Math(e, d)
    one = m.k(1.0)
    u = m.add(x, one)
    lu = m.log(u)
    corrected = m.add(lu, m.div(m.sub(x, m.sub(u, one)), u))
    # u = inf (x = inf) and u = 0 (x = -1): log(u) is already the answer.
    edge = e.op("Or", e.op("IsInf", u), e.op("Equal", u, m.k(0.0)))
    out = m.where(edge, lu, corrected)
    return m.where(not_(e, e.op("Equal", u, one)), out, x)  # tiny x (and -0.0): log1p(x) = x


def expm1(e: Emitter, x: str, d: DType) -> str:
    m = Math(e, d)
    one = m.k(1.0)
    u = m.exp(x)
    um1 = m.sub(u, one)
    kahan = m.div(m.mul(um1, x), m.log(u))
    out = m.where(e.op("Equal", um1, m.k(-1.0)), um1, kahan)
    out = m.where(e.op("IsInf", u), u, out)
    return m.where(not_(e, e.op("Equal", u, one)), out, x)


def sigmoid(e: Emitter, x: str, d: DType) -> str:
    """1 / (1 + exp(-x)) for x >= 0 and exp(x) / (1 + exp(x)) below: no overflow, full accuracy."""
    m = Math(e, d)
    ex = m.exp(e.op("Neg", e.op("Abs", x)))
    den = m.add(m.k(1.0), ex)
    return m.where(e.op("GreaterOrEqual", x, m.k(0.0)), m.div(m.k(1.0), den), m.div(ex, den))


# ---- SplitMix64 ---------------------------------------------------------------------------
GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
U64 = (1 << 64) - 1


def _u64(e: Emitter, v: int) -> str:
    return e.const(np.asarray(v & U64, dtype=np.uint64), hint="u")


def mix64(e: Emitter, z: str) -> str:
    def shr_xor(z: str, k: int) -> str:
        return e.op("BitwiseXor", z, e.op("BitShift", z, _u64(e, k), direction="RIGHT"))

    z = e.op("Mul", shr_xor(z, 30), _u64(e, MIX1))
    z = e.op("Mul", shr_xor(z, 27), _u64(e, MIX2))
    return shr_xor(z, 31)


def mix64_host(z: int) -> int:
    """The same mix on the host (for constant seeds)."""
    z &= U64
    z = ((z ^ (z >> 30)) * MIX1) & U64
    z = ((z ^ (z >> 27)) * MIX2) & U64
    return z ^ (z >> 31)


def stream_seed(e: Emitter, seed: int, key: str | None) -> str:
    """The uint64 scalar starting a draw: mix(seed) or mix(seed ^ mix(key + golden))."""
    if key is None:
        return _u64(e, mix64_host(seed))
    k = e.op("Cast", key, to=TensorProto.UINT64)
    mixed = mix64(e, e.op("Add", k, _u64(e, GOLDEN)))
    return mix64(e, e.op("BitwiseXor", _u64(e, seed), mixed))


def uniform01(e: Emitter, s: str, shape: tuple[int, ...], stride: int = 1, offset: int = 0) -> str:
    """float64 uniforms on [0, 1) of ``shape``: element i uses counter i * stride + offset."""
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    idx = e.op("Range", e.scalar(offset + 1, DType.int64), e.scalar(offset + 1 + n * stride, DType.int64), e.scalar(stride, DType.int64))
    ctr = e.op("Mul", e.op("Cast", idx, to=TensorProto.UINT64), _u64(e, GOLDEN))
    bits = mix64(e, e.op("Add", ctr, s))
    top = e.op("BitShift", bits, _u64(e, 11), direction="RIGHT")
    u = e.op("Mul", e.op("Cast", top, to=TensorProto.DOUBLE), e.scalar(2.0**-53, DType.float64))
    return e.op("Reshape", u, e.ints(shape))


def normal01(e: Emitter, s: str, shape: tuple[int, ...]) -> str:
    """float64 standard normals (Box-Muller on two uniforms per element)."""
    u1 = uniform01(e, s, shape, 2, 0)
    u2 = uniform01(e, s, shape, 2, 1)
    m = Math(e, DType.float64)
    r = e.op("Sqrt", m.mul(m.k(-2.0), m.log(m.sub(m.k(1.0), u1))))
    return m.mul(r, e.op("Cos", m.mul(m.k(2.0 * math.pi), u2)))


__all__ = ["erf", "erfc", "expm1", "log1p", "mix64", "normal01", "sigmoid", "stream_seed", "uniform01"]
