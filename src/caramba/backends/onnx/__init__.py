"""The onnx backend: caramba graphs exported to ONNX (opset 18) and run by ONNX Runtime.

``onnx`` / ``onnx:cpu`` uses ONNX Runtime's CPU execution provider (location ``onnx:cpu``);
``onnx:cuda`` uses the CUDA provider with ORT's CPU fallback disabled (location
``onnx:cuda``). Tensors are OrtValues bound with IO binding, so they stay resident.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from caramba.compute.buildinfo import BuildInfo
from caramba.compute.registry import MAX_THREADS, Option
from caramba.errors import ConfigError

OPTIONS = (
    Option("cpu", "flag", "ONNX Runtime's CPU execution provider (default)"),
    Option("cuda", "flag", "the CUDA execution provider, CPU fallback disabled (location onnx:cuda)"),
    Option("threads", "int", "intra-op threads of each session (default: ORT's choice, all cores)", maximum=MAX_THREADS),
    Option("opt", "str", "ORT graph optimization level (default: all)", choices=("none", "basic", "extended", "all")),
)

INSTALL_HINT = "pip install 'caramba[onnx]'  (onnx and onnxruntime)"


def build_info() -> BuildInfo:
    """onnx/onnxruntime presence and versions, without importing them."""
    versions = {}
    for dist in ("onnxruntime", "onnx"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    missing = [m for m in ("onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
    if missing:
        return BuildInfo(
            "onnx", False, reason=f"{' and '.join(missing)} not installed", versions=versions, install_hint=INSTALL_HINT
        )
    return BuildInfo(
        "onnx", True, location="onnx:cpu", versions=versions,
        details={"providers": "CPUExecutionProvider (default); cuda checked when a runner is created", "opset": "18"},
    )


def create(options: dict) -> "OnnxRunner":  # noqa: F821
    if options.get("cpu") and options.get("cuda"):
        raise ConfigError("backend onnx takes one execution provider option: cpu or cuda")
    from caramba.backends.onnx.runner import OnnxRunner

    return OnnxRunner(
        provider="cuda" if options.get("cuda") else "cpu", threads=options.get("threads"), opt=options.get("opt", "all")
    )
