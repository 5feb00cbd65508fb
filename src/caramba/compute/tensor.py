"""Tensor: a value resident on one backend. It never moves implicitly."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from caramba.ir.dtypes import DType
from caramba.ir.types import ValueType

Location = str  # "cpu", "xla:cpu", "onnx:cpu", "cuda:0", "webgpu:vulkan", "metal"


class Tensor(ABC):
    """A resident tensor. Leave the backend only with ``download()``/``download_float64()``."""

    __slots__ = ("__weakref__",)  # executables remember the inputs they checked, weakly

    @property
    @abstractmethod
    def shape(self) -> tuple[int, ...]: ...

    @property
    @abstractmethod
    def dtype(self) -> DType: ...

    @property
    @abstractmethod
    def location(self) -> Location: ...

    @abstractmethod
    def download(self) -> np.ndarray:
        """Copy the value to a new host array of this tensor's dtype."""

    def download_float64(self) -> np.ndarray:
        """Copy the value to a new host float64 array (exact for every caramba dtype but int64 > 2**53)."""
        return self.download().astype(np.float64)

    def wait(self) -> "Tensor":
        """Block until the value is computed (asynchronous backends override); returns self."""
        return self

    @property
    def type(self) -> ValueType:
        return ValueType(self.shape, self.dtype)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __array__(self, *args, **kwargs):
        from caramba.errors import TransferError

        raise TransferError(
            f"a {self.location} tensor cannot become a NumPy array implicitly",
            backend=self.location,
            hint="call tensor.download() to copy it to the host explicitly",
        )

    def __repr__(self) -> str:
        return f"Tensor({self.type} @ {self.location})"
