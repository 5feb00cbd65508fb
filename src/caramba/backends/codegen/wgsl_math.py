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

from caramba.backends.codegen.two_over_pi import PIO2_24, TWO_OVER_PI_24

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

_TWO_OVER_PI = ", ".join(f"{v}.0lf" for v in TWO_OVER_PI_24)
_PIO2 = ", ".join(f"{v!r}lf" for v in PIO2_24)

_define(
    "rempio2",
    ("frexp", "special"),
    # fdlibm __ieee754_rem_pio2: Cody-Waite with 33+33+33+53 bits of pi/2 up to 2^20 * pi/2,
    # Payne-Hanek (fdlibm __kernel_rem_pio2 with 24-bit chunks of 2/pi) beyond.
    f"""
struct CbRem {{ n: i32, y0: f64, y1: f64 }}
var<private> CB_TWO_OVER_PI: array<f64, {len(TWO_OVER_PI_24)}> = array<f64, {len(TWO_OVER_PI_24)}>({_TWO_OVER_PI});
var<private> CB_PIO2: array<f64, 8> = array<f64, 8>({_PIO2});
fn cb_rempio2_large(x: f64) -> CbRem {{
    // |x| = sum_i tx[i] * 2^(e0 - 24 i), tx[i] 24-bit integers
    let ax = abs(x);
    let e0 = cb_frexp_exp_f64(ax) - 24;
    var z = ldexp(ax, -e0);
    var tx: array<f64, 3>;
    for (var i = 0; i < 2; i++) {{
        tx[i] = floor(z);
        z = (z - tx[i]) * 16777216.0lf;
    }}
    tx[2] = z;
    var nx = 3;
    while (nx > 1 && tx[nx - 1] == 0.0lf) {{ nx = nx - 1; }}
    let jk = 4;
    let jx = nx - 1;
    var jv = (e0 - 3) / 24;
    if (jv < 0) {{ jv = 0; }}
    let q0 = e0 - 24 * (jv + 1);
    var f: array<f64, 20>;
    var j = jv - jx;
    let m = jx + jk;
    for (var i = 0; i <= m; i++) {{
        if (j < 0) {{ f[i] = 0.0lf; }} else {{ f[i] = CB_TWO_OVER_PI[j]; }}
        j = j + 1;
    }}
    var q: array<f64, 20>;
    for (var i = 0; i <= jk; i++) {{
        var fw = 0.0lf;
        for (var jj = 0; jj <= jx; jj++) {{ fw += tx[jj] * f[jx + i - jj]; }}
        q[i] = fw;
    }}
    var jz = jk;
    var iq: array<i32, 20>;
    var n: i32 = 0;
    var ih: i32 = 0;
    var zz: f64 = 0.0lf;
    var fq: array<f64, 20>;
    loop {{
        // distill q[] into iq[] in reverse order
        zz = q[jz];
        for (var i = 0; i < jz; i++) {{
            let fw = floor(ldexp(zz, -24));
            iq[i] = i32(zz - ldexp(fw, 24));
            zz = q[jz - 1 - i] + fw;
        }}
        zz = ldexp(zz, q0);
        zz = zz - 8.0lf * floor(zz * 0.125lf);
        n = i32(floor(zz));
        zz = zz - f64(n);
        ih = 0;
        if (q0 > 0) {{
            let i = iq[jz - 1] >> u32(24 - q0);
            n = n + i;
            iq[jz - 1] = iq[jz - 1] - (i << u32(24 - q0));
            ih = iq[jz - 1] >> u32(23 - q0);
        }} else if (q0 == 0) {{
            ih = iq[jz - 1] >> 23u;
        }} else if (zz >= 0.5lf) {{
            ih = 2;
        }}
        if (ih > 0) {{
            n = n + 1;
            var carry = 0;
            for (var i = 0; i < jz; i++) {{
                let jw = iq[i];
                if (carry == 0) {{
                    if (jw != 0) {{ carry = 1; iq[i] = 0x1000000 - jw; }}
                }} else {{
                    iq[i] = 0xffffff - jw;
                }}
            }}
            if (q0 > 0) {{
                if (q0 == 1) {{ iq[jz - 1] = iq[jz - 1] & 0x7fffff; }}
                if (q0 == 2) {{ iq[jz - 1] = iq[jz - 1] & 0x3fffff; }}
            }}
            if (ih == 2) {{
                zz = 1.0lf - zz;
                if (carry != 0) {{ zz = zz - ldexp(1.0lf, q0); }}
            }}
        }}
        if (zz == 0.0lf) {{
            var jw = 0;
            for (var i = jz - 1; i >= jk; i--) {{ jw = jw | iq[i]; }}
            if (jw == 0) {{
                // need more terms of 2/pi
                var k = 1;
                while (iq[jk - k] == 0) {{ k = k + 1; }}
                for (var i = jz + 1; i <= jz + k; i++) {{
                    f[jx + i] = CB_TWO_OVER_PI[jv + i];
                    var fw = 0.0lf;
                    for (var jj = 0; jj <= jx; jj++) {{ fw += tx[jj] * f[jx + i - jj]; }}
                    q[i] = fw;
                }}
                jz = jz + k;
                continue;
            }}
        }}
        break;
    }}
    var q0b = q0;
    if (zz == 0.0lf) {{
        jz = jz - 1;
        q0b = q0b - 24;
        while (iq[jz] == 0) {{ jz = jz - 1; q0b = q0b - 24; }}
    }} else {{
        zz = ldexp(zz, -q0b);
        if (zz >= 16777216.0lf) {{
            let fw = floor(ldexp(zz, -24));
            iq[jz] = i32(zz - ldexp(fw, 24));
            jz = jz + 1;
            q0b = q0b + 24;
            iq[jz] = i32(fw);
        }} else {{
            iq[jz] = i32(floor(zz));
        }}
    }}
    var fw = ldexp(1.0lf, q0b);
    for (var i = jz; i >= 0; i--) {{
        q[i] = fw * f64(iq[i]);
        fw = fw * 5.9604644775390625e-08lf;
    }}
    for (var i = jz; i >= 0; i--) {{
        var acc = 0.0lf;
        for (var k = 0; k <= jk && k <= jz - i; k++) {{ acc += CB_PIO2[k] * q[i + k]; }}
        fq[jz - i] = acc;
    }}
    var s = 0.0lf;
    for (var i = jz; i >= 0; i--) {{ s += fq[i]; }}
    var y0 = select(-s, s, ih == 0);
    s = fq[0] - cb_opaque_f64(s);
    for (var i = 1; i <= jz; i++) {{ s += fq[i]; }}
    var y1 = select(-s, s, ih == 0);
    if (x < 0.0lf) {{ y0 = -y0; y1 = -y1; n = -n; }}
    return CbRem(n & 7, y0, y1);
}}
fn cb_rempio2_f64(x: f64) -> CbRem {{
    let ax = abs(x);
    if (ax <= 7.85398163397448278999e-01lf) {{ return CbRem(0, x, 0.0lf); }}
    if (ax >= 1.6470993291652855e+06lf) {{ return cb_rempio2_large(x); }}
    let fq = floor(x * 6.36619772367581382433e-01lf + 0.5lf);
    let n = i32(fq);
    var r = x - fq * 1.57079632673412561417e+00lf;
    var w = fq * 6.07710050650619224932e-11lf;
    let j = cb_frexp_exp_f64(x);
    var y0 = cb_opaque_f64(r - w);
    if (j - cb_frexp_exp_f64(y0) > 16) {{
        var t = r;
        w = fq * 6.07710050630396597660e-11lf;
        r = cb_opaque_f64(t - w);
        w = fq * 2.02226624879595063154e-21lf - ((t - r) - w);
        y0 = cb_opaque_f64(r - w);
        if (j - cb_frexp_exp_f64(y0) > 49) {{
            t = r;
            w = fq * 2.02226624871116645580e-21lf;
            r = cb_opaque_f64(t - w);
            w = fq * 8.47842766036889956997e-32lf - ((t - r) - w);
            y0 = cb_opaque_f64(r - w);
        }}
    }}
    return CbRem(n, y0, (r - y0) - w);
}}
fn cb_ksin_f64(x: f64, y: f64) -> f64 {{
    let z = x * x;
    let w = z * z;
    let r = 8.33333333332248946124e-03lf + z * (-1.98412698298579493134e-04lf + z * 2.75573137070700676789e-06lf)
        + z * w * (-2.50507602534068634195e-08lf + z * 1.58969099521155010221e-10lf);
    let v = z * x;
    return x - ((z * (0.5lf * y - v * r) - y) - v * -1.66666666666666324348e-01lf);
}}
fn cb_kcos_f64(x: f64, y: f64) -> f64 {{
    let z = x * x;
    let w = z * z;
    let r = z * (4.16666666666666019037e-02lf + z * (-1.38888888888741095749e-03lf + z * 2.48015872894767294178e-05lf))
        + w * w * (-2.75573143513906633035e-07lf + z * (2.08757232129817482790e-09lf + z * -1.13596475577881948265e-11lf));
    let hz = 0.5lf * z;
    let w2 = cb_opaque_f64(1.0lf - hz);
    return w2 + (((1.0lf - w2) - hz) + (z * r - x * y));
}}
""",
    "",
)

_define(
    "sin",
    ("rempio2",),
    """
fn cb_sin_f64(x: f64) -> f64 {
    if (cb_isnan_f64(x) || cb_isinf_f64(x)) { return $NAN; }
    let r = cb_rempio2_f64(x);
    let q = r.n & 3;
    if (q == 0) { return cb_ksin_f64(r.y0, r.y1); }
    if (q == 1) { return cb_kcos_f64(r.y0, r.y1); }
    if (q == 2) { return -cb_ksin_f64(r.y0, r.y1); }
    return -cb_kcos_f64(r.y0, r.y1);
}
""",
    """
fn cb_sin_f32(x: f32) -> f32 { return sin(x); }
""",
)

_define(
    "cos",
    ("rempio2",),
    """
fn cb_cos_f64(x: f64) -> f64 {
    if (cb_isnan_f64(x) || cb_isinf_f64(x)) { return $NAN; }
    let r = cb_rempio2_f64(x);
    let q = r.n & 3;
    if (q == 0) { return cb_kcos_f64(r.y0, r.y1); }
    if (q == 1) { return -cb_ksin_f64(r.y0, r.y1); }
    if (q == 2) { return -cb_kcos_f64(r.y0, r.y1); }
    return cb_ksin_f64(r.y0, r.y1);
}
""",
    """
fn cb_cos_f32(x: f32) -> f32 { return cos(x); }
""",
)

# ---- pow -------------------------------------------------------------------------------

_define(
    "prod_err",
    ("special",),
    # Dekker: a * b - fl(a * b) exactly, without fma (|a|, |b| below 2^995 for f64)
    """
fn cb_split_$S(a: $T) -> vec2<$T> {
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
