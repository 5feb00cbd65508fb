"""The cpu backend's kernel table: op ID -> factory(node, input types) -> callable.

A factory runs once at compile time and returns a plain callable taking NumPy arrays and
returning an array (or a tuple for multi-output ops). Attributes are read at compile time,
never per call. The dtypes registered with a kernel are what the cpu capability table claims.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from caramba.ir.dtypes import HOST_FLOATS, INTS, DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType

Kernel = Callable[..., Any]
KernelFactory = Callable[[Node, tuple[ValueType, ...]], Kernel]

KERNELS: dict[str, KernelFactory] = {}
DTYPES: dict[str, frozenset[DType]] = {}
# Ops whose kernels take the output buffer(s) as trailing positional arguments and write the
# result there (ufuncs: ``np.add(a, b, out)``); the memory planner places their results.
OUT: set[str] = set()

FLOAT = HOST_FLOATS  # bfloat16 has no NumPy arithmetic: not claimed
NUM = HOST_FLOATS | INTS
ANY = NUM | {DType.bool}


@functools.cache
def special() -> Any:
    """``scipy.special`` (erf, erfc, expit), imported on first use: it takes ~0.25 s to import,
    which a run whose graph never calls these kernels should not pay."""
    import scipy.special

    return scipy.special


def kernel(op_id: str, dtypes: frozenset[DType], *, out: bool = False) -> Callable[[KernelFactory], KernelFactory]:
    """Register ``factory`` as the kernel of ``op_id`` for ``dtypes``. With ``out=True`` the
    kernel it makes is called as ``k(*inputs, *outputs)`` and writes into ``outputs`` (arrays of
    exactly the node's output types, never aliasing an input); its return value is ignored."""

    def deco(factory: KernelFactory) -> KernelFactory:
        if op_id in KERNELS:
            raise ValueError(f"cpu kernel for {op_id} registered twice")
        KERNELS[op_id] = factory
        DTYPES[op_id] = frozenset(dtypes)
        if out:
            OUT.add(op_id)
        return factory

    return deco


def simple(op_id: str, dtypes: frozenset[DType], fn: Kernel) -> None:
    """Register an attribute-free kernel: ``fn`` itself is called. A NumPy ufunc also writes
    into a trailing positional output (``np.add(a, b, out)``), so it is registered out-capable."""
    if fn in _OUT_BY_KEYWORD:  # NumPy 2 deprecates a positional out for these two
        ufunc = fn
        fn = lambda a, b, out=None: ufunc(a, b, out=out)
        kernel(op_id, dtypes, out=True)(lambda node, ins: fn)
        return
    kernel(op_id, dtypes, out=isinstance(fn, np.ufunc) and fn.nout == 1)(lambda node, ins: fn)


_OUT_BY_KEYWORD = (np.maximum, np.minimum)


def _load() -> None:
    from caramba.backends.cpu.kernels import (
        activation,
        active_inference,
        attention,
        causal,
        linalg,
        math,
        nn,
        predictive_coding,
        random,
        reduce,
        research,
        sample,
        shape,
        train,
    )


_load()
