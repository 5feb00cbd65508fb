"""random.* and nn.dropout: counter-based draws. Element i of a draw is a pure function of
(seed, key, i), so results are reproducible for a seed on a backend, independent of how
threads are scheduled, and need no state. Bits come from chained murmur3 finalizers over
32-bit words (u32 arithmetic only); float64 takes 53 bits from two words, float32 24 bits.
The streams differ from the cpu backend's Philox draws (DESIGN §7: reproducible per backend)."""

from __future__ import annotations

import math
from math import prod

from caramba.backends.codegen.cstyle import KernelWriter
from caramba.backends.codegen.kernels import F, bind, builder, kernel_name, map_finish, map_writer, single
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType

MASK32 = 0xFFFFFFFF
U32 = "u32"
GOLDEN = 0x9E3779B9


def _fmix(w: KernelWriter, h: str) -> str:
    """murmur3's 32-bit finalizer (a bijection with full avalanche)."""
    h = w.let(U32, f"{h} ^ ({h} >> 16u)", "h")
    h = w.let(U32, f"{h} * 0x85ebca6bu", "h")
    h = w.let(U32, f"{h} ^ ({h} >> 13u)", "h")
    h = w.let(U32, f"{h} * 0xc2b2ae35u", "h")
    return w.let(U32, f"{h} ^ ({h} >> 16u)", "h")


def _base(w: KernelWriter, seed: int, key: str | None) -> str:
    """The stream's base word from the seed (64 bits) and the optional int64 key."""
    s = seed & ((1 << 64) - 1)
    h = _fmix(w, f"{s & MASK32}u")
    h = _fmix(w, f"({h} ^ {s >> 32}u)")
    if key is not None:
        k = w.let(DType.int64, key, "key")
        lo = w.e.cast_bits_u32(k, 0)
        hi = w.e.cast_bits_u32(k, 32)
        h = _fmix(w, f"({h} ^ {lo})")
        h = _fmix(w, f"({h} ^ {hi} ^ {GOLDEN}u)")
    return h


def _word(w: KernelWriter, base: str, idx: str, stream: int) -> str:
    """32 random bits for element ``idx`` (an index-typed expression) of ``stream``."""
    i = w.let(U32, w.e.cast_u32(idx), "i")
    h = _fmix(w, f"({base} ^ {i})")
    return _fmix(w, f"({h} + {(GOLDEN * (stream + 1)) & MASK32}u)")


def uniform01(w: KernelWriter, d: DType, base: str, idx: str, stream: int = 0) -> str:
    """A value of dtype ``d`` uniform on [0, 1): 53 (float64) or 24 (float32) random bits."""
    e = w.e
    a = _word(w, base, idx, 2 * stream)
    if e.compute_dtype(d) is DType.float64:
        b = _word(w, base, idx, 2 * stream + 1)
        hi = e.cast(f"({a} >> 6u)", d, U32)
        lo = e.cast(f"({b} >> 5u)", d, U32)
        return w.let(d, f"(({hi} * {e.lit(2.0**27, d)} + {lo}) * {e.lit(2.0**-53, d)})", "u")
    return w.let(d, f"({e.cast(f'({a} >> 8u)', d, U32)} * {e.lit(2.0**-24, d)})", "u")


def _key(node: Node, names: list[str], w: KernelWriter, k: int) -> str | None:
    return w.load(names[k], "0", DType.int64) if len(node.inputs) > k else None


@builder("random.uniform", F | frozenset({DType.int64}))
def _uniform(node: Node, ins: tuple[ValueType, ...], e):
    a = node.attrs
    out_t = node.types[0]
    d = out_t.dtype
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    names, (out,) = bind(w, ins, [out_t])
    u = uniform01(w, d, _base(w, a["seed"], _key(node, names, w, 0)), "gid")
    lo, hi = a["low"], a["high"]
    value = f"({e.lit(lo, d)} + {e.lit(hi - lo, d)} * {u})"
    # rounding may land exactly on high; keep the draw inside [low, high)
    v = w.let(d, value, "v")
    w.store(out, "gid", e.select(f"{v} < {e.lit(hi, d)}", v, e.lit(lo, d)), d)
    return single(map_finish(w), len(ins))


@builder("random.normal", F | frozenset({DType.int64}))
def _normal(node: Node, ins: tuple[ValueType, ...], e):
    a = node.attrs
    out_t = node.types[0]
    d = out_t.dtype
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    names, (out,) = bind(w, ins, [out_t])
    base = _base(w, a["seed"], _key(node, names, w, 0))
    # Box-Muller with u1 in (0, 1]
    u1 = w.let(d, f"({e.lit(1, d)} - {uniform01(w, d, base, 'gid', 0)})", "u1")
    u2 = uniform01(w, d, base, "gid", 1)
    r = w.let(d, w.fn("sqrt", d, f"({e.lit(-2.0, d)} * {w.fn('log', d, u1)})"), "r")
    z = w.let(d, f"({r} * {w.fn('cos_bounded', d, f'({e.lit(2 * math.pi, d)} * {u2})')})", "z")
    w.store(out, "gid", f"({e.lit(a['mean'], d)} + {e.lit(a['std'], d)} * {z})", d)
    return single(map_finish(w), len(ins))


@builder("random.bernoulli", frozenset({DType.bool, DType.int64}))
def _bernoulli(node: Node, ins: tuple[ValueType, ...], e):
    a = node.attrs
    out_t = node.types[0]
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    names, (out,) = bind(w, ins, [out_t])
    base = _base(w, a["seed"], _key(node, names, w, 0))
    # p as a 32-bit threshold: exact for p = 0 and p = 1
    p = a["p"]
    word = _word(w, base, "gid", 0)
    if p >= 1.0:
        value = "true"
    else:
        value = f"({word} < {min(int(p * 2**32), MASK32)}u)"
    w.store(out, "gid", value, DType.bool)
    return single(map_finish(w), len(ins))


@builder("nn.dropout", F | frozenset({DType.int64}))
def _dropout(node: Node, ins: tuple[ValueType, ...], e):
    a = node.attrs
    x_t = ins[0]
    d = x_t.dtype
    w = map_writer(e, kernel_name(node), prod(x_t.shape))
    names, (out,) = bind(w, ins, [x_t])
    x = w.load(names[0], "gid", d)
    rate = a["rate"]
    if rate == 0.0:
        w.store(out, "gid", x, d)
    else:
        base = _base(w, a["seed"], _key(node, names, w, 1))
        u = uniform01(w, d, base, "gid")
        scale = e.lit(1.0 / (1.0 - rate), d)
        w.store(out, "gid", e.select(f"{u} >= {e.lit(rate, d)}", f"({x} * {scale})", e.lit(0, d)), d)
    return single(map_finish(w), len(ins))
