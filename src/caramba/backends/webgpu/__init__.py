"""The webgpu backend: wgpu-py devices running WGSL kernels (Vulkan, Metal, DX12).

Precision comes from the adapter: with ``shader-f64`` (and ``shader-int64``) float64 is computed
in float64; otherwise the float32 contract holds: float64 values are stored as f32 and only
nodes that opt in with ``precision=float32`` are accepted (the Metal rule of DESIGN §1.3).
``webgpu:precision=float32`` forces that contract on any adapter. On Apple's adapter the
location is ``metal``, elsewhere ``webgpu:<backend type>``.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache

from caramba.compute.buildinfo import BuildInfo
from caramba.compute.registry import Option

OPTIONS = (
    Option("precision", "str", "float64 (needs shader-f64) or float32 (the float32 contract)", ("float64", "float32")),
    Option("adapter", "str", "use the adapter whose device or backend name contains this text"),
)

# The compliance suite runs once per entry (tests/compliance/conftest.py).
COMPLIANCE_SPECS = ("webgpu", "webgpu:precision=float32")

INSTALL_HINT = "pip install 'caramba[webgpu]' (and a Vulkan/Metal/DX12 driver; on Debian: apt-get install mesa-vulkan-drivers)"


@lru_cache(maxsize=1)
def build_info() -> BuildInfo:
    if importlib.util.find_spec("wgpu") is None:
        return BuildInfo("webgpu", False, reason="wgpu-py is not installed", install_hint=INSTALL_HINT)
    from caramba.backends.webgpu.device import describe

    return describe()


def create(options: dict) -> "WebGPURunner":  # noqa: F821
    from caramba.backends.webgpu.runner import WebGPURunner

    return WebGPURunner(precision=options.get("precision"), adapter=options.get("adapter"))
