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
* sin / cos: fdlibm's scheme (Sun Microsystems, 1993; as in FreeBSD msun e_rem_pio2.c,
  k_sin.c, k_cos.c). ``k = round(x * 2/pi)``; ``r = x - k*pi/2`` with pi/2 split into
  33-bit parts (pio2_1, pio2_2, pio2_3) and a 53-bit tail (pio2_3t), so each ``k * part`` is
  exact while ``|k| < 2**20``; the differences are summed with Knuth's TwoSum into a
  double-double ``y0 + y1`` (branch-free, so all three of fdlibm's iterations always run);
  then msun's __kernel_sin/__kernel_cos minimax polynomials on [-pi/4, pi/4] and the quadrant
  ``k mod 4``. Past ``|k| >= 2**20`` (|x| >~ 1.647e6) Payne-Hanek: ``|x| * 2/pi mod 4`` from a
  192-bit window of 2/pi (the bits of ``backends/codegen/two_over_pi.py``) in 32-bit limbs held
  in uint64, as the WGSL port in ``backends/codegen/wgsl_math.py`` does; the exponent of ``x``
  comes from ``Log`` corrected against a table of exact powers of two (ONNX has no bitcast).
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


# ---- sin / cos (fdlibm / FreeBSD msun) ---------------------------------------------------
TWO_OVER_PI = 6.36619772367581382433e-01  # 0x3FE45F306DC9C883
PIO2_1 = float.fromhex("0x1.921fb54400000p+0")  # first 33 bits of pi/2
PIO2_2 = float.fromhex("0x1.0b4611a600000p-34")  # second 33 bits
PIO2_3 = float.fromhex("0x1.3198a2e000000p-69")  # third 33 bits
PIO2_3T = float.fromhex("0x1.b839a252049c1p-104")  # pi/2 - (PIO2_1 + PIO2_2 + PIO2_3), 53 bits
# k * PIO2_i is exact while |k| < 2**20 (33 + 20 bits); from k = round(x * 2/pi) = 2**20 on
# (|x| >~ (2**20 - 1/2) * pi/2 ~ 1.647e6) the reduction is Payne-Hanek's.
SINCOS_K_MAX = 2.0**20
S_K = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
       2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
C_K = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
       -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)


def _two_sum(m: Math, a: str, b: str) -> tuple[str, str]:
    """Knuth's TwoSum: s + err == a + b exactly, whatever the magnitudes."""
    s = m.add(a, b)
    bb = m.sub(s, a)
    return s, m.add(m.sub(a, m.sub(s, bb)), m.sub(b, bb))


def _rem_pio2(m: Math, x: str) -> tuple[str, str, str]:
    """(k, y0, y1): x = k*pi/2 + y0 + y1, |y0 + y1| <~ pi/4, for |k| < 2**20."""
    e = m.e
    k = e.op("Round", m.mul(x, m.k(TWO_OVER_PI)))
    t1 = m.sub(x, m.mul(k, m.k(PIO2_1)))  # exact: exact product, Sterbenz difference
    s1, e1 = _two_sum(m, t1, e.op("Neg", m.mul(k, m.k(PIO2_2))))
    s2, e2 = _two_sum(m, s1, e.op("Neg", m.mul(k, m.k(PIO2_3))))
    lo = m.sub(m.add(e1, e2), m.mul(k, m.k(PIO2_3T)))
    y0, y1 = _two_sum(m, s2, lo)
    return k, y0, y1


_M32 = 0xFFFFFFFF
_PH_E_MIN = -33  # x = m * 2**e, m in [2**52, 2**53): e >= -32 past the Cody-Waite bound


def _tpi_word_tables() -> list[np.ndarray]:
    """For each e in [_PH_E_MIN, 971] and j in 0..5, the 32 bits of 2/pi from bit
    e - 1 + 32 (5 - j) on (bit 1 = the first after the binary point; bits <= 0 are zero)."""
    from caramba.backends.codegen.two_over_pi import TWO_OVER_PI_24

    nbits = 24 * len(TWO_OVER_PI_24)
    big = 0
    for c in TWO_OVER_PI_24:
        big = (big << 24) | c

    def word(s: int) -> int:
        return 0 if s + 31 <= 0 else (big >> (nbits - (s + 31))) & _M32

    es = range(_PH_E_MIN, 972)
    return [np.array([word(e - 1 + 32 * (5 - j)) for e in es], dtype=np.uint64) for j in range(6)]


def _rem_pio2_large(m: Math, ax: str) -> tuple[str, str, str]:
    """Payne-Hanek for ax = |x| >= 2**20 (finite), after FreeBSD msun / the WGSL port in
    ``backends/codegen/wgsl_math.py``: ax * 2/pi mod 4 from a 192-bit window of 2/pi, in 32-bit
    limbs held in uint64. Returns (n mod 4, y0, y1) with ax = n pi/2 + y0 + y1 (mod 2 pi)."""
    e = m.e
    u64 = TensorProto.UINT64

    def u(v: int) -> str:
        return _u64(e, v)

    # exponent: ax in [2**E, 2**(E+1)), from log with a one-step correction against exact powers
    pow2 = e.const(np.append(np.ldexp(1.0, np.arange(0, 1024)), np.inf), DType.float64, hint="pow2")
    est = e.op("Floor", m.div(m.log(ax), m.k(math.log(2.0))))
    est = e.op("Clip", est, m.k(20.0), m.k(1023.0))
    p = e.op("Gather", pow2, e.op("Cast", est, to=TensorProto.INT64))
    est = m.sub(est, e.op("Cast", m.less(ax, p), to=TensorProto.DOUBLE))
    p2 = e.op("Gather", pow2, e.op("Cast", m.add(est, m.k(1.0)), to=TensorProto.INT64))
    big_e = m.add(est, e.op("Cast", e.op("GreaterOrEqual", ax, p2), to=TensorProto.DOUBLE))
    p = e.op("Gather", pow2, e.op("Cast", big_e, to=TensorProto.INT64))
    mant = e.op("Cast", m.mul(m.div(ax, p), m.k(2.0**52)), to=u64)  # exact 53-bit integer
    idx = e.op("Cast", m.sub(big_e, m.k(52.0 + _PH_E_MIN)), to=TensorProto.INT64)  # e - _PH_E_MIN
    w = [e.op("Gather", e.const(t, hint="tpi"), idx) for t in _tpi_word_tables()]

    def lo32(t: str) -> str:
        return e.op("BitwiseAnd", t, u(_M32))

    def hi32(t: str) -> str:
        return e.op("BitShift", t, u(32), direction="RIGHT")

    m0, m1 = lo32(mant), hi32(mant)
    q, c = [], None
    for j in range(6):  # m0 * W
        t = e.op("Mul", m0, w[j])
        t = t if c is None else e.op("Add", t, c)
        q.append(lo32(t))
        c = hi32(t)
    r, c = [q[0]], None
    for j in range(5):  # + (m1 * W) << 32; limbs 6 and 7 are multiples of 4
        t = e.op("Add", e.op("Mul", m1, w[j]), q[j + 1])
        t = t if c is None else e.op("Add", t, c)
        r.append(lo32(t))
        c = hi32(t)
    # n = bits 190, 191; the fraction: the 190 bits below, shifted up by 2 (h[0] most significant)
    n = e.op("Cast", e.op("BitwiseAnd", e.op("BitShift", r[5], u(30), direction="RIGHT"), u(3)), to=TensorProto.DOUBLE)
    limbs = [r[5], r[4], r[3], r[2], r[1], r[0]]
    h = []
    for k in range(6):
        v = e.op("BitShift", limbs[k], u(2), direction="LEFT")
        if k < 5:
            v = e.op("BitwiseOr", v, e.op("BitShift", limbs[k + 1], u(30), direction="RIGHT"))
        h.append(lo32(v))
    # fraction >= 1/2: n + 1 and the fraction 1 - f (2**192 minus the limbs)
    neg = e.op("GreaterOrEqual", h[0], u(0x80000000))
    comp, c = [None] * 6, u(1)
    for k in range(5, -1, -1):
        t = e.op("Add", lo32(e.op("BitwiseNot", h[k])), c)
        comp[k] = lo32(t)
        c = hi32(t)
    g = [m.where(neg, e.op("Cast", comp[k], to=TensorProto.DOUBLE), e.op("Cast", h[k], to=TensorProto.DOUBLE)) for k in range(6)]
    # the fraction as a double-double: limbs are exact doubles, summed with TwoSum
    s_, err = m.mul(g[0], m.k(2.0**-32)), None
    for k in range(1, 6):
        s_, t = _two_sum(m, s_, m.mul(g[k], m.k(2.0 ** (-32 * (k + 1)))))
        err = t if err is None else m.add(err, t)
    hi, lo = _two_sum(m, s_, err)
    # times pi/2 (double-double constant) with Dekker's exact product (no FMA in ONNX)
    ph = m.mul(hi, m.k(PIO2_HI))
    pe = m.add(_prod_err(m, hi, PIO2_HI, ph), m.add(m.mul(hi, m.k(PIO2_LO)), m.mul(lo, m.k(PIO2_HI))))
    y0 = m.add(ph, pe)
    y1 = m.sub(pe, m.sub(y0, ph))
    sign = m.where(neg, m.k(-1.0), m.k(1.0))
    return m.add(n, e.op("Cast", neg, to=TensorProto.DOUBLE)), m.mul(y0, sign), m.mul(y1, sign)


PIO2_HI = 1.5707963267948966  # pi/2 rounded to float64
PIO2_LO = 6.123233995736766e-17  # pi/2 - PIO2_HI


def _split(m: Math, a: str) -> tuple[str, str]:
    """Dekker/Veltkamp: a = hi + lo, each with at most 26 significant bits."""
    c = m.mul(a, m.k(134217729.0))  # 2**27 + 1
    hi = m.sub(c, m.sub(c, a))
    return hi, m.sub(a, hi)


def _prod_err(m: Math, a: str, b: float, p: str) -> str:
    """a * b - p exactly, for p = fl(a * b) (Dekker's TwoProduct; b a float64 constant)."""
    ah, al = _split(m, a)
    bh = float(np.float64(b) * 134217729.0 - (np.float64(b) * 134217729.0 - np.float64(b)))
    bl = float(np.float64(b) - np.float64(bh))
    t = m.sub(m.mul(ah, m.k(bh)), p)
    t = m.add(t, m.mul(ah, m.k(bl)))
    t = m.add(t, m.mul(al, m.k(bh)))
    return m.add(t, m.mul(al, m.k(bl)))


def _kernel_sin(m: Math, x: str, y: str) -> str:
    """msun k_sin.c (iy = 1): sin(x + y) on [-pi/4, pi/4], y the tail of x."""
    s1, s2, s3, s4, s5, s6 = (m.k(c) for c in S_K)
    z = m.mul(x, x)
    w = m.mul(z, z)
    r = m.add(m.add(s2, m.mul(z, m.add(s3, m.mul(z, s4)))), m.mul(m.mul(z, w), m.add(s5, m.mul(z, s6))))
    v = m.mul(z, x)
    inner = m.sub(m.mul(z, m.sub(m.mul(m.k(0.5), y), m.mul(v, r))), y)
    return m.sub(x, m.sub(inner, m.mul(v, s1)))


def _kernel_cos(m: Math, x: str, y: str) -> str:
    """msun k_cos.c: cos(x + y) on [-pi/4, pi/4]."""
    c1, c2, c3, c4, c5, c6 = (m.k(c) for c in C_K)
    one = m.k(1.0)
    z = m.mul(x, x)
    w = m.mul(z, z)
    r = m.add(m.mul(z, m.add(c1, m.mul(z, m.add(c2, m.mul(z, c3))))),
              m.mul(m.mul(w, w), m.add(c4, m.mul(z, m.add(c5, m.mul(z, c6))))))
    hz = m.mul(m.k(0.5), z)
    w = m.sub(one, hz)
    return m.add(w, m.add(m.sub(m.sub(one, w), hz), m.sub(m.mul(z, r), m.mul(x, y))))


def _sincos(e: Emitter, x: str, d: DType, cos: bool) -> str:
    m = Math(e, d)
    k, y0, y1 = _rem_pio2(m, x)
    # |k| >= 2**20 (|x| >~ 1.647e6, finite): Payne-Hanek on |x| (a safe stand-in elsewhere)
    finite = not_(e, e.op("Or", e.op("IsInf", x), e.op("IsNaN", x)))
    big = e.op("And", not_(e, m.less(e.op("Abs", k), m.k(SINCOS_K_MAX))), finite)
    # only on those elements (NonZero -> GatherND -> ScatterND): the common case stays cheap
    shape, flat = e.op("Shape", x), e.ints([-1])
    at = e.op("Transpose", e.op("NonZero", e.op("Reshape", big, flat)))  # (count, 1)
    xb = e.op("GatherND", e.op("Reshape", x, flat), at)
    n, z0, z1 = _rem_pio2_large(m, e.op("Abs", xb))
    flip = m.where(m.less(xb, m.k(0.0)), m.k(-1.0), m.k(1.0))  # sin(-a) = -sin(a): n, y negated

    def put(v: str, upd: str) -> str:
        # allowzero: a 0 in an empty input's shape is a 0, not "copy that dimension"
        return e.op("Reshape", e.op("ScatterND", e.op("Reshape", v, flat), at, m.mul(upd, flip)), shape, allowzero=1)

    k, y0, y1 = put(k, n), put(y0, z0), put(y1, z1)
    ks, kc = _kernel_sin(m, y0, y1), _kernel_cos(m, y0, y1)
    q = m.sub(k, m.mul(m.k(4.0), e.op("Floor", m.mul(k, m.k(0.25)))))  # k mod 4, exact
    if cos:  # quadrants 0..3: kc, -ks, -kc, ks
        q = m.add(q, m.k(1.0))
    # sin quadrants 0..3 (cos: q + 1): ks, kc, -ks, -kc
    odd = e.op("Equal", e.op("Mod", q, m.k(2.0), fmod=1), m.k(1.0))
    v = m.where(odd, kc, ks)
    neg = e.op("GreaterOrEqual", e.op("Mod", q, m.k(4.0), fmod=1), m.k(2.0))
    v = m.where(neg, e.op("Neg", v), v)
    v = m.where(finite, v, m.k(math.nan))  # inf and NaN: NaN
    if not cos:  # sin(+-0) = +-0: x in Where's exactly copied second branch
        v = m.where(not_(e, e.op("Equal", x, m.k(0.0))), v, x)
    return v


def sin(e: Emitter, x: str, d: DType = DType.float64) -> str:
    """float64 sin(x) within 1 ulp for every finite x; NaN for +-inf and NaN; sin(-0) = -0."""
    return _sincos(e, x, d, cos=False)


def cos(e: Emitter, x: str, d: DType = DType.float64) -> str:
    """float64 cos(x) within 1 ulp for every finite x; NaN for +-inf and NaN."""
    return _sincos(e, x, d, cos=True)


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


__all__ = ["cos", "erf", "erfc", "expm1", "log1p", "mix64", "normal01", "sigmoid", "sin", "stream_seed", "uniform01"]
