"""cpu kernels for linalg.* (BLAS through NumPy)."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.kernels import FLOAT, simple
from caramba.ir.dtypes import DType

MATMUL = FLOAT | {DType.int64, DType.int32}

simple("linalg.matmul", MATMUL, np.matmul)
simple("linalg.outer", MATMUL, np.outer)
