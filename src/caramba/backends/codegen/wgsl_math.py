"""WGSL math library: what WGSL lacks or gets wrong.

WGSL's ``exp``/``log``/``sin``/``cos``/``pow``/``tanh`` take only f16/f32 (SPIR-V's GLSL.std.450
set has no 64-bit transcendentals: a driver may accept f64 and return garbage), and WGSL has no
``erf`` at all. So float64 kernels call these ports of fdlibm (exp, log, sin/cos with Cody-Waite
and Payne-Hanek argument reduction, erf/erfc, tanh, a double-double pow) built only on IEEE +,
-, *, /, sqrt, floor, ceil, ldexp and bit casts. float32 kernels use the same templates or
fdlibm's float ports where the builtins are not accurate enough (exp, log, erf, erfc, expm1,
log1p, tanh, pow); sin/cos use the builtins.

Drivers compile WGSL float math as fast-math (Mesa's NIR folds ``x != x`` to false, ``(a + b) -
b`` to ``a`` and lowers f64 ``fma`` to a multiply and an add; lavapipe's f64 ``trunc``/``round``
are wrong above 2^24): special values are tested on the bits, compensation terms go through
``cb_opaque``, products' errors use Dekker's split, and rounding is built on floor/ceil.

Templates use ``$T`` (the float type), ``$S`` (its tag in helper names), ``$INF``/``$NAN`` and
float literals with a ``_L`` suffix; ``render`` fills them in for f64 or f32. The library is
checked against mpmath in ``tests/unit/backends/webgpu/test_wgsl_math.py``.
"""

from __future__ import annotations

import re

from caramba.backends.codegen.two_over_pi import TWO_OVER_PI_24

_LIT = re.compile(r"(\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+)_L\b")

INF = {"f64": "bitcast<f64>(0x7ff0000000000000lu)", "f32": "bitcast<f32>(0x7f800000u)"}
NAN = {"f64": "bitcast<f64>(0x7ff8000000000000lu)", "f32": "bitcast<f32>(0x7fc00000u)"}


def render(template: str, tag: str) -> str:
    suffix = "lf" if tag == "f64" else "f"
    text = _LIT.sub(lambda m: m.group(1) + suffix, template)
    split = "134217729.0lf" if tag == "f64" else "4097.0f"
    text = text.replace("$INF", INF[tag]).replace("$NAN", NAN[tag]).replace("$SPLIT", split)
    return text.replace("$T", tag).replace("$S", tag)


# name -> (dependencies, f64 template, f32 template). Dependencies are helper names (without tag).
LIBRARY: dict[str, tuple[tuple[str, ...], str, str]] = {}


def _define(name: str, deps: tuple[str, ...], f64: str, f32: str | None = None) -> None:
    LIBRARY[name] = (deps, f64, f32 if f32 is not None else f64)


_define(
    "exp",
    ("special",),
    """
fn cb_exp_f64(x: f64) -> f64 {
    if (cb_isnan_$S(x)) { return x; }
    if (x > 7.09782712893383973096e+02_L) { return $INF; }
    if (x < -7.45133219101941108420e+02_L) { return 0.0_L; }
    if (abs(x) < 3.7252902984619140625e-09_L) { return 1.0_L + x; }
    let k = i32(floor(x * 1.44269504088896338700e+00_L + 0.5_L));
    let fk = f64(k);
    let hi = x - fk * 6.93147180369123816490e-01_L;
    let lo = fk * 1.90821492927058770002e-10_L;
    let r = hi - lo;
    let t = r * r;
    let c = r - t * (1.66666666666666019037e-01_L + t * (-2.77777777770155933842e-03_L
        + t * (6.61375632143793436117e-05_L + t * (-1.65339022054652515390e-06_L + t * 4.13813679705723846039e-08_L))));
    let y = 1.0_L - ((lo - (r * c) / (2.0_L - c)) - hi);
    let k1 = k / 2;
    return ldexp(ldexp(y, k1), k - k1);
}
""",
    """
fn cb_exp_f32(x: f32) -> f32 {
    // FreeBSD e_expf.c: the builtin is a few ulps off on some drivers (Vulkan allows 3 + 2|x|)
    if (cb_isnan_f32(x)) { return x; }
    if (x > 88.72283935546875_L) { return $INF; }
    if (x < -103.97208404541015625_L) { return 0.0_L; }
    if (abs(x) < 7.450580596923828e-09_L) { return 1.0_L + x; }
    let k = i32(floor(x * 1.4426950216e+00_L + 0.5_L));
    let fk = f32(k);
    let hi = x - fk * 6.9314575195e-01_L;
    let lo = fk * 1.4286067653e-06_L;
    let r = hi - lo;
    let t = r * r;
    let c = r - t * (1.6666625440e-01_L + t * -2.7667332906e-03_L);
    let y = 1.0_L - ((lo - (r * c) / (2.0_L - c)) - hi);
    let k1 = k / 2;
    return ldexp(ldexp(y, k1), k - k1);
}
""",
)

_define(
    "special",
    (),
    # Drivers optimize WGSL float math as fast-math (Mesa's NIR folds x != x to false and
    # (a + b) - b to a), so NaN/Inf tests look at the bits, and error-compensation terms pass
    # through cb_opaque: an OR with a zero the compiler cannot see (num_workgroups.z - 1).
    """
fn cb_isnan_f64(x: f64) -> bool { return (bitcast<u64>(x) & 0x7ffffffffffffffflu) > 0x7ff0000000000000lu; }
fn cb_isinf_f64(x: f64) -> bool { return (bitcast<u64>(x) & 0x7ffffffffffffffflu) == 0x7ff0000000000000lu; }
fn cb_opaque_f64(x: f64) -> f64 { return bitcast<f64>(bitcast<u64>(x) | u64(cb_opq)); }
""",
    """
fn cb_isnan_f32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn cb_isinf_f32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
fn cb_opaque_f32(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) | cb_opq); }
""",
)

_define(
    "trunc",
    (),
    # lavapipe's f64 trunc/round (and f64 -> int, which truncates) are wrong above 2^24;
    # floor and ceil are right, so these are built on them
    """
fn cb_trunc_f64(x: f64) -> f64 { return select(ceil(x), floor(x), x >= 0.0lf); }
fn cb_rint_f64(x: f64) -> f64 {
    let r = floor(x);
    let d = x - r;
    if (d > 0.5lf) { return r + 1.0lf; }
    if (d < 0.5lf) { return r; }
    return select(r, r + 1.0lf, r - 2.0lf * floor(r * 0.5lf) != 0.0lf);
}
""",
    """
fn cb_trunc_f32(x: f32) -> f32 { return trunc(x); }
fn cb_rint_f32(x: f32) -> f32 { return round(x); }
""",
)

_define(
    "frexp",
    (),
    # x = fract * 2^exp with fract in [0.5, 1), for finite nonzero x. By bits, because naga
    # types the exponent of the f64 frexp builtin inconsistently (invalid SPIR-V).
    """
fn cb_frexp_bits_f64(x: f64) -> u64 {
    let b = bitcast<u64>(x);
    if (((b >> 52u) & 0x7fflu) == 0lu) { return bitcast<u64>(x * 18014398509481984.0lf); }
    return b;
}
fn cb_frexp_exp_f64(x: f64) -> i32 {
    let adj = select(0, 54, ((bitcast<u64>(x) >> 52u) & 0x7fflu) == 0lu);
    return i32((cb_frexp_bits_f64(x) >> 52u) & 0x7fflu) - 1022 - adj;
}
fn cb_frexp_fract_f64(x: f64) -> f64 {
    return bitcast<f64>((cb_frexp_bits_f64(x) & 0x800ffffffffffffflu) | 0x3fe0000000000000lu);
}
""",
    "",
)

_define(
    "log",
    ("frexp", "special"),
    """
fn cb_log_f64(x: f64) -> f64 {
    if (cb_isnan_$S(x)) { return x; }
    if (x < 0.0_L) { return $NAN; }
    if (x == 0.0_L) { return -$INF; }
    if (cb_isinf_f64(x)) { return x; }
    var m = cb_frexp_fract_f64(x);
    var e = cb_frexp_exp_f64(x);
    if (m < 0.70710678118654752440_L) { m = m + m; e = e - 1; }
    let f = m - 1.0_L;
    let s = f / (2.0_L + f);
    let dk = f64(e);
    let z = s * s;
    let w = z * z;
    let t1 = w * (3.999999999940941908e-01_L + w * (2.222219843214978396e-01_L + w * 1.531383769920937332e-01_L));
    let t2 = z * (6.666666666666735130e-01_L + w * (2.857142874366239149e-01_L
        + w * (1.818357216161805012e-01_L + w * 1.479819860511658591e-01_L)));
    let r = t2 + t1;
    let hfsq = 0.5_L * f * f;
    return dk * 6.93147180369123816490e-01_L - ((hfsq - (s * (hfsq + r) + dk * 1.90821492927058770002e-10_L)) - f);
}
""",
    """
fn cb_log_f32(x: f32) -> f32 {
    // FreeBSD e_logf.c (the builtin loses relative accuracy near 1)
    if (cb_isnan_f32(x)) { return x; }
    if (x < 0.0_L) { return $NAN; }
    if (x == 0.0_L) { return -$INF; }
    if (cb_isinf_f32(x)) { return x; }
    var b = bitcast<u32>(x);
    var adj = 0;
    if ((b & 0x7f800000u) == 0u) { b = bitcast<u32>(x * 33554432.0_L); adj = 25; }
    var e = i32((b >> 23u) & 0xffu) - 126 - adj;
    var m = bitcast<f32>((b & 0x807fffffu) | 0x3f000000u);
    if (m < 0.70710678118654752440_L) { m = m + m; e = e - 1; }
    let f = m - 1.0_L;
    let s = f / (2.0_L + f);
    let dk = f32(e);
    let z = s * s;
    let w = z * z;
    let t1 = w * (0.40000972152_L + w * 0.24279078841_L);
    let t2 = z * (0.66666662693_L + w * 0.28498786688_L);
    let r = t2 + t1;
    let hfsq = 0.5_L * f * f;
    return dk * 6.9313812256e-01_L - ((hfsq - (s * (hfsq + r) + dk * 9.0580006145e-06_L)) - f);
}
""",
)

_define(
    "sqrt",
    ("special",),
    """
fn cb_sqrt_$S(x: $T) -> $T {
    if (x < 0.0_L) { return $NAN; }
    return sqrt(x);
}
""",
)

_define(
    "expm1",
    ("exp", "log"),
    # Kahan: (u - 1) * x / log(u) cancels the rounding error of u = exp(x)
    """
fn cb_expm1_$S(x: $T) -> $T {
    if (cb_isnan_$S(x)) { return x; }
    let u = cb_exp_$S(x);
    if (u == 1.0_L) { return x; }
    let um1 = u - 1.0_L;
    if (um1 == -1.0_L) { return -1.0_L; }
    if (cb_isinf_$S(u)) { return u; }
    return um1 * x / cb_log_$S(u);
}
""",
)

_define(
    "log1p",
    ("log",),
    """
fn cb_log1p_$S(x: $T) -> $T {
    if (cb_isnan_$S(x)) { return x; }
    if (cb_isinf_$S(x) && x > 0.0_L) { return x; }
    let u = 1.0_L + x;
    if (u == 1.0_L) { return x; }
    if (u <= 0.0_L) { return cb_log_$S(u + x - x); }
    return cb_log_$S(u) * (x / (cb_opaque_$S(u) - 1.0_L));
}
""",
)

_define(
    "tanh",
    ("expm1",),
    """
fn cb_tanh_$S(x: $T) -> $T {
    if (cb_isnan_$S(x)) { return x; }
    let ax = abs(x);
    if (ax < 2.7755575615628914e-17_L) { return x; }
    var z: $T = 1.0_L;
    if (ax < 22.0_L) {
        if (ax >= 1.0_L) {
            let t = cb_expm1_$S(2.0_L * ax);
            z = 1.0_L - 2.0_L / (t + 2.0_L);
        } else {
            let t = cb_expm1_$S(-2.0_L * ax);
            z = -t / (t + 2.0_L);
        }
    }
    return select(z, -z, x < 0.0_L);
}
""",
)

_ERF_COMMON = """
fn cb_erf_small_$S(z: $T) -> $T {
    let r = 1.28379167095512558561e-01_L + z * (-3.25042107247001499370e-01_L + z * (-2.84817495755985104766e-02_L
        + z * (-5.77027029648944159157e-03_L + z * -2.37630166566501626084e-05_L)));
    let s = 1.0_L + z * (3.97917223959155352819e-01_L + z * (6.50222499887672944485e-02_L
        + z * (5.08130628187576562776e-03_L + z * (1.32494738004321644526e-04_L + z * -3.96022827877536812320e-06_L))));
    return r / s;
}
fn cb_erf_mid_$S(s: $T) -> $T {
    let p = -2.36211856075265944077e-03_L + s * (4.14856118683748331666e-01_L + s * (-3.72207876035701323847e-01_L
        + s * (3.18346619901161753674e-01_L + s * (-1.10894694282396677476e-01_L + s * (3.54783043256182359371e-02_L
        + s * -2.16637559486879084300e-03_L)))));
    let q = 1.0_L + s * (1.06420880400844228286e-01_L + s * (5.40397917702171048937e-01_L + s * (7.18286544141962662868e-02_L
        + s * (1.26171219808761642112e-01_L + s * (1.36370839120290507362e-02_L + s * 1.19844998467991074170e-02_L)))));
    return p / q;
}
fn cb_erfc_tail_$S(ax: $T) -> $T {
    // erfc(ax) for ax >= 1.25: exp(-z*z - 0.5625) * exp((z - ax)(z + ax) + R/S) / ax
    let s = 1.0_L / (ax * ax);
    var rr: $T;
    var ss: $T;
    if (ax < 2.857142857142857_L) {
        rr = -9.86494403484714822705e-03_L + s * (-6.93858572707181764372e-01_L + s * (-1.05586262253232909814e+01_L
            + s * (-6.23753324503260060396e+01_L + s * (-1.62396669462573470355e+02_L + s * (-1.84605092906711035994e+02_L
            + s * (-8.12874355063065934246e+01_L + s * -9.81432934416914548592e+00_L))))));
        ss = 1.0_L + s * (1.96512716674392571292e+01_L + s * (1.37657754143519042600e+02_L + s * (4.34565877475229228821e+02_L
            + s * (6.45387271733267880336e+02_L + s * (4.29008140027567833386e+02_L + s * (1.08635005541779435134e+02_L
            + s * (6.57024977031928170135e+00_L + s * -6.04244152148580987438e-02_L)))))));
    } else {
        rr = -9.86494292470009928597e-03_L + s * (-7.99283237680523006574e-01_L + s * (-1.77579549177547519889e+01_L
            + s * (-1.60636384855821916062e+02_L + s * (-6.37566443368389627722e+02_L + s * (-1.02509513161107724954e+03_L
            + s * -4.83519191608651397019e+02_L)))));
        ss = 1.0_L + s * (3.03380607434824582924e+01_L + s * (3.25792512996573918826e+02_L + s * (1.53672958608443695994e+03_L
            + s * (3.19985821950859553908e+03_L + s * (2.55305040643316442583e+03_L + s * (4.74528541206955367215e+02_L
            + s * -2.24409524465858183362e+01_L))))));
    }
    let z = cb_trunclow_$S(ax);
    return cb_exp_$S(-z * z - 0.5625_L) * cb_exp_$S((z - ax) * (z + ax) + rr / ss) / ax;
}
"""

_define(
    "trunclow",
    (),
    """
fn cb_trunclow_f64(x: f64) -> f64 { return bitcast<f64>(bitcast<u64>(x) & 0xffffffff00000000lu); }
""",
    """
fn cb_trunclow_f32(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) & 0xffffe000u); }
""",
)
_define("erfcommon", ("exp", "trunclow"), _ERF_COMMON)

_define(
    "erf",
    ("erfcommon",),
    """
fn cb_erf_$S(x: $T) -> $T {
    if (cb_isnan_$S(x)) { return x; }
    let ax = abs(x);
    if (ax < 0.84375_L) {
        if (ax < 3.7252902984619140625e-09_L) { return x + 1.28379167095512586316e-01_L * x; }
        return x + x * cb_erf_small_$S(x * x);
    }
    var r: $T;
    if (ax < 1.25_L) {
        r = 8.45062911510467529297e-01_L + cb_erf_mid_$S(ax - 1.0_L);
    } else if (ax >= 6.0_L) {
        r = 1.0_L;
    } else {
        r = 1.0_L - cb_erfc_tail_$S(ax);
    }
    return select(r, -r, x < 0.0_L);
}
""",
)

_define(
    "erfc",
    ("erfcommon",),
    """
fn cb_erfc_$S(x: $T) -> $T {
    if (cb_isnan_$S(x)) { return x; }
    let ax = abs(x);
    if (ax < 0.84375_L) {
        if (ax < 1.3877787807814457e-17_L) { return 1.0_L - x; }
        let y = cb_erf_small_$S(x * x);
        if (x < 0.25_L) { return 1.0_L - (x + x * y); }
        return 0.5_L - (x * y + (x - 0.5_L));
    }
    if (ax < 1.25_L) {
        let pq = cb_erf_mid_$S(ax - 1.0_L);
        if (x >= 0.0_L) { return (1.0_L - 8.45062911510467529297e-01_L) - pq; }
        return 1.0_L + (8.45062911510467529297e-01_L + pq);
    }
    if (ax < 28.0_L) {
        if (x < -6.0_L) { return 2.0_L; }
        let r = cb_erfc_tail_$S(ax);
        return select(2.0_L - r, r, x > 0.0_L);
    }
    return select(2.0_L, 0.0_L, x > 0.0_L);
}
""",
)

# ---- sin / cos -------------------------------------------------------------------------

def _two_over_pi_words() -> list[int]:
    """2/pi's fraction bits as 32-bit words, most significant first (from the 24-bit chunks)."""
    bits = "".join(f"{c:024b}" for c in TWO_OVER_PI_24)
    return [int(bits[i : i + 32], 2) for i in range(0, len(bits) - 31, 32)]


_WORDS = _two_over_pi_words()
_W = ", ".join(f"{v}u" for v in _WORDS)


def _payne_hanek() -> str:
    """WGSL for |x| >= 2^20 pi/2: x * 2/pi mod 4 with a 192-bit window of 2/pi, in u32 limbs
    held in u64 scalars (fixed size, unrolled: drivers compile dynamic local arrays slowly)."""
    L = [
        "fn cb_tpi(q: i32) -> u32 {",
        f"    if (q < 0 || q >= {len(_WORDS)}) {{ return 0u; }}",
        "    return CB_TWO_OVER_PI[q];",
        "}",
        "fn cb_tpi_word(s: i32) -> u32 {",
        "    // the 32 bits of 2/pi from bit s on (1-based; bits at s <= 0 are zero)",
        "    let q = (s - 1 + 64) / 32 - 2;",
        "    let r = u32((s - 1 + 64) % 32);",
        "    return select((cb_tpi(q) << r) | (cb_tpi(q + 1) >> (32u - r)), cb_tpi(q), r == 0u);",
        "}",
        "fn cb_rempio2_large(x: f64) -> CbRem {",
        "    // |x| = m 2^e; terms of x * 2/pi from bits i <= e - 2 of 2/pi are multiples of 4, so",
        "    // W = bits e-1 .. e+190 (w5 most significant) and x * 2/pi = m W 2^-190 (mod 4)",
        "    let bits = bitcast<u64>(abs(x));",
        "    let e = i32((bits >> 52u) & 0x7fflu) - 1075;",
        "    let m = (bits & 0xffffffffffffflu) | 0x10000000000000lu;",
        "    let m0 = m & 0xfffffffflu;",
        "    let m1 = m >> 32u;",
    ]
    a = L.append
    for j in range(6):
        a(f"    let w{j} = u64(cb_tpi_word(e - 1 + {32 * (5 - j)}));")
    a("    var t: u64;")
    a("    var c: u64 = 0lu;")
    for j in range(6):  # m0 * W -> q0..q6
        a(f"    t = m0 * w{j} + c;")
        a(f"    let q{j} = t & 0xfffffffflu;")
        a("    c = t >> 32u;")
    a("    let q6 = c;")
    a("    c = 0lu;")
    for j in range(5):  # + m1 * W << 32 -> limbs 1..5 (limbs 6, 7 are multiples of 4)
        a(f"    t = m1 * w{j} + q{j + 1} + c;")
        a(f"    let r{j + 1} = t & 0xfffffffflu;")
        a("    c = t >> 32u;")
    a("    let r0 = q0;")
    a("    // n = bits 190, 191; fraction = the 190 bits below, shifted up by 2: h0 (most")
    a("    // significant) .. h5, value = sum h_k 2^(-32 (k + 1))")
    a("    var n = i32((r5 >> 30u) & 3lu);")
    limbs = ["r5", "r4", "r3", "r2", "r1", "r0"]
    for k in range(6):
        nxt = f" | ({limbs[k + 1]} >> 30u)" if k < 5 else ""
        a(f"    var h{k} = ((({limbs[k]} << 2u){nxt}) & 0xfffffffflu);")
    a("    var neg = false;")
    a("    if (h0 >= 0x80000000lu) {")
    a("        // fraction >= 1/2: round n up and use 1 - fraction (2^192 minus the limbs)")
    a("        n = n + 1;")
    a("        neg = true;")
    a("        c = 1lu;")
    for k in range(5, -1, -1):
        a(f"        t = (~h{k} & 0xfffffffflu) + c;")
        a(f"        h{k} = t & 0xfffffffflu;")
        a("        c = t >> 32u;")
    a("    }")
    a("    // the leading nonzero limb and the two after it (|fraction| >= 2^-62 for any double)")
    a("    var x0 = h0; var x1 = h1; var x2 = h2; var sc = -96;")
    a("    if (h0 == 0lu) { x0 = h1; x1 = h2; x2 = h3; sc = -128; }")
    a("    if (h0 == 0lu && h1 == 0lu) { x0 = h2; x1 = h3; x2 = h4; sc = -160; }")
    a("    if (h0 == 0lu && h1 == 0lu && h2 == 0lu) { x0 = h3; x1 = h4; x2 = h5; sc = -192; }")
    a("    let v = (x0 << 32u) | x1;")
    a("    let hi = ldexp(f64(v >> 11u), sc + 43);")
    a("    let lo = ldexp(f64(v & 0x7fflu) * 4294967296.0lf + f64(x2), sc);")
    a("    // times pi/2 in double-double")
    a("    let ph = cb_opaque_f64(hi * 1.5707963267948966lf);")
    a("    let pe = cb_prod_err_f64(hi, 1.5707963267948966lf, ph) + (hi * 6.123233995736766e-17lf + lo * 1.5707963267948966lf);")
    a("    var y0 = cb_opaque_f64(ph + pe);")
    a("    var y1 = pe - (y0 - ph);")
    a("    if (neg) { y0 = -y0; y1 = -y1; }")
    a("    if (x < 0.0lf) { y0 = -y0; y1 = -y1; n = -n; }")
    a("    return CbRem(n & 3, y0, y1);")
    a("}")
    return "\n".join(L)


_define(
    "ksincos",
    ("special",),
    # fdlibm __kernel_sin / __kernel_cos on [-pi/4, pi/4] (x + y, y the tail)
    """
struct CbRem { n: i32, y0: f64, y1: f64 }
fn cb_ksin_f64(x: f64, y: f64) -> f64 {
    let z = x * x;
    let w = z * z;
    let r = 8.33333333332248946124e-03lf + z * (-1.98412698298579493134e-04lf + z * 2.75573137070700676789e-06lf)
        + z * w * (-2.50507602534068634195e-08lf + z * 1.58969099521155010221e-10lf);
    let v = z * x;
    return x - ((z * (0.5lf * y - v * r) - y) - v * -1.66666666666666324348e-01lf);
}
fn cb_kcos_f64(x: f64, y: f64) -> f64 {
    let z = x * x;
    let w = z * z;
    let r = z * (4.16666666666666019037e-02lf + z * (-1.38888888888741095749e-03lf + z * 2.48015872894767294178e-05lf))
        + w * w * (-2.75573143513906633035e-07lf + z * (2.08757232129817482790e-09lf + z * -1.13596475577881948265e-11lf));
    let hz = 0.5lf * z;
    let w2 = cb_opaque_f64(1.0lf - hz);
    return w2 + (((1.0lf - w2) - hz) + (z * r - x * y));
}
""",
    "",
)

_define(
    "rempio2m",
    ("frexp", "special", "ksincos"),
    # fdlibm __ieee754_rem_pio2, Cody-Waite with 33+33+33+53 bits of pi/2: exact for |x| < 2^20 pi/2
    """
fn cb_rempio2m_f64(x: f64) -> CbRem {
    let ax = abs(x);
    if (ax <= 7.85398163397448278999e-01lf) { return CbRem(0, x, 0.0lf); }
    let fq = floor(x * 6.36619772367581382433e-01lf + 0.5lf);
    let n = i32(fq);
    var r = x - fq * 1.57079632673412561417e+00lf;
    var w = fq * 6.07710050650619224932e-11lf;
    let j = cb_frexp_exp_f64(x);
    var y0 = cb_opaque_f64(r - w);
    if (j - cb_frexp_exp_f64(y0) > 16) {
        var t = r;
        w = fq * 6.07710050630396597660e-11lf;
        r = cb_opaque_f64(t - w);
        w = fq * 2.02226624879595063154e-21lf - ((t - r) - w);
        y0 = cb_opaque_f64(r - w);
        if (j - cb_frexp_exp_f64(y0) > 49) {
            t = r;
            w = fq * 2.02226624871116645580e-21lf;
            r = cb_opaque_f64(t - w);
            w = fq * 8.47842766036889956997e-32lf - ((t - r) - w);
            y0 = cb_opaque_f64(r - w);
        }
    }
    return CbRem(n, y0, (r - y0) - w);
}
""",
    "",
)

_define(
    "rempio2",
    ("rempio2m", "prod_err"),
    # beyond 2^20 pi/2: Payne-Hanek with a 192-bit window of 2/pi in integer limbs
    f"""
const CB_TWO_OVER_PI = array<u32, {len(_WORDS)}>({_W});
""" + _payne_hanek() + """
fn cb_rempio2_f64(x: f64) -> CbRem {
    if (abs(x) >= 1.6470993291652855e+06lf) { return cb_rempio2_large(x); }
    return cb_rempio2m_f64(x);
}
""",
    "",
)


def _sincos(name: str, reduce: str, bounded: bool) -> None:
    cases = {"sin": ("cb_ksin_f64", "cb_kcos_f64", "-cb_ksin_f64", "-cb_kcos_f64"),
             "cos": ("cb_kcos_f64", "-cb_ksin_f64", "-cb_kcos_f64", "cb_ksin_f64")}[name]
    fname = f"cb_{name}{'_bounded' if bounded else ''}"
    f64 = f"""
fn {fname}_f64(x: f64) -> f64 {{
    if (cb_isnan_f64(x) || cb_isinf_f64(x)) {{ return $NAN; }}
    let r = cb_{reduce}_f64(x);
    let q = r.n & 3;
    if (q == 0) {{ return {cases[0]}(r.y0, r.y1); }}
    if (q == 1) {{ return {cases[1]}(r.y0, r.y1); }}
    if (q == 2) {{ return {cases[2]}(r.y0, r.y1); }}
    return {cases[3]}(r.y0, r.y1);
}}
"""
    f32 = f"""
fn {fname}_f32(x: f32) -> f32 {{ return {name}(x); }}
"""
    _define(f"{name}{'_bounded' if bounded else ''}", (reduce,), f64, f32)


# sin/cos for any argument; the _bounded forms only for |x| < 2^20 pi/2 (arguments a kernel
# bounds itself, e.g. Box-Muller's 2 pi u): the large-argument path costs some drivers seconds
# of compile time whenever it is inlined
for _n in ("sin", "cos"):
    _sincos(_n, "rempio2", False)
    _sincos(_n, "rempio2m", True)


# ---- pow -------------------------------------------------------------------------------

_define(
    "prod_err",
    ("special",),
    # Dekker: a * b - fl(a * b) exactly, without fma (|a|, |b| below 2^995 for f64)
    """
fn cb_split_$S(x: $T) -> vec2<$T> {
    let a = cb_opaque_$S(x);  // a literal argument would otherwise be split at compile time, wrongly
    let c = $SPLIT * a;
    let hi = c - cb_opaque_$S(c - a);
    return vec2<$T>(hi, a - hi);
}
fn cb_prod_err_$S(a: $T, b: $T, p: $T) -> $T {
    let sa = cb_split_$S(a);
    let sb = cb_split_$S(b);
    return ((sa.x * sb.x - p) + sa.x * sb.y + sa.y * sb.x) + sa.y * sb.y;
}
""",
)

_define(
    "bias",
    ("prod_err",),
    # 1 - b^n for an integer n >= 0 (Adam's bias corrections): b^n by squaring in double-double,
    # then 1 - hi - lo, so the cancellation near 1 loses nothing and the result is ~correctly rounded
    """
fn cb_ddmul_$S(ah: $T, al: $T, bh: $T, bl: $T) -> vec2<$T> {
    let p = cb_opaque_$S(ah * bh);
    let e = cb_prod_err_$S(ah, bh, p) + (ah * bl + al * bh);
    let s = cb_opaque_$S(p + e);
    return vec2<$T>(s, e - (s - p));
}
fn cb_bias_$S(b: $T, n: $T) -> $T {
    var r = vec2<$T>(1.0_L, 0.0_L);
    var x = vec2<$T>(b, 0.0_L);
    var k = n;
    loop {
        if (k <= 0.0_L) { break; }
        let half = floor(k * 0.5_L);
        if (k - 2.0_L * half == 1.0_L) { r = cb_ddmul_$S(r.x, r.y, x.x, x.y); }
        k = half;
        if (k > 0.0_L) { x = cb_ddmul_$S(x.x, x.y, x.x, x.y); }
    }
    return (1.0_L - r.x) - r.y;
}
""",
)

_define(
    "powpos",
    ("exp", "log", "frexp", "prod_err", "special"),
    # x > 0 finite, y finite: exp(y * log x) with log x as a double-double (fdlibm's log with
    # the rounding errors of f - f*f/2 and of k ln2 + that kept), so y * log x is good to
    # ~2^-100 relative and the result to about an ulp. Products' errors come from Dekker's
    # split, not fma (lavapipe lowers f64 fma to a multiply and an add); cb_opaque keeps the
    # error terms from being folded away.
    """
fn cb_logdd_f64(x: f64) -> vec2<f64> {
    var m = cb_frexp_fract_f64(x);
    var e = cb_frexp_exp_f64(x);
    if (m < 0.70710678118654752440lf) { m = m + m; e = e - 1; }
    let f = m - 1.0lf;
    let s = f / (2.0lf + f);
    let dk = f64(e);
    let z = s * s;
    let w = z * z;
    let t1 = w * (3.999999999940941908e-01lf + w * (2.222219843214978396e-01lf + w * 1.531383769920937332e-01lf));
    let t2 = z * (6.666666666666735130e-01lf + w * (2.857142874366239149e-01lf
        + w * (1.818357216161805012e-01lf + w * 1.479819860511658591e-01lf)));
    let r = t2 + t1;
    let ff = cb_opaque_f64(f * f);
    let ffe = cb_prod_err_f64(f, f, ff);
    let hfsq = 0.5lf * ff;
    let hfsq_lo = 0.5lf * ffe;
    let t = s * (hfsq + hfsq_lo + r);
    // a = f - hfsq exactly as a + a_lo (|f| >= hfsq)
    let a = cb_opaque_f64(f - hfsq);
    let a_lo = (f - a) - hfsq;
    // k ln2_hi is exact (ln2_hi has trailing zeros); add it with two-sum
    let kh = dk * 6.93147180369123816490e-01lf;
    let hi = cb_opaque_f64(kh + a);
    let bb = cb_opaque_f64(hi - kh);
    let hi_lo = (kh - (hi - bb)) + (a - bb);
    let lo = hi_lo + (a_lo - hfsq_lo + t + dk * 1.90821492927058770002e-10lf);
    let out = cb_opaque_f64(hi + lo);
    return vec2<f64>(out, lo - (out - hi));
}
fn cb_powpos_f64(x: f64, y: f64) -> f64 {
    let l = cb_logdd_f64(x);
    let p = cb_opaque_f64(y * l.x);
    if (p > 7.1e+02lf) { return $INF; }
    if (p < -7.5e+02lf) { return 0.0lf; }
    var pe = y * l.y;
    if (abs(y) < 1e+290lf) { pe = pe + cb_prod_err_f64(y, l.x, p); }
    let r = cb_exp_f64(p);
    return r + r * pe;
}
""",
    """
fn cb_powpos_f32(x: f32, y: f32) -> f32 {
    let p = y * log2(x);
    if (p > 128.0_L) { return $INF; }
    if (p < -150.0_L) { return 0.0_L; }
    return exp2(p);
}
""",
)

_define(
    "pow",
    ("powpos",),
    # C99 / NumPy special cases, then |x|**y with the sign of an odd integer power
    """
fn cb_pow_$S(x: $T, y: $T) -> $T {
    if (y == 0.0_L || x == 1.0_L) { return 1.0_L; }
    if (cb_isnan_$S(x) || cb_isnan_$S(y)) { return $NAN; }
    let ax = abs(x);
    if (cb_isinf_$S(y)) {
        if (ax == 1.0_L) { return 1.0_L; }
        if ((ax > 1.0_L) == (y > 0.0_L)) { return $INF; }
        return 0.0_L;
    }
    let yint = floor(y) == y;
    let yodd = yint && floor(y * 0.5_L) * 2.0_L != y;
    if (x == 0.0_L) {
        if (y > 0.0_L) { return select(0.0_L, x, yodd); }
        return select($INF, 1.0_L / x, yodd);
    }
    if (cb_isinf_$S(x)) {
        if (x > 0.0_L) { return select(0.0_L, x, y > 0.0_L); }
        if (y > 0.0_L) { return select($INF, x, yodd); }
        return select(0.0_L, -0.0_L, yodd);
    }
    if (x < 0.0_L && !yint) { return $NAN; }
    let r = cb_powpos_$S(ax, y);
    return select(r, -r, x < 0.0_L && yodd);
}
""",
)


def helper_texts(name: str, tag: str) -> dict[str, str]:
    """``{function name: text}`` for helper ``name`` and its dependencies, dependencies first."""
    out: dict[str, str] = {}

    def visit(n: str) -> None:
        deps, f64, f32 = LIBRARY[n]
        for d in deps:
            visit(d)
        key = f"cb_{n}_{tag}"
        if key not in out:
            text = render(f64 if tag == "f64" else f32, tag)
            if text.strip():
                out[key] = text.strip("\n")

    visit("special")
    visit(name)
    return out
