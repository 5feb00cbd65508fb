"""linalg.*: matmul (NumPy semantics: batched, broadcast batch dims, vectors) and outer."""

from __future__ import annotations

from ..harness import BOOL, F32, F64, FLOATS, I8, I32, I64, Case, arg, bad, row, tol, uniform
from ..reference import elementwise, matmul_loop
from ._helpers import label

MATMUL = FLOATS | {I64, I32}
GEN = uniform(-2, 2, -3, 3)
# error bound of a dot product grows with sum_k |a_ik b_kj| (the reference's scale)
DOT = tol(1, 8, float16=(1, 32))

MATMUL_SHAPES = (
    ((1, 1), (1, 1)),
    ((7, 7), (7, 7)),
    ((64, 64), (64, 64)),
    ((3, 5), (5, 7)),
    ((1, 1024), (1024, 1)),
    ((5,), (5,)),
    ((5,), (5, 3)),
    ((3, 5), (5,)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((3, 4), (2, 4, 5)),
    ((4,), (2, 4, 3)),
    ((3, 0), (0, 4)),
    ((0, 3), (3, 2)),
)

ROWS = [
    row(
        "linalg.matmul",
        MATMUL,
        [Case(f"{label(a)}_{label(b)}", (arg(a, GEN), arg(b, GEN)), {}, lambda x, y: matmul_loop(x, y), DOT) for a, b in MATMUL_SHAPES],
        [
            bad("contraction mismatch: \\[3, 4\\] @ \\[5, 6\\] \\(4 != 5\\)", ((3, 4), F64), ((5, 6), F64)),
            bad("needs inputs of rank >= 1", ((), F64), ((3,), F64)),
            bad("shapes \\[2\\] and \\[3\\] do not broadcast", ((2, 3, 4), F64), ((3, 4, 5), F64)),
            bad("needs inputs of one dtype", ((3, 4), F64), ((4, 5), F32)),
            bad("does not accept input of dtype bool", ((3, 4), BOOL), ((4, 5), BOOL)),
            bad("does not accept input of dtype int8", ((3, 4), I8), ((4, 5), I8)),
        ],
    ),
    row(
        "linalg.outer",
        MATMUL,
        [
            Case(f"{label(a)}x{label(b)}", (arg(a, GEN), arg(b, GEN)), {}, lambda x, y: elementwise(lambda p, q: p * q)(x[:, None], y[None, :]), tol(0, 0))
            for a, b in (((1,), (1,)), ((7,), (5,)), ((64,), (64,)), ((1024,), (3,)), ((0,), (3,)))
        ],
        [
            bad("needs two vectors", ((3, 1), F64), ((3,), F64)),
            bad("needs inputs of one dtype", ((3,), I64), ((3,), I32)),
        ],
    ),
]
