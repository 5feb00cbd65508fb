"""caramba: write a model and an experiment once, run it on any backend.

Light on import: backends and heavy toolkits load only when used.
"""

from __future__ import annotations

import os as _os
import sys as _sys

# OpenBLAS's worker threads spin for ~2^28 cycles after each multithreaded product, starving
# whatever runs next on the same cores. The cpu backend runs large products in row blocks on
# its own workers and leaves OpenBLAS's pool asleep, but products with few rows still use that
# pool. OpenBLAS reads this once, when NumPy loads it, so it can only be set here, before
# NumPy's first import; a value the user set is kept.
if "numpy" not in _sys.modules:
    _os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from caramba.errors import (
    BackendUnavailable,
    CarambaError,
    GraphError,
    PrecisionError,
    TransferError,
    UnsupportedOperation,
    VerificationError,
)
from caramba.ir import DType, Graph, ValueType, trace

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable", "CarambaError", "DType", "Graph", "GraphError", "PrecisionError",
    "TransferError", "UnsupportedOperation", "ValueType", "VerificationError", "trace", "__version__",
]


def __getattr__(name: str):
    # Lazy submodules: caramba.ops, caramba.compute, caramba.compiler, ...
    import importlib

    if name in {"ops", "compute", "compiler", "ir", "autodiff", "manifest", "backends"}:
        return importlib.import_module(f"caramba.{name}")
    raise AttributeError(f"module 'caramba' has no attribute {name!r}")
