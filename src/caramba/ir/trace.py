"""``caramba.trace(fn, *specs)``: build a Graph by calling a Python function on graph values."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from caramba.errors import GraphError
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.graph import Graph, Value
from caramba.ir.types import ValueType


def _spec_type(spec: Any) -> ValueType:
    if isinstance(spec, ValueType):
        return spec
    if isinstance(spec, np.ndarray):
        return ValueType(spec.shape, as_dtype(spec.dtype))
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], (DType, str)):
        return ValueType(tuple(spec[0]), as_dtype(spec[1]))
    if isinstance(spec, (tuple, list)) and all(isinstance(s, int) for s in spec):
        return ValueType(tuple(spec), DType.float64)
    raise GraphError(
        f"cannot read an input spec from {spec!r}; use ValueType, an array, a shape tuple, "
        "or (shape, dtype)"
    )


def trace(fn: Callable[..., Any], *specs: Any, name: str | None = None) -> Graph:
    """Trace ``fn`` into a Graph. Inputs are named after ``fn``'s parameters.

    ``fn`` may return a Value (output ``"out"``), a tuple/list (``out0``, ``out1``, ...) or a
    dict of name -> Value.
    """
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        params = []
    names = params[: len(specs)] if len(params) >= len(specs) else [f"x{i}" for i in range(len(specs))]
    g = Graph(name or getattr(fn, "__name__", "traced"))
    with g:
        args = [g.input(n, t.shape, t.dtype) for n, t in zip(names, map(_spec_type, specs), strict=True)]
        result = fn(*args)
        _set_outputs(g, result)
    return g


def _set_outputs(g: Graph, result: Any) -> None:
    if isinstance(result, Value):
        g.output("out", result)
    elif isinstance(result, Mapping):
        for k, v in result.items():
            g.output(str(k), _check(v))
    elif isinstance(result, (tuple, list)):
        for i, v in enumerate(result):
            g.output(f"out{i}", _check(v))
    else:
        raise GraphError(f"traced function returned {type(result).__name__}, expected graph values")


def _check(v: Any) -> Value:
    if not isinstance(v, Value):
        raise GraphError(f"traced function returned {type(v).__name__} where a graph value was expected")
    return v
