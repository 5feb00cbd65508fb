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
from llvmlite import ir as llir
from numba import njit, types
from numba.extending import intrinsic

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(inline="always", **_OPTS)
def fmax(a, b):
    return a if (a >= b or a != a) else b


@njit(inline="always", **_OPTS)
def fmin(a, b):
    return a if (a <= b or a != a) else b


@njit(inline="always", **_OPTS)
def expit(x):
    return 1.0 / (1.0 + math.exp(-x))


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
# libm's erfc costs ~50 ns and blocks SIMD; these are fdlibm's algorithms (e_exp.c, s_erf.c;
# the constants are those of the WGSL library in backends/codegen/wgsl_math.py) written without
# branches or calls, so LLVM vectorizes loops that use them. Accuracy: within 2 ulp of libm
# (tested against scipy.special.erfc over the whole range in tests/unit/compiler).


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


@njit(inline="always", **_OPTS)
def exp_fast(x):
    """exp(x) for float64, fdlibm's reduction and rational form, branch-free."""
    xc = min(max(x, -746.0), 710.0)
    k = np.floor(xc * 1.44269504088896338700e+00 + 0.5)
    hi = xc - k * 6.93147180369123816490e-01
    lo = k * 1.90821492927058770002e-10
    r = hi - lo
    t = r * r
    c = r - t * (1.66666666666666019037e-01 + t * (-2.77777777770155933842e-03 + t * (
        6.61375632143793436117e-05 + t * (-1.65339022054652515390e-06 + t * 4.13813679705723846039e-08))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    k1 = np.floor(k * 0.5)
    # 2**k1 and 2**(k - k1) from the bits: adding 1.5 * 2**52 puts the integer in the low
    # mantissa bits (no float -> int conversion, which AVX2 cannot vectorize)
    s1 = _from_bits((_bits(k1 + 6755399441055744.0) + 1023) << 52)
    s2 = _from_bits((_bits((k - k1) + 6755399441055744.0) + 1023) << 52)
    out = y * s1 * s2
    out = math.inf if x > 7.09782712893383973096e+02 else out
    out = 0.0 if x < -7.45133219101941108420e+02 else out
    return x if x != x else out


@njit(inline="always", **_OPTS)
def erfc_fast(x):
    """erfc(x) for float64: fdlibm's s_erf.c regions, every region computed, one selected."""
    ax = abs(x)
    z = x * x
    r_small = (1.28379167095512558561e-01 + z * (-3.25042107247001499370e-01 + z * (-2.84817495755985104766e-02
               + z * (-5.77027029648944159157e-03 + z * -2.37630166566501626084e-05))))
    s_small = 1.0 + z * (3.97917223959155352819e-01 + z * (6.50222499887672944485e-02 + z * (
        5.08130628187576562776e-03 + z * (1.32494738004321644526e-04 + z * -3.96022827877536812320e-06))))
    m = ax - 1.0
    p = -2.36211856075265944077e-03 + m * (4.14856118683748331666e-01 + m * (-3.72207876035701323847e-01 + m * (
        3.18346619901161753674e-01 + m * (-1.10894694282396677476e-01 + m * (3.54783043256182359371e-02
                                                                             + m * -2.16637559486879084300e-03)))))
    q = 1.0 + m * (1.06420880400844228286e-01 + m * (5.40397917702171048937e-01 + m * (7.18286544141962662868e-02 + m * (
        1.26171219808761642112e-01 + m * (1.36370839120290507362e-02 + m * 1.19844998467991074170e-02)))))
    is_small = ax < 0.84375
    ratio = (r_small if is_small else p) / (s_small if is_small else q)  # one division for both regions
    small = (1.0 - (x + x * ratio)) if x < 0.25 else (0.5 - (x * ratio + (x - 0.5)))
    mid = ((1.0 - 8.45062911510467529297e-01) - ratio) if x >= 0.0 else (1.0 + (8.45062911510467529297e-01 + ratio))
    at = max(ax, 1.25)  # the tail formula only for ax >= 1.25 (keeps unselected lanes finite)
    s = 1.0 / (at * at)
    ra = -9.86494403484714822705e-03 + s * (-6.93858572707181764372e-01 + s * (-1.05586262253232909814e+01 + s * (
        -6.23753324503260060396e+01 + s * (-1.62396669462573470355e+02 + s * (-1.84605092906711035994e+02 + s * (
            -8.12874355063065934246e+01 + s * -9.81432934416914548592e+00))))))
    sa = 1.0 + s * (1.96512716674392571292e+01 + s * (1.37657754143519042600e+02 + s * (4.34565877475229228821e+02 + s * (
        6.45387271733267880336e+02 + s * (4.29008140027567833386e+02 + s * (1.08635005541779435134e+02 + s * (
            6.57024977031928170135e+00 + s * -6.04244152148580987438e-02)))))))
    rb = -9.86494292470009928597e-03 + s * (-7.99283237680523006574e-01 + s * (-1.77579549177547519889e+01 + s * (
        -1.60636384855821916062e+02 + s * (-6.37566443368389627722e+02 + s * (-1.02509513161107724954e+03
                                                                              + s * -4.83519191608651397019e+02)))))
    sb = 1.0 + s * (3.03380607434824582924e+01 + s * (3.25792512996573918826e+02 + s * (1.53672958608443695994e+03 + s * (
        3.19985821950859553908e+03 + s * (2.55305040643316442583e+03 + s * (4.74528541206955367215e+02
                                                                            + s * -2.24409524465858183362e+01))))))
    near = at < 2.857142857142857
    rs = (ra if near else rb) / (sa if near else sb)
    zt = _from_bits(_bits(at) & np.int64(-4294967296))  # at with the low 32 bits cleared
    r = exp_fast(-zt * zt - 0.5625) * exp_fast((zt - at) * (zt + at) + rs) / at
    tail = r if x > 0.0 else (2.0 if x < -6.0 else 2.0 - r)
    far = 0.0 if x > 0.0 else 2.0
    out = small if is_small else (mid if ax < 1.25 else (tail if ax < 28.0 else far))
    return x if x != x else out
