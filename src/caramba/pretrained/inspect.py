"""What a Hugging Face checkpoint holds and how caramba maps it (``caramba model inspect``).

Unlike loading, inspecting never stops at the first thing that does not fit: it reports the
architecture, the model asset and its config, the parameter count and dtypes, and every
unmapped tensor or unbound parameter, so a user sees at once why a checkpoint does not load.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caramba.errors import CarambaError


@dataclass
class Inspection:
    source: Path
    files: list[str]
    tensors: int
    bytes: int
    dtypes: dict[str, int]  # safetensors code -> tensors
    parameters: int  # values stored in the checkpoint
    config_architecture: str | None
    architecture: str | None = None
    model: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    model_parameters: int = 0  # values of the caramba model's parameters
    mapped: int = 0
    unmapped: list[str] = field(default_factory=list)  # checkpoint tensors no parameter reads
    ignored: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def loads(self) -> bool:
        return self.architecture is not None and not self.problems and not self.unmapped


def inspect(source: str | os.PathLike[str], *, architecture: str | None = None, dtype: str = "float32") -> Inspection:
    """Inspect the checkpoint at ``source`` (parameters read as ``dtype`` for the dtype check)."""
    import math

    from caramba.pretrained.checkpoint import HFCheckpoint
    from caramba.pretrained.model import PretrainedModel, manifest_text

    ckpt = HFCheckpoint.open(source)
    cls = None
    if ckpt.config is not None and isinstance(ckpt.config.get("architectures"), list) and ckpt.config["architectures"]:
        cls = str(ckpt.config["architectures"][0])
    info = Inspection(
        Path(source), [f.name for f in ckpt.files], len(ckpt.tensors), ckpt.nbytes,
        dict(Counter(t.code for t in ckpt.tensors.values())),
        sum(math.prod(t.shape) for t in ckpt.tensors.values()), cls)
    try:
        from caramba.manifest.compile import prepare
        from caramba.manifest.pretrained import match, param_specs

        text = manifest_text(source, architecture=architecture, dtype=dtype, allow_narrowing=True)
        model = PretrainedModel(prepare(text, load_data=False), text)
        info.architecture, info.model = model.architecture.op, model.resolved.node.op
        info.variables = model.variables
        params = param_specs(model.prep)
        info.model_parameters = sum(math.prod(p.shape) for p in params.values())
        m = match(model.resolved, params)
        info.mapped = len(m.bindings)
        info.unmapped, info.ignored = m.unused, m.ignored
        info.problems = [msg for msg, _ in m.problems]
    except CarambaError as exc:
        info.problems.append(exc.message)
    return info


__all__ = ["Inspection", "inspect"]
