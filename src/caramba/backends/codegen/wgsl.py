"""WGSL: the emitter for the webgpu backend.

Differences from C that matter here: ``let``/``var`` declarations with the type after the name,
``select(false_value, true_value, cond)``, conversions written as constructors, no storage type
for bool (kept as u32 in buffers), 64-bit types only with the ``shader-f64``/``shader-int64``
features, and no float64 transcendental builtins (``wgsl_math`` supplies them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caramba.backends.codegen import wgsl_math
from caramba.backends.codegen.cstyle import INDEX, Emitter, KernelWriter
from caramba.errors import UnsupportedOperation
from caramba.ir.dtypes import DType

# generic math name -> WGSL builtin valid for every float type (exact in f64 too)
_EXACT_BUILTINS = {"floor": "floor", "ceil": "ceil", "abs": "abs"}
# generic name -> (library entry, function stem) for both f32 and f64
_LIBRARY = {
    name: (name, name)
    for name in (
        "exp", "log", "sqrt", "expm1", "log1p", "tanh", "erf", "erfc", "sin", "cos", "sin_bounded", "cos_bounded",
        "pow", "trunc", "bias",
    )
} | {"rint": ("trunc", "rint")}


class WgslEmitter(Emitter):
    lang = "wgsl"
    index_type = "i32"
    max_workgroup = 256
    specialize = False  # sizes come from a params buffer: lavapipe JIT-compiles every new shader
    # float64 sin/cos carry the Payne-Hanek reduction; inlined several times in one fused kernel
    # they cost drivers (lavapipe's LLVM) tens of seconds of compile time, so they run alone
    unfused = frozenset({"math.sin", "math.cos"})

    def __init__(self, float64: bool = True, int64: bool = True, store64: bool | None = None) -> None:
        """``float64``: compute float64 values in f64 (else the float32 contract: f32);
        ``store64``: keep float64 values as f64 in buffers (default: ``float64``); with
        ``float64=False, store64=True`` kernels convert to f32 on load and back on store."""
        super().__init__(float64)
        store64 = float64 if store64 is None else store64
        if (float64 or store64) and not int64:
            raise UnsupportedOperation("WGSL float64 kernels need shader-int64 too (bit manipulation in the math library)")
        self.int64 = int64
        self.store64 = store64
        self.type_names = {DType.float64: "f64", DType.float32: "f32", DType.int32: "i32", DType.bool: "bool"}
        self.storage_names = {
            DType.float64: "f64" if store64 else "f32", DType.float32: "f32", DType.int32: "i32", DType.bool: "u32",
        }
        self.storage_numpy = {
            DType.float64: np.dtype(np.float64 if store64 else np.float32), DType.float32: np.dtype(np.float32),
            DType.int32: np.dtype(np.int32), DType.bool: np.dtype(np.uint32),
        }
        if int64:
            self.type_names[DType.int64] = "i64"
            self.storage_names[DType.int64] = "i64"
            self.storage_numpy[DType.int64] = np.dtype(np.int64)

    float_suffix = {DType.float64: "lf", DType.float32: "f"}
    int_suffix = {DType.int64: "li", DType.int32: "i"}

    def int_literal(self, v: int, d: DType) -> str:
        lo = -(2 ** (8 * d.itemsize - 1))
        if v == lo:  # the literal of the minimum is out of range before negation
            return f"({v + 1}{self.int_suffix[d]} - 1{self.int_suffix[d]})"
        return f"{v}{self.int_suffix[d]}"

    def inf(self, d: DType, negative: bool = False) -> str:
        text = wgsl_math.INF[self.t(d)]
        return f"(-{text})" if negative else text

    def nan(self, d: DType) -> str:
        return wgsl_math.NAN[self.t(d)]

    def cast(self, x: str, to, frm) -> str:
        to_c, frm_c = self.compute_dtype(to), self.compute_dtype(frm)
        if to_c == frm_c:
            return x
        if to_c is DType.bool:
            if frm_c in (DType.float64, DType.float32):  # NaN is true; compare bits (fast-math)
                return f"(({x} != {self.zero(frm)}) || {self.isnan(x, frm)})"
            return f"({x} != {self.zero(frm)})"
        if frm_c is DType.bool:
            return f"select({self.zero(to)}, {self.lit(1, to)}, {x})"
        if frm_c is DType.float64 and to_c != DType.float32:
            # truncate with floor/ceil: lavapipe's f64 trunc is wrong above 2^24 (x is a name)
            x = f"select(ceil({x}), floor({x}), {x} >= 0.0lf)"
        return f"{self.t(to)}({x})"

    # NaN/Inf by the bits: WGSL compilers treat float math as fast-math (x != x folds to false)
    def isnan(self, x: str, d) -> str:
        if self.t(d) == "f64":
            return f"((bitcast<u64>({x}) & 0x7ffffffffffffffflu) > 0x7ff0000000000000lu)"
        return f"((bitcast<u32>({x}) & 0x7fffffffu) > 0x7f800000u)"

    def isfinite(self, x: str, d) -> str:
        if self.t(d) == "f64":
            return f"((bitcast<u64>({x}) & 0x7ff0000000000000lu) != 0x7ff0000000000000lu)"
        return f"((bitcast<u32>({x}) & 0x7f800000u) != 0x7f800000u)"

    def select(self, cond: str, a: str, b: str) -> str:
        return f"select({b}, {a}, {cond})"

    u32_name = "u32"

    def cast_u32(self, x: str) -> str:
        return f"u32({x})"

    def cast_bits_u32(self, x: str, shift: int) -> str:
        return f"u32((bitcast<u64>({x}) >> {shift}u) & 0xfffffffflu)"

    def decl(self, name: str, type_name: str, expr: str, mutable: bool) -> str:
        return f"{'var' if mutable else 'let'} {name}: {type_name} = {expr};"

    def for_header(self, var: str, lo: str, hi: str, step: str = "1") -> str:
        return f"for (var {var}: i32 = {lo}; {var} < {hi}; {var} += {step})"

    def barrier(self) -> str:
        return "workgroupBarrier();"

    def load(self, buf: str, idx: str, d: DType) -> str:
        if d is DType.bool:
            return f"({buf}[{idx}] != 0u)"
        if d is DType.float64 and self.store64 and not self.float64:
            return f"f32({buf}[{idx}])"
        return f"{buf}[{idx}]"

    def store(self, buf: str, idx: str, value: str, d: DType) -> str:
        if d is DType.bool:
            return f"{buf}[{idx}] = select(0u, 1u, {value});"
        if d is DType.float64 and self.store64 and not self.float64:
            return f"{buf}[{idx}] = f64({value});"
        return f"{buf}[{idx}] = {value};"

    def flag_error(self, code: int) -> str:
        return f"atomicMax(&cb_err[0], {code}u);"

    def math(self, w: KernelWriter, name: str, d, args: Sequence[str]) -> str:
        d = self.compute_dtype(d)
        joined = ", ".join(args)
        if name in _EXACT_BUILTINS:
            return f"{_EXACT_BUILTINS[name]}({joined})"
        if name in _LIBRARY and d.is_float:
            tag = self.t(d)
            entry, stem = _LIBRARY[name]
            for fname, text in wgsl_math.helper_texts(entry, tag).items():
                w.need_text(fname, text)
            return f"cb_{stem}_{tag}({joined})"
        raise UnsupportedOperation(f"WGSL has no {name} for {d}")

    def function(self, name: str, params, ret, body: Sequence[str]) -> str:
        ps = ", ".join(f"{p}: {self.t(t)}" for p, t in params)
        inner = "\n".join("    " + b for b in body)
        return f"fn {name}({ps}) -> {self.t(ret)} {{\n{inner}\n}}"

    def module(self, w: KernelWriter) -> str:
        out = [f"// {w.name}"]
        for i, p in enumerate(w.params):
            if p.access == "error":
                out.append(f"@group(0) @binding({i}) var<storage, read_write> cb_err: array<atomic<u32>>;")
            elif p.access == "params":
                out.append(f"@group(0) @binding({i}) var<storage, read> cb_p: array<i32>;")
            else:
                mode = "read" if p.access == "read" else "read_write"
                out.append(f"@group(0) @binding({i}) var<storage, {mode}> {p.name}: array<{self.storage(p.dtype)}>;")
        for name, d, n in w.shared:
            out.append(f"var<workgroup> {name}: array<{self.t(d)}, {n}>;")
        opaque = any("cb_opq" in h for h in w.helpers.values())
        if opaque:
            out.append("var<private> cb_opq: u32;")
        out.extend(w.helpers.values())
        wg = w.workgroup
        out.append(
            f"@compute @workgroup_size({wg})\n"
            "fn main(@builtin(local_invocation_index) cb_lidx: u32, @builtin(workgroup_id) cb_wid: vec3<u32>,"
            " @builtin(num_workgroups) cb_nwg: vec3<u32>) {\n"
            "    let group: i32 = i32(cb_wid.x + cb_wid.y * cb_nwg.x);\n"
            "    let lid: i32 = i32(cb_lidx);\n"
            f"    let gid: i32 = group * {wg} + lid;"
        )
        if opaque:
            out.append("    cb_opq = cb_nwg.z - 1u;  // 0 at run time, unknown to the compiler")
        out.extend(w.lines)
        out.append("}")
        return "\n".join(out) + "\n"


def dispatch_size(groups: int, limit: int = 65535) -> tuple[int, int, int]:
    """Split a workgroup count over x and y (each at most ``limit``); the kernel linearizes them."""
    if groups <= limit:
        return (groups, 1, 1)
    y = -(-groups // limit)
    return (limit, y, 1)


__all__ = ["INDEX", "WgslEmitter", "dispatch_size"]
