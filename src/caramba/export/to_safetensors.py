"""A trained run's parameters as a safetensors file in the layouts ``torch.nn`` expects.

caramba stores a linear layer's weight as ``[in, out]`` (it computes ``x @ W``); PyTorch's
``nn.Linear`` keeps ``[out, in]``. A parameter is a *linear weight* when every use of it in the
inference graph is the right operand of ``linalg.matmul`` and it is a matrix; it is written
transposed. Convolution kernels (``[out, in/groups, kh, kw]``), embeddings, norms and biases
already have ``torch.nn``'s layout and are written as they are. Optimizer state is not a
parameter and is left out.

The metadata (safetensors keeps ``str -> str``) carries ``caramba.names`` (JSON: caramba
parameter name -> tensor name in this file), ``caramba.layouts`` (JSON: tensor name -> ``linear``
or ``as_stored``), the run, step and checkpoint digest, and ``format: pt``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from caramba.errors import ConfigError
from caramba.export.inference import Inference, inference_model

LINEAR = "linear"  # transposed from caramba's [in, out] to torch.nn.Linear's [out, in]
AS_STORED = "as_stored"


def layouts(inf: Inference) -> dict[str, str]:
    """Parameter name -> ``linear`` or ``as_stored``, from how the inference graph uses it."""
    g = inf.graph(1)
    read_of = {n.id: n.attrs["name"] for n in g.nodes if n.op == "state.read"}
    uses: dict[str, set[tuple[str, int]]] = {}
    for node in g.nodes:
        for i, r in enumerate(node.inputs):
            if r.node in read_of:
                uses.setdefault(read_of[r.node], set()).add((node.op, i))
    out = {}
    for name, arr in inf.params.items():
        linear = arr.ndim == 2 and uses.get(name) == {("linalg.matmul", 1)}
        out[name] = LINEAR if linear else AS_STORED
    return out


def tensors_and_metadata(inf: Inference) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The tensors (torch layouts) and metadata of ``inf``'s safetensors export."""
    lay = layouts(inf)
    names = {p: p for p in inf.params}  # caramba's dotted names are already state-dict keys
    tensors = {names[p]: np.ascontiguousarray(a.T if lay[p] == LINEAR else a) for p, a in inf.params.items()}
    meta = {
        "format": "pt",
        "caramba.run": inf.run_id,
        "caramba.step": str(inf.step),
        "caramba.checkpoint_sha256": inf.checkpoint_sha256,
        "caramba.dtype": inf.dtype.value,
        "caramba.names": json.dumps(names, sort_keys=True),
        "caramba.layouts": json.dumps({names[p]: v for p, v in lay.items()}, sort_keys=True),
    }
    return tensors, meta


def export_safetensors(ref: str, out: str | os.PathLike[str] | None = None, *, store: Any = None,
                       dtype: str | None = None) -> Path:
    """Write run ``ref``'s parameters at ``out`` (default ``<run id>.safetensors``)."""
    from caramba.train.safetensors import save

    inf = inference_model(ref, store, dtype=dtype)
    tensors, meta = tensors_and_metadata(inf)
    path = Path(out) if out is not None else Path(f"{inf.run_id}.safetensors")
    if path.is_dir():
        path = path / f"{inf.run_id}.safetensors"
    try:
        return save(path, tensors, meta)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}", hint="pick another -o path") from None


__all__ = ["AS_STORED", "LINEAR", "export_safetensors", "layouts", "tensors_and_metadata"]
