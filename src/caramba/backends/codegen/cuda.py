"""CUDA C: the emitter for the cuda backend (kernels compiled by NVRTC).

CUDA has every float64 math function natively, so this emitter is mostly spelling: C
declarations, the ternary operator, C casts, ``__syncthreads`` and ``extern "C" __global__``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caramba.backends.codegen.cstyle import Emitter, KernelWriter
from caramba.errors import UnsupportedOperation
from caramba.ir.dtypes import DType

_FLOAT_FNS = {
    "exp", "log", "sqrt", "expm1", "log1p", "tanh", "erf", "erfc", "sin", "cos", "pow",
    "floor", "ceil", "rint", "trunc", "fma",
}
ENTRY = "cb_main"

# 1 - b^n for an integer n >= 0 (Adam's bias corrections): b^n by squaring in double-double
# (fma gives each product's exact error), then 1 - hi - lo: ~correctly rounded near 1
_BIAS = """static __device__ T cb_bias(T b, T n) {
    T rh = 1, rl = 0, xh = b, xl = 0, k = n;
    while (k > 0) {
        T half = floor(k * (T)0.5);
        if (k - 2 * half == 1) {
            T p = rh * xh, e = fma(rh, xh, -p) + (rh * xl + rl * xh), s = p + e;
            rl = e - (s - p); rh = s;
        }
        k = half;
        if (k > 0) {
            T p = xh * xh, e = fma(xh, xh, -p) + (xh * xl + xl * xh), s = p + e;
            xl = e - (s - p); xh = s;
        }
    }
    return (1 - rh) - rl;
}"""


class CudaEmitter(Emitter):
    lang = "cuda"
    index_type = "long long"
    blas = True  # float GEMM goes to cuBLAS (a LibraryCall), not generated code
    max_workgroup = 256
    type_names = {
        DType.float64: "double", DType.float32: "float", DType.int64: "long long", DType.int32: "int", DType.bool: "bool",
    }
    storage_names = type_names
    storage_numpy = {
        DType.float64: np.dtype(np.float64), DType.float32: np.dtype(np.float32), DType.int64: np.dtype(np.int64),
        DType.int32: np.dtype(np.int32), DType.bool: np.dtype(np.bool_),
    }
    float_suffix = {DType.float64: "", DType.float32: "f"}
    int_suffix = {DType.int64: "LL", DType.int32: ""}

    def int_literal(self, v: int, d: DType) -> str:
        lo = -(2 ** (8 * d.itemsize - 1))
        if v == lo:
            return f"({v + 1}{self.int_suffix[d]} - 1)"
        return f"{v}{self.int_suffix[d]}"

    def inf(self, d: DType, negative: bool = False) -> str:
        d = self.compute_dtype(d)
        text = "__longlong_as_double(0x7ff0000000000000LL)" if d is DType.float64 else "__int_as_float(0x7f800000)"
        return f"(-{text})" if negative else text

    def nan(self, d: DType) -> str:
        d = self.compute_dtype(d)
        return "__longlong_as_double(0x7ff8000000000000LL)" if d is DType.float64 else "__int_as_float(0x7fc00000)"

    def cast(self, x: str, to, frm) -> str:
        to_c, frm_c = self.compute_dtype(to), self.compute_dtype(frm)
        if to_c == frm_c:
            return x
        if to_c is DType.bool:
            return f"({x} != {self.zero(frm)})"
        return f"(({self.t(to)})({x}))"

    def select(self, cond: str, a: str, b: str) -> str:
        return f"(({cond}) ? ({a}) : ({b}))"

    def decl(self, name: str, type_name: str, expr: str, mutable: bool) -> str:
        return f"{'' if mutable else 'const '}{type_name} {name} = {expr};"

    def for_header(self, var: str, lo: str, hi: str, step: str = "1") -> str:
        return f"for (long long {var} = {lo}; {var} < {hi}; {var} += {step})"

    def barrier(self) -> str:
        return "__syncthreads();"

    def flag_error(self, code: int) -> str:
        return f"atomicMax(cb_err, {code}u);"

    def math(self, w: KernelWriter, name: str, d, args: Sequence[str]) -> str:
        d = self.compute_dtype(d)
        joined = ", ".join(args)
        if name == "bias" and d.is_float:
            t = self.t(d)
            fname = f"cb_bias_{d.short}"
            w.need_text(fname, _BIAS.replace("T", t).replace("cb_bias", fname))
            return f"{fname}({joined})"
        if name == "abs":
            fn = {DType.float64: "fabs", DType.float32: "fabsf", DType.int64: "llabs", DType.int32: "abs"}[d]
            return f"{fn}({joined})"
        name = {"sin_bounded": "sin", "cos_bounded": "cos"}.get(name, name)
        if name in _FLOAT_FNS and d.is_float:
            return f"{name}{'f' if d is DType.float32 else ''}({joined})"
        raise UnsupportedOperation(f"CUDA kernels have no {name} for {d}")

    def function(self, name: str, params, ret, body: Sequence[str]) -> str:
        ps = ", ".join(f"{self.t(t)} {p}" for p, t in params)
        inner = "\n".join("    " + b for b in body)
        return f"static __device__ __forceinline__ {self.t(ret)} {name}({ps}) {{\n{inner}\n}}"

    def module(self, w: KernelWriter) -> str:
        out = [f"// {w.name}"]
        out.extend(w.helpers.values())
        params = []
        for p in w.params:
            if p.access == "error":
                params.append("unsigned int* __restrict__ cb_err")
            elif p.access == "params":
                params.append("const long long* __restrict__ cb_p")
            elif p.access == "read":
                params.append(f"const {self.storage(p.dtype)}* __restrict__ {p.name}")
            else:
                params.append(f"{self.storage(p.dtype)}* __restrict__ {p.name}")
        wg = w.workgroup
        out.append(f'extern "C" __global__ void __launch_bounds__({wg}) {ENTRY}({", ".join(params)}) {{')
        for name, d, n in w.shared:
            out.append(f"    __shared__ {self.t(d)} {name}[{n}];")
        out.append("    const long long group = (long long)blockIdx.x;")
        out.append("    const long long lid = (long long)threadIdx.x;")
        out.append(f"    const long long gid = group * {wg} + lid;")
        out.extend(w.lines)
        out.append("}")
        return "\n".join(out) + "\n"
