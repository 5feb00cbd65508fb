"""caramba: write a model and an experiment once, run it on any backend.

Light on import: backends and heavy toolkits load only when used.
"""

from __future__ import annotations

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
