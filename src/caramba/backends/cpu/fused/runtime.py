"""Numba helpers the generated kernels call (imports numba: load only when fusing).

Each mirrors the NumPy / SciPy semantics of the cpu reference kernels exactly:
``fmax``/``fmin`` are ``np.maximum``/``np.minimum`` (NaN-propagating, first operand on ties),
``expit`` is ``scipy.special.expit`` (``1 / (1 + exp(-x))``), and
``pairwise_sum`` is NumPy's pairwise summation, so a fused sum over a contiguous row rounds
exactly like ``np.sum`` over it.
"""

from __future__ import annotations

import math

import numpy as np

from caramba.backends.cpu import jitcache

jitcache.setup()  # Numba's disk cache in the user cache, before any cached function is defined

from llvmlite import ir as llir  # noqa: E402
from numba import njit, types  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(inline="always", **_OPTS)
def fmax(a, b):
    return a if (a >= b or a != a) else b


@njit(inline="always", **_OPTS)
def fmin(a, b):
    return a if (a <= b or a != a) else b


@njit(inline="always", **_OPTS)
def expit(x):
    return 1.0 / (1.0 + exp_fast(-x))  # exp_fast: vectorizes (float32 inputs computed in float64)


@njit(inline="always", **_OPTS)
def _block(a, s, n, zero):
    """NumPy's pairwise-sum leaf (n <= 128): eight accumulators, then the tail."""
    if n < 8:
        res = zero
        for i in range(s, s + n):
            res += a[i]
        return res
    r0 = a[s]
    r1 = a[s + 1]
    r2 = a[s + 2]
    r3 = a[s + 3]
    r4 = a[s + 4]
    r5 = a[s + 5]
    r6 = a[s + 6]
    r7 = a[s + 7]
    m = n - n % 8
    i = 8
    while i < m:
        r0 += a[s + i]
        r1 += a[s + i + 1]
        r2 += a[s + i + 2]
        r3 += a[s + i + 3]
        r4 += a[s + i + 4]
        r5 += a[s + i + 5]
        r6 += a[s + i + 6]
        r7 += a[s + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[s + i]
        i += 1
    return res


@njit(**_OPTS)
def pairwise_sum(a, s, n, zero):
    """Sum of ``a[s:s+n]`` (1-D) in NumPy's pairwise order; ``zero`` fixes the accumulator type.

    NumPy recurses: halves (rounded to multiples of 8) down to blocks of at most 128. This is
    the same tree walked with explicit stacks (Numba's on-disk cache cannot link recursion).
    """
    if n <= 128:
        return _block(a, s, n, zero)
    starts = np.empty(64, np.int64)
    sizes = np.empty(64, np.int64)
    state = np.zeros(64, np.int64)
    vals = np.full(64, zero)
    sp = 0
    vp = 0
    starts[0] = s
    sizes[0] = n
    state[0] = 0
    sp = 1
    while sp > 0:
        t = sp - 1
        m = sizes[t]
        if m <= 128:
            vals[vp] = _block(a, starts[t], m, zero)
            vp += 1
            sp -= 1
            continue
        half = m // 2
        half -= half % 8
        if state[t] == 0:
            state[t] = 1
            starts[sp] = starts[t]
            sizes[sp] = half
            state[sp] = 0
            sp += 1
        elif state[t] == 1:
            state[t] = 2
            starts[sp] = starts[t] + half
            sizes[sp] = m - half
            state[sp] = 0
            sp += 1
        else:
            vals[vp - 2] = vals[vp - 2] + vals[vp - 1]
            vp -= 1
            sp -= 1
    return vals[0]


# ---- vectorizable exp and erfc ----------------------------------------------------------------
# libm's erfc costs ~18 ns and blocks SIMD; these are written without branches or calls, so LLVM
# vectorizes loops that use them: erfc is fdlibm's s_erf.c (every region computed, one
# selected; the constants are those of the WGSL library in backends/codegen/wgsl_math.py), exp
# is fdlibm's argument reduction with a degree-13 Taylor polynomial (no division) and a
# two-argument form exp(a + b) that keeps erfc's tail accurate with one exp instead of two.
# Polynomials use fused multiply-add where the CPU has it. Accuracy: within 2 ulp of mpmath,
# as libm (tests/unit/compiler). erfc float64 on one core: 13.2 -> 8.5 ns an element.


def _has_fma() -> bool:
    """Does the CPU Numba compiles for have FMA (else llvm.fma would become a libm call)?"""
    from numba.core import config

    if config.CPU_FEATURES is not None:
        return "+fma" in config.CPU_FEATURES.split(",")
    if config.CPU_NAME is not None:  # e.g. "generic" for portable caches: assume none
        return False
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_features().get("fma", False)


def _fma_for(ll, nb):
    """``llvm.fma`` of one float type as a Numba intrinsic (``a * b + c``, one rounding)."""

    @intrinsic
    def fma(typingctx, a, b, c):
        def codegen(context, builder, signature, args):
            fn = builder.module.declare_intrinsic("llvm.fma", [ll], llir.FunctionType(ll, [ll, ll, ll]))
            return builder.call(fn, args)

        return nb(nb, nb, nb), codegen

    return fma


_fma_intrinsic = _fma_for(llir.DoubleType(), types.float64)
_fma32_intrinsic = _fma_for(llir.FloatType(), types.float32)


if _has_fma():
    _mad = _fma_intrinsic
else:
    @njit(inline="always", **_OPTS)
    def _mad(a, b, c):
        return a * b + c


@njit(inline="always", **_OPTS)
def _poly(z, c):
    """c[0] + z*(c[1] + z*(... c[n])) for a constant tuple ``c`` (unrolled by LLVM)."""
    r = c[len(c) - 1]
    for i in range(len(c) - 2, -1, -1):
        r = _mad(r, z, c[i])
    return r


if _has_fma():
    _mad32 = _fma32_intrinsic
else:
    @njit(inline="always", **_OPTS)
    def _mad32(a, b, c):
        return a * b + c


@njit(inline="always", **_OPTS)
def _poly32(z, c):
    """``_poly`` in float32 (float32 ``z``; the coefficients rounded to float32 once)."""
    r = np.float32(c[len(c) - 1])
    for i in range(len(c) - 2, -1, -1):
        r = _mad32(r, z, np.float32(c[i]))
    return r


def _horner_intrinsic(coeffs: tuple[float, ...], f32: bool = False):
    """``_poly(z, coeffs)`` as one call: the same multiply-adds (``llvm.fma`` where ``_mad`` is
    it, else a multiply then an add, never contracted) in the same order, emitted straight to
    LLVM. For generated kernels (``inline.py`` writes these for ``_poly``): typing and lowering
    one call instead of one per coefficient is most of what a kernel's exp or erfc cost to
    compile."""
    fma = _has_fma()
    if f32:  # _poly32's: the coefficients rounded to float32 as np.float32 rounds them
        coeffs = tuple(float(np.float32(c)) for c in coeffs)
    nty = types.float32 if f32 else types.float64

    @intrinsic
    def horner(typingctx, z):
        def codegen(context, builder, signature, args):
            d = llir.FloatType() if f32 else llir.DoubleType()
            (zv,) = args
            r = llir.Constant(d, coeffs[-1])
            fn = builder.module.declare_intrinsic("llvm.fma", [d], llir.FunctionType(d, [d, d, d])) if fma else None
            for c in reversed(coeffs[:-1]):
                if fn is not None:
                    r = builder.call(fn, [r, zv, llir.Constant(d, c)])
                else:
                    r = builder.fadd(builder.fmul(r, zv), llir.Constant(d, c))
            return r

        return nty(nty), codegen

    return horner


@intrinsic
def _bits(typingctx, x):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def _from_bits(typingctx, b):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llir.DoubleType())

    return types.float64(types.int64), codegen


EXP_TAYLOR = tuple(1.0 / math.factorial(i) for i in range(14))  # |r| <= ln2/2: truncation < 0.05 ulp
ERF_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
          -5.77027029648944159157e-03, -2.37630166566501626084e-05)
ERF_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
          1.32494738004321644526e-04, -3.96022827877536812320e-06)
ERF_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
          3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
          -2.16637559486879084300e-03)
ERF_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
          1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
ERF_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
          -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
          -8.12874355063065934246e+01, -9.81432934416914548592e+00)
ERF_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
          6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
          6.57024977031928170135e+00, -6.04244152148580987438e-02)
ERF_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
          -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
          -4.83519191608651397019e+02)
ERF_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
          3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
          -2.24409524465858183362e+01)


# the polynomials above as one intrinsic each (name -> coefficients), for inline.py's _poly
HORNER = {"_horner_erf_pp": ERF_PP, "_horner_erf_qq": ERF_QQ, "_horner_erf_pa": ERF_PA,
          "_horner_erf_qa": ERF_QA, "_horner_erf_ra": ERF_RA, "_horner_erf_sa": ERF_SA, "_horner_erf_rb": ERF_RB,
          "_horner_erf_sb": ERF_SB}
HORNER32 = {"_horner32_" + k.removeprefix("_horner_"): v for k, v in HORNER.items()}
for _name, _c in HORNER.items():
    globals()[_name] = _horner_intrinsic(_c)
for _name, _c in HORNER32.items():
    globals()[_name] = _horner_intrinsic(_c, f32=True)


@intrinsic
def _exp_estrin(typingctx, r):
    """EXP_TAYLOR at r as 1 + (r + r*r * P(r)), P's twelve terms in Estrin's scheme: the same
    multiply-adds as Horner's rule but four deep instead of thirteen (the exp loops were bound by
    that chain: float64 exp 2.3 -> 1.8 ns an element on a Zen 3). P's rounding is scaled by
    r*r <= 0.121 and the two last steps are Horner's, so the result stays within one ulp
    (tests/unit/compiler/test_cpu_fused.py). One intrinsic, as ``_horner_intrinsic``'s: one
    call for Numba to type and lower, ``llvm.fma`` where ``_mad`` is it."""
    fma = _has_fma()

    def codegen(context, builder, signature, args):
        d = llir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.fma", [d], llir.FunctionType(d, [d, d, d])) if fma else None

        def mad(a, b, c):
            c = llir.Constant(d, c) if isinstance(c, float) else c
            a = llir.Constant(d, a) if isinstance(a, float) else a
            return builder.call(fn, [a, b, c]) if fn is not None else builder.fadd(builder.fmul(a, b), c)

        (x,) = args
        e = EXP_TAYLOR
        x2 = builder.fmul(x, x)
        x4 = builder.fmul(x2, x2)
        q = [mad(mad(e[i + 3], x, e[i + 2]), x2, mad(e[i + 1], x, e[i])) for i in (2, 6, 10)]
        p = mad(mad(q[2], x4, q[1]), x4, q[0])
        return builder.fadd(mad(x2, p, x), llir.Constant(d, 1.0))

    return types.float64(types.float64), codegen


_SHIFTER = 6755399441055744.0  # 1.5 * 2**52: adding it rounds to an integer, kept in the low bits
_SHIFTER_BITS = 0x4338000000000000


@njit(inline="always", **_OPTS)
def _times_2k(y, kd):
    """y * 2**k for ``kd`` = k + 1.5 * 2**52 (``_exp2``'s rounding; its bits minus the shifter's
    are k), as y * 2**k1 * 2**(k - k1), k1 = floor(k / 2), from the bits (reaches the
    subnormals). k + 2048 >= 0, so its arithmetic and logical shifts agree (AVX2 has only the latter)."""
    kb = _bits(kd) - _SHIFTER_BITS
    k1 = ((kb + 2048) >> 1) - 1024
    return y * _from_bits((k1 + 1023) << 52) * _from_bits((kb - k1 + 1023) << 52)


@njit(inline="always", **_OPTS)
def _exp2(a, b):
    """exp(a + b) for an ``a`` whose reduction a - k*ln2_hi is exact (fdlibm's condition: any
    double here, or erfc's -z*z - 0.5625 with z of 26 bits) and a correction ``b`` small next
    to it: the sum is never rounded before the polynomial sees it. k = round(s / ln2) by adding
    1.5 * 2**52 (no float -> int conversion, which AVX2 cannot vectorize)."""
    s = a + b
    kd = min(max(s, -746.0), 710.0) * 1.44269504088896338700e+00 + _SHIFTER
    k = kd - _SHIFTER
    r = (a - k * 6.93147180369123816490e-01) + (b - k * 1.90821492927058770002e-10)
    out = _times_2k(_exp_estrin(r), kd)
    out = math.inf if s > 7.09782712893383973096e+02 else out
    return 0.0 if s < -7.45133219101941108420e+02 else out


@njit(inline="always", **_OPTS)
def exp_fast(x):
    """exp(x) for float64, branch-free: ``_exp2(x, 0.0)``'s steps without the correction (the
    same bits, two operations fewer)."""
    kd = min(max(x, -746.0), 710.0) * 1.44269504088896338700e+00 + _SHIFTER
    k = kd - _SHIFTER
    r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10
    out = _times_2k(_exp_estrin(r), kd)
    out = math.inf if x > 7.09782712893383973096e+02 else out
    out = 0.0 if x < -7.45133219101941108420e+02 else out
    return x if x != x else out


# float32 exp: Cody-Waite reduction by ln2 in two float32 parts (the high part has 9 bits, so
# k * hi is exact for |k| <= 150) and Cephes' expf minimax polynomial on [-ln2/2, ln2/2]
EXPF_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)


@njit(inline="always", **_OPTS)
def exp_f32(x):
    """exp(x) for float32 in float32 arithmetic, branch-free (vectorizes at float32's full SIMD
    width): within 1 ulp of the correctly rounded result (libm's expf: 0.5 ulp, one call per
    element); inf above ln(FLT_MAX), 0 below the subnormals' reach, NaN for NaN."""
    xc = min(max(x, np.float32(-104.0)), np.float32(88.75))
    k = np.floor(xc * np.float32(1.44269504088896341) + np.float32(0.5))
    r = (xc - k * np.float32(0.693359375)) - k * np.float32(-2.12194440e-4)
    p = np.float32(EXPF_P[0])
    p = p * r + np.float32(EXPF_P[1])
    p = p * r + np.float32(EXPF_P[2])
    p = p * r + np.float32(EXPF_P[3])
    p = p * r + np.float32(EXPF_P[4])
    p = p * r + np.float32(EXPF_P[5])
    y = p * r * r + r + np.float32(1.0)
    ki = np.int32(k)
    k1 = ki >> 1  # 2**k as 2**k1 * 2**(k - k1): reaches the subnormals and 2**128
    s1 = np.int32((k1 + 127) << 23).view(np.float32)
    s2 = np.int32((ki - k1 + 127) << 23).view(np.float32)
    out = y * s1 * s2
    out = np.float32(math.inf) if x > np.float32(88.72283935546875) else out
    out = np.float32(0.0) if x < np.float32(-103.97208) else out
    return x if x != x else out


@njit(inline="always", **_OPTS)
def erfc_fast(x):
    """erfc(x) for float64: fdlibm's s_erf.c regions, every region computed, one selected."""
    ax = abs(x)
    z = x * x
    m = ax - 1.0
    is_small = ax < 0.84375
    # |x| < 0.84375: erf's rational form in x*x; below 1.25: erf(1 + m) - erx; one division
    ratio = (_poly(z, ERF_PP) if is_small else _poly(m, ERF_PA)) / (_poly(z, ERF_QQ) if is_small else _poly(m, ERF_QA))
    small = (1.0 - (x + x * ratio)) if x < 0.25 else (0.5 - (x * ratio + (x - 0.5)))
    mid = ((1.0 - 8.45062911510467529297e-01) - ratio) if x >= 0.0 else (1.0 + (8.45062911510467529297e-01 + ratio))
    at = min(max(ax, 1.25), 28.0)  # the tail formula only for 1.25 <= ax < 28 (keeps other lanes finite)
    inv = 1.0 / at
    s = inv * inv
    near = at < 2.857142857142857
    rs = (_poly(s, ERF_RA) if near else _poly(s, ERF_RB)) / (_poly(s, ERF_SA) if near else _poly(s, ERF_SB))
    zt = _from_bits(_bits(at) & np.int64(-4294967296))  # at with the low 32 bits cleared: zt*zt is exact
    r = _exp2(-zt * zt - 0.5625, (zt - at) * (zt + at) + rs) * inv
    tail = r if x > 0.0 else (2.0 if x < -6.0 else 2.0 - r)
    far = 0.0 if x > 0.0 else 2.0
    out = small if is_small else (mid if ax < 1.25 else (tail if ax < 28.0 else far))
    return x if x != x else out


# float32 erfc in float32 arithmetic (full float32 SIMD width: twice erfc_fast's lanes): the same
# fdlibm regions and coefficients (rounded to float32), the tail's exp(-z*z - 0.5625 + c) with
# z of 11 bits (z*z exact) taken in two parts as _exp2 does, in exp_f32's reduction. Within 2
# ulp of mpmath's erfc wherever the result is normal (tests/unit/backends/cpu/test_erfc_f32.py).
ERX = 8.45062911510467529297e-01  # 23 significant bits: exact in float32


@njit(inline="always", **_OPTS)
def _exp2_f32(a, b, mul):
    """``mul * exp(a + b)`` in float32 for erfc_f32's tail: ``a`` = -z*z - 0.5625 (exact, at most
    -2.1), ``b`` a small correction; the scale 2**k applied last (one rounding into the
    subnormals)."""
    s = a + b
    sc = max(s, np.float32(-104.0))
    k = np.floor(sc * np.float32(1.44269504088896341) + np.float32(0.5))
    r = (a - k * np.float32(0.693359375)) + (b - k * np.float32(-2.12194440e-4))
    p = np.float32(EXPF_P[0])
    p = p * r + np.float32(EXPF_P[1])
    p = p * r + np.float32(EXPF_P[2])
    p = p * r + np.float32(EXPF_P[3])
    p = p * r + np.float32(EXPF_P[4])
    p = p * r + np.float32(EXPF_P[5])
    y = p * r * r + r + np.float32(1.0)
    ki = np.int32(k)
    k1 = ki >> 1
    s1 = np.int32((k1 + 127) << 23).view(np.float32)
    s2 = np.int32((ki - k1 + 127) << 23).view(np.float32)
    out = y * mul * s1 * s2
    return np.float32(0.0) if s < np.float32(-104.0) else out


@njit(inline="always", **_OPTS)
def erfc_f32(x):
    """erfc(x) for float32 in float32 arithmetic, branch-free: erfc_fast's regions in float32."""
    ax = abs(x)
    z = x * x
    m = ax - np.float32(1.0)
    is_small = ax < np.float32(0.84375)
    ratio = (_poly32(z, ERF_PP) if is_small else _poly32(m, ERF_PA)) / (_poly32(z, ERF_QQ) if is_small else _poly32(m, ERF_QA))
    small = ((np.float32(1.0) - (x + x * ratio)) if x < np.float32(0.25)
             else (np.float32(0.5) - (x * ratio + (x - np.float32(0.5)))))
    mid = ((np.float32(1.0 - ERX) - ratio) if x >= np.float32(0.0) else (np.float32(1.0) + (np.float32(ERX) + ratio)))
    at = min(max(ax, np.float32(1.25)), np.float32(10.5))  # past 10.06 erfc underflows float32
    inv = np.float32(1.0) / at
    s = inv * inv
    near = at < np.float32(2.857142857142857)
    rs = (_poly32(s, ERF_RA) if near else _poly32(s, ERF_RB)) / (_poly32(s, ERF_SA) if near else _poly32(s, ERF_SB))
    zt = np.int32(np.float32(at).view(np.int32) & np.int32(-8192)).view(np.float32)  # 11 significant bits: zt*zt exact
    r = _exp2_f32(-zt * zt - np.float32(0.5625), (zt - at) * (zt + at) + rs, inv)
    tail = r if x > np.float32(0.0) else np.float32(2.0) - r
    far = np.float32(0.0) if x > np.float32(0.0) else np.float32(2.0)
    out = small if is_small else (mid if ax < np.float32(1.25) else (tail if ax < np.float32(10.5) else far))
    return x if x != x else out
