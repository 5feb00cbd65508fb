"""Run ONNX models on any caramba backend: an ``onnx.backend.base.Backend`` over the importer.

    rep = CarambaBackend.prepare(model, backend="xla")
    outputs = rep.run([x, y])            # NumPy arrays in, NumPy arrays out

The model is imported once per set of shape-deciding input values (caramba graphs are
statically shaped; see ``caramba.onnx.importer``), compiled once per backend, and run with
inputs uploaded to and outputs downloaded from the backend explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from caramba.onnx.importer import StaticInputRequired, import_model


class CarambaRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, backend: str, runner: Any = None) -> None:
        self.model = model
        self.backend = backend
        self._runner = runner
        self._graphs: dict[tuple, Any] = {}
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in inits]
        self.output_names = [vi.name for vi in model.graph.output]

    @property
    def runner(self) -> Any:
        if self._runner is None:
            from caramba import compute

            self._runner = compute.new(self.backend)
        return self._runner

    def graph(self, feeds: Mapping[str, np.ndarray]) -> tuple[Any, dict[str, np.ndarray]]:
        """The imported graph for these inputs, and the inputs it takes as static values."""
        static: dict[str, np.ndarray] = {}
        for _ in range(len(feeds) + 1):
            key = tuple((k, v.dtype.str, v.shape, v.tobytes()) for k, v in sorted(static.items()))
            if key in self._graphs:
                return self._graphs[key], static
            try:
                g = import_model(self.model, static_inputs=static)
            except StaticInputRequired as exc:
                if exc.name not in feeds or exc.name in static:
                    raise
                static[exc.name] = np.asarray(feeds[exc.name])
                continue
            self._graphs[key] = g
            return g, static
        raise RuntimeError("unreachable: every input can be made static at most once")

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, Mapping):
            feeds = {k: np.asarray(v) for k, v in inputs.items()}
        else:
            feeds = {k: np.asarray(v) for k, v in zip(self.input_names, _as_list(inputs), strict=False)}
        g, _ = self.graph(feeds)
        r = self.runner
        exe = r.compile(g)
        tensors = {k: r.upload(feeds[k]) for k in exe.input_types}
        outs = exe.run(tensors)
        return tuple(outs[name].download() for name in self.output_names)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()


def _as_list(inputs: Any) -> Sequence[Any]:
    if isinstance(inputs, np.ndarray):
        return [inputs]
    return list(inputs)


class CarambaBackend(Backend):
    """``prepare(model, device="CPU", backend="cpu")``: caramba's backend is a keyword (ONNX's
    device names are only CPU and CUDA; every caramba backend answers for "CPU")."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> CarambaRep:
        if not isinstance(model, onnx.ModelProto):
            model = onnx.load(model) if isinstance(model, str) else onnx.load_from_string(model)
        return CarambaRep(model, kwargs.get("backend", "cpu"), kwargs.get("runner"))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        rep = cls.prepare(model, device, **kwargs)
        try:
            return rep.run(inputs)
        finally:
            if kwargs.get("runner") is None:
                rep.close()

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


__all__ = ["CarambaBackend", "CarambaRep"]
