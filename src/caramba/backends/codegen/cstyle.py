"""The C-like emitter base shared by CUDA C and WGSL (after tinygrad's ``cstyle``).

Kernel algorithms (``codegen/kernels``) are written once against ``KernelWriter``; a language is
an ``Emitter`` subclass that overrides a few attributes (type names, literal suffixes, how a
declaration, a loop, a select, a cast and a kernel header are spelled) and the table of math
functions. Everything returns text, so generated kernels are tested without a device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from caramba.backends.codegen.program import Kernel, Param
from caramba.errors import UnsupportedOperation
from caramba.ir.dtypes import DType

INDEX = "index"  # pseudo dtype for index arithmetic (int32 in WGSL, 64-bit in CUDA)
FLOAT_DTYPES = (DType.float64, DType.float32)


class Emitter:
    """Base of the C-like languages. Subclasses set the tables and override the spellings."""

    lang = "c"
    index_type = "int"
    # compute type names and buffer element types per dtype (subclasses fill these)
    type_names: dict[DType, str] = {}
    storage_names: dict[DType, str] = {}
    storage_numpy: dict[DType, np.dtype] = {}
    max_workgroup = 256
    # True: sizes, strides and offsets are baked into the kernel text (fastest code, one kernel
    # per shape). False: they are read from the kernel's params buffer (``cb_p``), so one kernel
    # serves every shape with the same structure (fewer pipelines for drivers that compile slowly).
    specialize = True
    # ops kept out of fused kernels (each stays a kernel of its own)
    unfused: frozenset[str] = frozenset()

    def __init__(self, float64: bool = True) -> None:
        # float64=False: the float32 contract, float64 graph values are computed and stored as f32
        self.float64 = float64

    # ---- types ---------------------------------------------------------------------------
    @property
    def dtypes(self) -> frozenset[DType]:
        """Dtypes this emitter can store and compute (float64 also under the float32 contract)."""
        return frozenset(self.type_names)

    @property
    def exact_storage(self) -> bool:
        """Do buffers hold float64 values exactly (so plumbing needs no precision opt-in)?"""
        return self.storage_numpy.get(DType.float64) == np.dtype(np.float64)

    def compute_dtype(self, d: "DType | str") -> "DType | str":
        if d is DType.float64 and not self.float64:
            return DType.float32
        return d

    u32_name = "unsigned int"  # random bits (counter-based draws)

    def t(self, d: "DType | str") -> str:
        if d == INDEX:
            return self.index_type
        if d == "u32":
            return self.u32_name
        d = self.compute_dtype(d)
        try:
            return self.type_names[d]
        except KeyError:
            raise UnsupportedOperation(f"{self.lang} kernels have no {d} type") from None

    def storage(self, d: DType) -> str:
        """The buffer element type holding values of dtype ``d``."""
        return self.storage_names[d]

    def host_storage(self, d: DType) -> np.dtype:
        """The NumPy dtype of a device buffer holding values of dtype ``d``."""
        return np.dtype(self.storage_numpy[d])

    def suffix(self, d: "DType | str") -> str:
        """Short type tag used in helper names (``f64``, ``f32``, ``i64`` ...)."""
        d = self.compute_dtype(d)
        return "idx" if d == INDEX else d.short

    # ---- literals ------------------------------------------------------------------------
    float_suffix: dict[DType, str] = {}
    int_suffix: dict[DType, str] = {}

    def lit(self, value: float | int | bool, d: "DType | str") -> str:
        """A literal of type ``d`` with exactly ``value`` (floats rounded to ``d`` first)."""
        d = self.compute_dtype(d)
        if d == INDEX:
            return str(int(value))
        if d is DType.bool:
            return "true" if value else "false"
        if d.is_float:
            v = float(np.array(value, dtype=d.numpy))
            if math.isnan(v):
                return self.nan(d)
            if math.isinf(v):
                return self.inf(d, v < 0)
            text = repr(v)
            if "e" not in text and "." not in text:
                text += ".0"
            return self.float_literal(text, d)
        v = int(value)
        return self.int_literal(v, d)

    def float_literal(self, text: str, d: DType) -> str:
        return f"{text}{self.float_suffix[d]}"

    def int_literal(self, v: int, d: DType) -> str:
        return f"{v}{self.int_suffix[d]}"

    def inf(self, d: DType, negative: bool = False) -> str:
        raise NotImplementedError

    def nan(self, d: DType) -> str:
        raise NotImplementedError

    def zero(self, d: "DType | str") -> str:
        return self.lit(0, d)

    def lowest(self, d: DType) -> str:
        """Identity of max: -inf for floats, the minimum for ints."""
        d = self.compute_dtype(d)
        if d.is_float:
            return self.inf(d, True)
        return self.lit(int(np.iinfo(d.numpy).min), d)

    def highest(self, d: DType) -> str:
        d = self.compute_dtype(d)
        if d.is_float:
            return self.inf(d)
        return self.lit(int(np.iinfo(d.numpy).max), d)

    # ---- expressions ---------------------------------------------------------------------
    def cast(self, x: str, to: "DType | str", frm: "DType | str") -> str:
        raise NotImplementedError

    def select(self, cond: str, a: str, b: str) -> str:
        """``cond ? a : b``."""
        raise NotImplementedError

    def cast_u32(self, x: str) -> str:
        """An index as 32 unsigned bits."""
        return f"(({self.u32_name})({x}))"

    def cast_bits_u32(self, x: str, shift: int) -> str:
        """32 bits of an int64 value, from bit ``shift``."""
        return f"(({self.u32_name})(((unsigned long long)({x})) >> {shift}))"

    def isnan(self, x: str, d: "DType | str") -> str:
        return f"isnan({x})"

    def isfinite(self, x: str, d: "DType | str") -> str:
        return f"isfinite({x})"

    # ---- statements ----------------------------------------------------------------------
    def decl(self, name: str, type_name: str, expr: str, mutable: bool) -> str:
        raise NotImplementedError

    def for_header(self, var: str, lo: str, hi: str, step: str = "1") -> str:
        raise NotImplementedError

    def barrier(self) -> str:
        raise NotImplementedError

    def load(self, buf: str, idx: str, d: DType) -> str:
        return f"{buf}[{idx}]"

    def store(self, buf: str, idx: str, value: str, d: DType) -> str:
        return f"{buf}[{idx}] = {value};"

    def flag_error(self, code: int) -> str:
        raise NotImplementedError

    # ---- math ----------------------------------------------------------------------------
    def math(self, w: "KernelWriter", name: str, d: "DType | str", args: Sequence[str]) -> str:
        """A call to the math function ``name`` for type ``d``: exp, log, expm1, log1p, sqrt, sin,
        cos (``sin_bounded``/``cos_bounded`` for |x| < 2^20 pi/2), tanh, erf, erfc, pow, floor,
        ceil, rint, trunc, abs, fma, and ``bias`` (1 - b**n for an integer n)."""
        raise NotImplementedError

    # ---- functions and modules -----------------------------------------------------------
    def function(self, name: str, params: Sequence[tuple[str, "DType | str"]], ret: "DType | str", body: Sequence[str]) -> str:
        raise NotImplementedError

    def module(self, w: "KernelWriter") -> str:
        raise NotImplementedError


# Generic helper functions written once with emitter primitives and rendered per language.
# name -> (dependencies, builder(emitter, dtype) -> function text)
HelperBuilder = Callable[[Emitter, DType], str]
HELPERS: dict[str, HelperBuilder] = {}


def helper(name: str) -> Callable[[HelperBuilder], HelperBuilder]:
    def deco(fn: HelperBuilder) -> HelperBuilder:
        HELPERS[name] = fn
        return fn

    return deco


@helper("max")
def _max(e: Emitter, d: DType) -> str:
    # NaN-propagating like numpy.maximum (the languages' own max leave NaN unspecified)
    cond = f"(a > b) || {e.isnan('a', d)}" if d.is_float else "a > b"
    return e.function(f"cb_max_{e.suffix(d)}", [("a", d), ("b", d)], d, [f"return {e.select(cond, 'a', 'b')};"])


@helper("min")
def _min(e: Emitter, d: DType) -> str:
    cond = f"(a < b) || {e.isnan('a', d)}" if d.is_float else "a < b"
    return e.function(f"cb_min_{e.suffix(d)}", [("a", d), ("b", d)], d, [f"return {e.select(cond, 'a', 'b')};"])


class KernelWriter:
    """Builds one kernel: parameters, shared arrays, body lines and the helpers it calls.

    In the body, ``gid`` is the global thread index, ``lid`` the index within the workgroup
    and ``group`` the workgroup index (all of the index type).
    """

    def __init__(self, e: Emitter, name: str, workgroup: int = 64) -> None:
        self.e = e
        self.name = name
        self.workgroup = workgroup
        self.params: list[Param] = []
        self.shared: list[tuple[str, DType, int]] = []
        self.lines: list[str] = []
        self.helpers: dict[str, str] = {}  # function name -> text, in dependency order
        self.values: list[int] = []  # the params buffer, when the emitter does not specialize
        self._depth = 1
        self._names: dict[str, int] = {}

    # ---- declarations --------------------------------------------------------------------
    def num(self, v: int) -> str:
        """An integer size, stride or offset: a literal, or a slot of the params buffer."""
        if self.e.specialize:
            return str(int(v))
        self.values.append(int(v))
        return f"cb_p[{len(self.values) - 1}]"

    def param(self, name: str, d: DType | None, access: str) -> str:
        self.params.append(Param(name, d, access))
        return name

    def error_flag(self) -> str:
        if not any(p.access == "error" for p in self.params):
            self.params.append(Param("cb_err", None, "error"))
        return "cb_err"

    def shared_array(self, d: "DType | str", n: int, stem: str = "sh") -> str:
        name = self.fresh(stem)
        self.shared.append((name, d, n))
        return name

    def fresh(self, stem: str) -> str:
        taken = {p.name for p in self.params}
        while True:
            n = self._names.get(stem, 0)
            self._names[stem] = n + 1
            name = f"{stem}{n}"
            if name not in taken:
                return name

    # ---- statements ----------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("    " * self._depth + text)

    def let(self, d: "DType | str", expr: str, stem: str = "t") -> str:
        name = self.fresh(stem)
        self.line(self.e.decl(name, self.e.t(d), expr, False))
        return name

    def var(self, d: "DType | str", expr: str, stem: str = "v") -> str:
        name = self.fresh(stem)
        self.line(self.e.decl(name, self.e.t(d), expr, True))
        return name

    def set(self, name: str, expr: str) -> None:
        self.line(f"{name} = {expr};")

    def store(self, buf: str, idx: str, value: str, d: DType) -> None:
        self.line(self.e.store(buf, idx, value, d))

    def load(self, buf: str, idx: str, d: DType) -> str:
        return self.e.load(buf, idx, d)

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.line(header + " {")
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            self.line("}")

    @contextmanager
    def loop(self, lo: str, hi: str, step: str = "1", stem: str = "i") -> Iterator[str]:
        var = self.fresh(stem)
        with self.block(self.e.for_header(var, lo, hi, step)):
            yield var

    def if_(self, cond: str):
        return self.block(f"if ({cond})")

    def else_(self):
        # closes the previous block's brace on the same logical level
        self.lines[-1] = self.lines[-1] + " else {"
        self._depth += 1

        @contextmanager
        def cm() -> Iterator[None]:
            try:
                yield
            finally:
                self._depth -= 1
                self.line("}")

        return cm()

    def barrier(self) -> None:
        self.line(self.e.barrier())

    # ---- expressions ---------------------------------------------------------------------
    def fn(self, name: str, d: "DType | str", *args: str) -> str:
        return self.e.math(self, name, d, args)

    def need(self, key: str, d: DType) -> str:
        """Include the generic helper ``key`` for type ``d``; returns its function name."""
        fname = f"cb_{key}_{self.e.suffix(d)}"
        if fname not in self.helpers:
            self.helpers[fname] = HELPERS[key](self.e, self.e.compute_dtype(d))
        return fname

    def need_text(self, fname: str, text: str) -> None:
        if fname not in self.helpers:
            self.helpers[fname] = text

    def max(self, d: DType, a: str, b: str) -> str:
        return f"{self.need('max', d)}({a}, {b})"

    def min(self, d: DType, a: str, b: str) -> str:
        return f"{self.need('min', d)}({a}, {b})"

    # ---- finishing -----------------------------------------------------------------------
    def finish(self, groups: int) -> Kernel:
        if self.values:
            self.params.append(Param("cb_p", None, "params"))
        source = self.e.module(self)
        return Kernel(self.name, self.e.lang, source, tuple(self.params), self.workgroup, int(groups), tuple(self.values))


# ---- index arithmetic shared by every kernel family -------------------------------------


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def broadcast_strides(in_shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Strides to read an input broadcast to ``out_shape`` (0 along broadcast axes)."""
    own = contiguous_strides(in_shape)
    pad = len(out_shape) - len(in_shape)
    return tuple(
        0 if i < pad or in_shape[i - pad] == 1 else own[i - pad] for i in range(len(out_shape))
    )


def unravel(w: KernelWriter, flat: str, shape: Sequence[int], stem: str = "c") -> list[str]:
    """Coordinates of the row-major ``flat`` index in ``shape`` (literal 0 for size-1 axes)."""
    coords = ["0"] * len(shape)
    rem = flat
    live = [i for i, s in enumerate(shape) if s != 1]
    for k, i in enumerate(reversed(live)):
        if k == len(live) - 1:
            coords[i] = w.let(INDEX, rem, stem)
        else:
            n = w.num(shape[i])
            coords[i] = w.let(INDEX, f"{rem} % {n}", stem)
            rem = w.let(INDEX, f"{rem} / {n}", "r")
    return coords


def offset(w: KernelWriter, coords: Sequence[str], strides: Sequence[int], base: int = 0) -> str:
    """``base + sum(coord * stride)`` as text, skipping zero terms."""
    terms = [w.num(base)] if base else []
    for c, s in zip(coords, strides, strict=True):
        if s == 0 or c == "0":
            continue
        terms.append(c if s == 1 else f"{c} * {w.num(s)}")
    if not terms:
        return "0"
    return " + ".join(terms)
