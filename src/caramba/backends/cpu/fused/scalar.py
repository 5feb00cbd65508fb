"""op -> scalar Numba expression, for the steps of generated fused kernels.

Each entry mirrors the cpu reference kernel of that op operation for operation (same
formula, same order), so a fused result equals the unfused one up to the last-ulp
differences of libm versus NumPy/SciPy transcendental functions. The dtypes listed per op are
exactly what the cpu backend declares fusable (``Capabilities.fusions``): every dtype a step
touches (inputs and output) must be listed. Pure text: no Numba import here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from caramba.ir.dtypes import DType
from caramba.ir.types import ValueType
from caramba.ops.fused import Step

F = frozenset({DType.float64, DType.float32})
I = frozenset({DType.int64, DType.int32})  # noqa: E741
B = frozenset({DType.bool})

SQRT1_2 = math.sqrt(0.5)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946

# Numba spelling of each dtype's scalar constructor.
CTOR = {
    DType.float64: "np.float64", DType.float32: "np.float32", DType.int64: "np.int64", DType.int32: "np.int32",
    DType.bool: "np.bool_",
}


def lit(value: float | int | bool, d: DType) -> str:
    """A literal of dtype ``d`` (exact: floats print with repr)."""
    if d is DType.bool:
        return "True" if value else "False"
    if d.is_int:
        return f"{CTOR[d]}({int(value)})"
    v = float(value)
    if math.isnan(v):
        text = "math.nan"
    elif math.isinf(v):
        text = "math.inf" if v > 0 else "(-math.inf)"
    else:
        text = repr(v)
    return text if d is DType.float64 else f"{CTOR[d]}({text})"


def cast(expr: str, d: DType) -> str:
    """``expr`` converted to ``d`` where Numba's scalar typing might have widened it."""
    return expr if d in (DType.float64, DType.int64, DType.bool) else f"{CTOR[d]}({expr})"


Emit = Callable[[Step, list[str], list[ValueType], ValueType], str]


@dataclass(frozen=True)
class Scalar:
    dtypes: frozenset[DType]  # every dtype a step of this op may touch
    emit: Emit


def _fmt(template: str) -> Emit:
    """``"({0} + {1})"``-style templates over the argument variables."""
    return lambda s, a, ins, out: template.format(*a)


def _with_lits(fn: Callable[[list[str], Callable[[float], str]], str]) -> Emit:
    """Templates that need literals in the step's (first input's) dtype."""

    def emit(s: Step, a: list[str], ins: list[ValueType], out: ValueType) -> str:
        d = ins[0].dtype if ins else out.dtype
        return fn(a, lambda v: lit(v, d))

    return emit


def _sign(a, L):
    x = a[0]
    return f"({L(1)} if {x} > 0 else ({L(-1)} if {x} < 0 else ({x} if {x} != {x} else {L(0)})))"


def _clamp(s: Step, a: list[str], ins: list[ValueType], out: ValueType) -> str:
    d = ins[0].dtype
    x = a[0]
    lo, hi = s.attrs["min"], s.attrs["max"]
    if lo is not None:
        x = f"fmax({x}, {lit(lo, d)})"
    if hi is not None:
        x = f"fmin({x}, {lit(hi, d)})"
    return x


def _cast(s: Step, a: list[str], ins: list[ValueType], out: ValueType) -> str:
    d = out.dtype
    if d is DType.bool:
        return f"({a[0]} != 0)"
    return f"{CTOR[d]}({a[0]})"


def _gelu(s: Step, a: list[str], ins: list[ValueType], out: ValueType) -> str:
    d, x = out.dtype, a[0]
    if s.attrs["approximate"] == "tanh":
        # kernels/activation.py: x * expit(2 * sqrt(2/pi) * (x + 0.044715 x^3)) (the sigmoid form)
        k = lit(2.0 * SQRT_2_OVER_PI, d)
        return f"({x} * expit({k} * ({x} + {lit(0.044715, d)} * {x} * {x} * {x})))"
    # float64: runtime.erfc_fast (fdlibm's erfc without branches: vectorizes, as accurate as libm);
    # other floats: the same in float64, rounded once (2.4x faster than libm's erfcf, called per element)
    if d is DType.float64:
        return f"({lit(0.5, d)} * {x} * erfc_fast(-{x} * {lit(SQRT1_2, d)}))"
    if d is DType.float32:  # runtime.erfc_f32: float32 arithmetic, twice the SIMD lanes (< 2.2 ulp)
        return f"({lit(0.5, d)} * {x} * erfc_f32(-{x} * {lit(SQRT1_2, d)}))"
    return f"({lit(0.5, d)} * {x} * {cast(f'erfc_fast(np.float64(-{x}) * {SQRT1_2!r})', d)})"


def _exp(s: Step, a: list[str], ins: list[ValueType], out: ValueType) -> str:
    # float64: runtime.exp_fast (fdlibm's reduction, branch-free: vectorizes; < 0.8 ulp against
    # mpmath, libm's scalar exp is < 0.51 and ~2.5x slower per element here); float32:
    # runtime.exp_f32 in float32 arithmetic (< 1 ulp; 0.55 against libm's 2.5-3.7 ns an element)
    return f"exp_fast({a[0]})" if out.dtype is DType.float64 else f"exp_f32({a[0]})"


def _leaky(s: Step, a: list[str], ins: list[ValueType], out: ValueType) -> str:
    x = a[0]
    return f"({x} if {x} > 0 else {lit(s.attrs['alpha'], out.dtype)} * {x})"


def _elu(s: Step, a: list[str], ins: list[ValueType], out: ValueType) -> str:
    d, x = out.dtype, a[0]
    return f"({x} if {x} > 0 else {lit(s.attrs['alpha'], d)} * math.expm1(fmin({x}, {lit(0, d)})))"


def _selu(s: Step, a: list[str], ins: list[ValueType], out: ValueType) -> str:
    d, x = out.dtype, a[0]
    inner = f"({x} if {x} > 0 else {lit(SELU_ALPHA, d)} * math.expm1(fmin({x}, {lit(0, d)})))"
    return f"({lit(SELU_SCALE, d)} * {inner})"


def _softplus(s: Step, a: list[str], ins: list[ValueType], out: ValueType) -> str:
    d, x = out.dtype, a[0]
    beta = lit(s.attrs["beta"], d)
    bx = f"({beta} * {x})"
    return f"((fmax({bx}, {lit(0, d)}) + math.log1p(math.exp(-abs({bx})))) / {beta})"


NUM = F | I
TABLE: dict[str, Scalar] = {
    "math.add": Scalar(NUM, _fmt("({0} + {1})")),
    "math.sub": Scalar(NUM, _fmt("({0} - {1})")),
    "math.mul": Scalar(NUM, _fmt("({0} * {1})")),
    "math.div": Scalar(F, _fmt("({0} / {1})")),
    "math.pow": Scalar(F, _fmt("({0} ** {1})")),
    "math.maximum": Scalar(NUM, _fmt("fmax({0}, {1})")),
    "math.minimum": Scalar(NUM, _fmt("fmin({0}, {1})")),
    "math.neg": Scalar(NUM, _fmt("(-{0})")),
    "math.abs": Scalar(NUM, _fmt("abs({0})")),
    "math.sign": Scalar(NUM, _with_lits(_sign)),
    "math.square": Scalar(NUM, _fmt("({0} * {0})")),
    "math.exp": Scalar(F, _exp),
    "math.log": Scalar(F, _fmt("math.log({0})")),
    "math.log1p": Scalar(F, _fmt("math.log1p({0})")),
    "math.expm1": Scalar(F, _fmt("math.expm1({0})")),
    "math.sqrt": Scalar(F, _fmt("math.sqrt({0})")),
    "math.rsqrt": Scalar(F, _with_lits(lambda a, L: f"({L(1)} / math.sqrt({a[0]}))")),
    "math.reciprocal": Scalar(F, _with_lits(lambda a, L: f"({L(1)} / {a[0]})")),
    "math.sin": Scalar(F, _fmt("math.sin({0})")),
    "math.cos": Scalar(F, _fmt("math.cos({0})")),
    "math.tanh": Scalar(F, _fmt("math.tanh({0})")),
    "math.erf": Scalar(F, _fmt("math.erf({0})")),
    "math.floor": Scalar(F, _fmt("np.floor({0})")),
    "math.ceil": Scalar(F, _fmt("np.ceil({0})")),
    "math.round": Scalar(F, _fmt("np.rint({0})")),
    "math.clamp": Scalar(F, _clamp),
    "math.equal": Scalar(NUM | B, _fmt("({0} == {1})")),
    "math.not_equal": Scalar(NUM | B, _fmt("({0} != {1})")),
    "math.less": Scalar(NUM | B, _fmt("({0} < {1})")),
    "math.less_equal": Scalar(NUM | B, _fmt("({0} <= {1})")),
    "math.greater": Scalar(NUM | B, _fmt("({0} > {1})")),
    "math.greater_equal": Scalar(NUM | B, _fmt("({0} >= {1})")),
    "math.logical_and": Scalar(B, _fmt("({0} and {1})")),
    "math.logical_or": Scalar(B, _fmt("({0} or {1})")),
    "math.logical_not": Scalar(B, _fmt("(not {0})")),
    "math.where": Scalar(NUM | B, _fmt("({1} if {0} else {2})")),
    "math.cast": Scalar(F | B, _cast),  # no float->int: its out-of-range results differ from NumPy
    "activation.relu": Scalar(F, _with_lits(lambda a, L: f"fmax({a[0]}, {L(0)})")),
    "activation.leaky_relu": Scalar(F, _leaky),
    "activation.gelu": Scalar(F, _gelu),
    "activation.silu": Scalar(F, _fmt("({0} * expit({0}))")),
    "activation.sigmoid": Scalar(F, _fmt("expit({0})")),
    "activation.selu": Scalar(F, _selu),
    "activation.elu": Scalar(F, _elu),
    "activation.softplus": Scalar(F, _softplus),
    "shape.broadcast_to": Scalar(NUM | B, _fmt("{0}")),
}

# Reductions a fused elementwise program may end in (generated as loops, not expressions).
REDUCTIONS: dict[str, frozenset[DType]] = {
    "reduce.sum": F, "reduce.mean": F, "reduce.max": F, "reduce.min": F, "reduce.prod": F,
}

# Dtypes the fused kernels themselves take (inputs and outputs).
KERNEL_DTYPES = F | I | B
