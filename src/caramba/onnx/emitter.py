"""Building ONNX graphs: dtype tables, unique value names, deduplicated constants, nodes.

Constants are initializers of the value's own dtype, so a float64 constant stays exactly the
float64 number (ONNX float attributes are float32 and would round it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from caramba.errors import UnsupportedOperation
from caramba.ir.dtypes import DType

OPSET = 18
IR_VERSION = 8  # the IR version that goes with opset 18; readable by onnxruntime >= 1.14

TO_ONNX: dict[DType, int] = {
    DType.float64: TensorProto.DOUBLE,
    DType.float32: TensorProto.FLOAT,
    DType.float16: TensorProto.FLOAT16,
    DType.bfloat16: TensorProto.BFLOAT16,
    DType.int64: TensorProto.INT64,
    DType.int32: TensorProto.INT32,
    DType.int8: TensorProto.INT8,
    DType.uint8: TensorProto.UINT8,
    DType.bool: TensorProto.BOOL,
}
FROM_ONNX: dict[int, DType] = {v: k for k, v in TO_ONNX.items()}
UINT64 = TensorProto.UINT64


def onnx_type(d: DType) -> int:
    return TO_ONNX[d]


class Emitter:
    """Accumulates nodes and initializers of one ONNX graph with unique value names."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._used: set[str] = set()
        self._consts: dict[tuple, str] = {}
        # The caramba node being lowered: emitted ONNX nodes are named "<origin>|<n>", so a
        # runtime error naming an ONNX node points back to the caramba node.
        self.origin: str | None = None

    def fresh(self, hint: str = "v") -> str:
        name = hint
        n = 0
        while name in self._used:
            n += 1
            name = f"{hint}_{n}"
        self._used.add(name)
        return name

    def const(self, value: Any, dtype: "DType | np.dtype | None" = None, hint: str = "c") -> str:
        """An initializer holding ``value`` (deduplicated by dtype, shape and bytes)."""
        if isinstance(dtype, DType):
            dtype = dtype.numpy
        arr = np.array(value, dtype=dtype, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        name = self._consts.get(key)
        if name is None:
            name = self.fresh(hint)
            self.initializers.append(numpy_helper.from_array(arr, name))
            self._consts[key] = name
        return name

    def scalar(self, value: Any, dtype: "DType | np.dtype") -> str:
        return self.const(np.asarray(value, dtype=dtype.numpy if isinstance(dtype, DType) else dtype), hint="k")

    def ints(self, values: Sequence[int]) -> str:
        """A 1-D int64 constant (axes, shapes, pads, starts ...)."""
        return self.const(np.asarray(list(values), dtype=np.int64).reshape(-1), hint="i")

    def op(self, op_type: str, *inputs: str, outputs: int = 1, hint: str | None = None, **attrs: Any) -> Any:
        """Append a node; returns its output name (or a list of names when ``outputs`` > 1)."""
        outs = [self.fresh(hint or op_type.lower()) for _ in range(outputs)]
        name = f"{self.origin}|{len(self.nodes)}" if self.origin is not None else None
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def cast(self, x: str, d: DType) -> str:
        if d is DType.bfloat16:  # pragma: no cover - never claimed
            raise UnsupportedOperation("no bfloat16 on this target")
        return self.op("Cast", x, to=TO_ONNX[d])


__all__ = ["FROM_ONNX", "IR_VERSION", "OPSET", "TO_ONNX", "UINT64", "Emitter", "onnx_type"]
