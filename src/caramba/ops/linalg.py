"""linalg.*: matmul (NumPy semantics: batched, broadcast batch dims, rank-1 cases) and outer."""

from __future__ import annotations

from caramba.errors import GraphError
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.types import ValueType
from caramba.ops._define import broadcast_shapes, define, require_dtype, same_dtype

MATMUL_DTYPES = FLOATS | {DType.int64, DType.int32}


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise GraphError("linalg.matmul needs inputs of rank >= 1 (use math.mul for scalars)")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise GraphError(f"linalg.matmul contraction mismatch: {list(a)} @ {list(b)} ({a2[-1]} != {b2[-2]})")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul(ins: tuple[ValueType, ...], a) -> tuple[ValueType, ...]:
    d = same_dtype("linalg.matmul", ins)
    require_dtype("linalg.matmul", ins[0], MATMUL_DTYPES)
    return (ValueType(matmul_shape(ins[0].shape, ins[1].shape), d),)


matmul = define("linalg.matmul", _matmul, 2, doc="a @ b with NumPy matmul semantics")


def _outer(ins: tuple[ValueType, ...], a) -> tuple[ValueType, ...]:
    d = same_dtype("linalg.outer", ins)
    require_dtype("linalg.outer", ins[0], MATMUL_DTYPES)
    if ins[0].rank != 1 or ins[1].rank != 1:
        raise GraphError(f"linalg.outer needs two vectors, got {ins[0]} and {ins[1]}")
    return (ValueType((ins[0].shape[0], ins[1].shape[0]), d),)


outer = define("linalg.outer", _outer, 2, doc="outer product of two vectors")
