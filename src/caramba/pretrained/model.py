"""A Hugging Face checkpoint as a caramba model: the manifest it makes, its weights, a forward.

``PretrainedModel.open(dir)`` writes the manifest a user would (``topology: {from_safetensors:
...}``), validates it (the architecture, the variables, every parameter's tensor, checked from
the headers alone) and keeps it; ``load(runner, params)`` streams the weights onto a runner one
tensor at a time, in file order, each converted explicitly to the parameter's dtype;
``forward(inputs, backend=...)`` lowers the model for the inputs' shapes and runs it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from caramba.errors import ConfigError
from caramba.pretrained.checkpoint import Binding, TensorReader, tensors_in_file_order


def manifest_text(source: str | os.PathLike[str], *, architecture: str | None = None, dtype: str = "float64",
                  allow_narrowing: bool = False, variables: Mapping[str, Any] | None = None,
                  config: str | os.PathLike[str] | None = None, node_id: str = "model", name: str | None = None) -> str:
    """The manifest that loads ``source`` as its topology (JSON is YAML: no quoting surprises)."""
    section: dict[str, Any] = {"source": str(Path(source).resolve()), "id": node_id, "dtype": dtype}
    if architecture is not None:
        section["architecture"] = architecture
    if allow_narrowing:
        section["allow_narrowing"] = True
    if variables:
        section["variables"] = dict(variables)
    if config is not None:
        section["config"] = str(Path(config).resolve())
    label = name or Path(source).resolve().name or "pretrained"
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in label).lstrip("0123456789.-") or "pretrained"
    return json.dumps({"name": safe, "topology": {"from_safetensors": section}}, indent=2) + "\n"


class PretrainedModel:
    """A validated ``from_safetensors`` manifest (``prep``) and its checkpoint bindings."""

    def __init__(self, prep: Any, text: str) -> None:
        self.prep = prep
        self.manifest_text = text
        self.resolved = prep.manifest.topology.pretrained
        self._bindings: dict[tuple, dict[str, Binding]] = {}

    @classmethod
    def open(cls, source: str | os.PathLike[str], **kwargs: Any) -> "PretrainedModel":
        from caramba.manifest.compile import prepare

        text = manifest_text(source, **kwargs)
        return cls(prepare(text, load_data=False), text)

    # ---- what it is --------------------------------------------------------------------
    @property
    def architecture(self) -> Any:
        """The registry entry (``.op``, ``.spec``) the checkpoint maps through."""
        return self.resolved.arch

    @property
    def variables(self) -> dict[str, Any]:
        """The model node's config, as computed from config.json."""
        return dict(self.resolved.variables)

    @property
    def checkpoint(self) -> Any:
        return self.resolved.checkpoint

    @property
    def inputs(self) -> dict[str, Any]:
        return dict(self.prep.manifest.topology.inputs)

    def dims_for(self, inputs: Mapping[str, Any]) -> dict[str, int]:
        """Symbolic dims (batch, seq) bound from the shapes of ``inputs``."""
        dims: dict[str, int] = dict(self.prep.dims)
        seen: dict[str, str] = {}
        for name, spec in self.prep.manifest.topology.inputs.items():
            if name not in inputs:
                continue
            shape = np.shape(inputs[name])
            if len(shape) != len(spec.shape) or any(isinstance(d, int) and d != n for d, n in zip(spec.shape, shape)):
                raise ConfigError(f"input '{name}' has shape {list(shape)}; the model takes {spec.shape}")
            for d, n in zip(spec.shape, shape):
                if isinstance(d, str):
                    if d in seen and dims[d] != n:
                        raise ConfigError(f"dimension '{d}' is {dims[d]} in input '{seen[d]}' and {n} in '{name}'")
                    dims[d], seen[d] = int(n), name
        return dims

    def lower(self, dims: Mapping[str, int] | None = None, *, training: bool = False, outputs: Sequence[str] | None = None) -> Any:
        from caramba.manifest.lower import lower_topology

        p = self.prep
        return lower_topology(p.manifest.topology, p.doc, dims={**p.dims, **(dims or {})}, training=training,
                              outputs=list(outputs) if outputs is not None else None, name=p.manifest.name,
                              model_spec=p.manifest.model)

    def bindings(self, params: Mapping[str, Any]) -> dict[str, Binding]:
        """Every model parameter -> its checkpoint tensor (checked; see manifest.pretrained.bind)."""
        from caramba.manifest.pretrained import bind

        key = tuple(sorted((k, tuple(v.shape), v.dtype.value) for k, v in params.items()))
        if key not in self._bindings:
            self._bindings[key] = bind(self.resolved, params, self.prep.doc)
        return self._bindings[key]

    # ---- weights -------------------------------------------------------------------------
    def load(self, runner: Any, params: Mapping[str, Any]) -> int:
        """Read every bound parameter onto ``runner`` (its state, by parameter name): one tensor
        on the host at a time, read in file order. Returns the bytes uploaded."""
        binds = self.bindings(params)
        total = 0
        with TensorReader(self.checkpoint) as reader:
            for pname, _ in tensors_in_file_order(self.checkpoint, {p: b.tensor for p, b in binds.items()}):
                spec = params[pname]
                arr = reader.read(binds[pname], tuple(spec.shape), spec.dtype, self.resolved.allow_narrowing,
                                  f"tensor '{binds[pname].tensor}' (for parameter '{pname}')")
                runner.state[pname] = runner.upload(arr, donate=True)
                total += arr.nbytes
                del arr
        return total

    def read(self, params: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Every bound parameter as a host array (tests, export)."""
        binds = self.bindings(params)
        with TensorReader(self.checkpoint) as reader:
            return {p: reader.read(b, tuple(params[p].shape), params[p].dtype, self.resolved.allow_narrowing)
                    for p, b in binds.items()}

    # ---- running -----------------------------------------------------------------------
    def forward(self, inputs: Mapping[str, Any], backend: Any = "cpu", outputs: Sequence[str] | None = None,
                params: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Run the model on host ``inputs`` (by input name) on ``backend`` (a spec like ``cpu`` or
        ``xla``, or a runner); returns the outputs as host arrays. The weights are the
        checkpoint's (loaded once per runner this model was given), or ``params`` (by parameter
        name: e.g. a run's trained parameters, LoRA adapters included)."""
        from caramba import compute

        missing = [k for k in self.prep.manifest.topology.inputs if k not in inputs]
        if missing:
            raise ConfigError(f"no value for input(s) {missing}; the model takes {list(self.prep.manifest.topology.inputs)}")
        low = self.lower(self.dims_for(inputs), outputs=outputs)
        own = not hasattr(backend, "compile")
        runner = compute.new(backend) if own else backend
        try:
            if params is not None:
                missing = sorted(set(low.params) - set(params))
                if missing:
                    raise ConfigError(f"no value for parameter '{missing[0]}' ({len(missing)} missing)")
                for n, spec in low.params.items():
                    runner.state[n] = runner.upload(np.asarray(params[n]), spec.dtype)
            elif not all(n in set(runner.state) for n in low.params):
                self.load(runner, low.params)
            types = low.inputs
            feed = {k: runner.upload(np.asarray(inputs[k]).astype(types[k].dtype.numpy, copy=False)) for k in types}
            result = runner.compile(low.graph).run(feed)
            return {k: v.download() for k, v in result.items()}
        finally:
            if own:
                runner.close()


__all__ = ["PretrainedModel", "manifest_text"]
