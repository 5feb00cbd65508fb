"""attention.*: sdpa as tiled GEMM (scores, scaled) -> mask/causal -> row softmax -> tiled GEMM
with v, through two temporaries; rope with the float64 cos/sin tables of
caramba.ops.attention.rope_tables (every backend's tables) uploaded once at compile time."""

from __future__ import annotations

import math
from math import prod

from caramba.backends.codegen.cstyle import INDEX, broadcast_strides, offset, unravel
from caramba.backends.codegen.kernels import F, bind, builder, kernel_name, map_finish, map_writer
from caramba.backends.codegen.kernels.linalg import gemm_kernel
from caramba.backends.codegen.kernels.nn import softmax_kernel
from caramba.backends.codegen.program import Launch, Program, Slot
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType
from caramba.ops._define import broadcast_shapes
from caramba.ops.attention import rope_tables


@builder("attention.sdpa", F | frozenset({DType.bool}))
def _sdpa(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    q, k, v = ins[:3]
    d = q.dtype
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    tq, dk, tk = q.shape[-2], q.shape[-1], k.shape[-2]
    scale = node.attrs["scale"] if node.attrs["scale"] is not None else 1.0 / math.sqrt(dk)
    s_type = ValueType(batch + (tq, tk), d)
    prog = Program()
    scores = prog.temp(d, s_type.size)
    name = kernel_name(node)
    k1 = gemm_kernel(e, name + "_scores", d, batch, q.shape[:-2], k.shape[:-2], tq, dk, tk, b_transposed=True, scale=scale)
    prog.steps.append(Launch(k1, (Slot("in", 0), Slot("in", 1), scores)))
    masked = scores
    if len(ins) == 4 or node.attrs["causal"]:
        masked = prog.temp(d, s_type.size)
        w = map_writer(e, name + "_mask", s_type.size)
        params = [s_type] + ([ins[3]] if len(ins) == 4 else [])
        names, (out,) = bind(w, params, [s_type])
        value = w.let(d, w.load(names[0], "gid", d), "s")
        coords = unravel(w, "gid", s_type.shape)
        ninf = e.lowest(d)
        if len(ins) == 4:
            m = ins[3]
            mv = w.load(names[1], offset(w, coords, broadcast_strides(m.shape, s_type.shape)), m.dtype)
            value = e.select(mv, value, ninf) if m.dtype is DType.bool else f"({value} + {mv})"
        if node.attrs["causal"]:
            value = e.select(f"{coords[-1]} <= {coords[-2]} + {w.num(tk - tq)}", value, ninf)
        w.store(out, "gid", value, d)
        args = (scores,) + ((Slot("in", 3),) if len(ins) == 4 else ()) + (masked,)
        prog.steps.append(Launch(map_finish(w), args))
    probs = prog.temp(d, s_type.size)
    k2 = softmax_kernel(e, name + "_softmax", s_type, s_type.rank - 1, False)
    prog.steps.append(Launch(k2, (masked, probs)))
    k3 = gemm_kernel(e, name + "_values", d, batch, batch, v.shape[:-2], tq, tk, v.shape[-1])
    prog.steps.append(Launch(k3, (probs, Slot("in", 2), Slot("out", 0))))
    return prog


@builder("attention.rope", F)
def _rope(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    x = ins[0]
    d = x.dtype
    t_len, dim = x.shape[-2], x.shape[-1]
    half = dim // 2
    cos_t, sin_t = rope_tables(node.attrs, t_len, dim)
    prog = Program()
    cos = prog.const(cos_t.astype(d.numpy))
    sin = prog.const(sin_t.astype(d.numpy))
    w = map_writer(e, kernel_name(node), prod(x.shape))
    (xb, cb, sb), (out,) = bind(w, [x, ValueType((t_len, half), d), ValueType((t_len, half), d)], [x])
    dm, hf = w.let(INDEX, w.num(dim), "dim"), w.let(INDEX, w.num(half), "half")
    j = w.let(INDEX, f"gid % {dm}", "j")
    t = w.let(INDEX, f"(gid / {dm}) % {w.num(t_len)}", "t")
    first = f"({j} < {hf})"
    jj = w.let(INDEX, e.select(first, j, f"{j} - {hf}"), "jj")
    c = w.let(d, w.load(cb, f"{t} * {hf} + {jj}", d), "c")
    s = w.let(d, w.load(sb, f"{t} * {hf} + {jj}", d), "s")
    row = w.let(INDEX, f"gid - {j}", "row")
    x1 = w.let(d, w.load(xb, f"{row} + {jj}", d), "x1")
    x2 = w.let(d, w.load(xb, f"{row} + {jj} + {hf}", d), "x2")
    w.store(out, "gid", e.select(first, f"({x1} * {c} - {x2} * {s})", f"({x2} * {c} + {x1} * {s})"), d)
    prog.steps.append(Launch(map_finish(w), (Slot("in", 0), cos, sin, Slot("out", 0))))
    return prog

