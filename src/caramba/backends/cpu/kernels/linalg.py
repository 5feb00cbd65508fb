"""cpu kernels for linalg.* (BLAS through NumPy)."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.blas import matmul_for
from caramba.backends.cpu.kernels import FLOAT, kernel, simple
from caramba.ir.dtypes import DType

MATMUL = FLOAT | {DType.int64, DType.int32}


@kernel("linalg.matmul", MATMUL, out=True)
def _matmul(node, ins):
    return matmul_for(ins[0].shape, ins[1].shape, node.types[0].shape, node.types[0].dtype)


simple("linalg.outer", MATMUL, np.outer)
