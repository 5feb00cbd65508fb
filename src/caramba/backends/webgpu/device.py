"""Adapter choice, the shared device per adapter, and the pipeline cache.

One wgpu device per (adapter, features) serves every runner of the process, so compiled
pipelines (cached by WGSL source) outlive a runner; each runner owns only its buffers.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

from caramba.compute.buildinfo import BuildInfo
from caramba.errors import BackendUnavailable

F64_FEATURES = ("shader-f64", "shader-int64")
_LOCK = threading.Lock()
_DEVICES: dict[tuple, "Device"] = {}


def _quiet_egl() -> None:
    # wgpu probes EGL, which warns without a runtime dir; a private 0700 one silences it
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="caramba-xdg-")


def _wgpu():
    _quiet_egl()
    import wgpu

    return wgpu


def location_of(info: Any) -> str:
    backend = str(info["backend_type"]).lower()
    if backend == "metal":
        return "metal"
    return f"webgpu:{backend}"


def _score(adapter: Any) -> tuple:
    info = adapter.info
    kind = {"DiscreteGPU": 3, "IntegratedGPU": 2, "VirtualGPU": 1}.get(str(info["adapter_type"]), 0)
    compute_backend = str(info["backend_type"]) in ("Vulkan", "Metal", "D3D12")
    f64 = all(f in adapter.features for f in F64_FEATURES)
    return (compute_backend, f64, kind)


_ADAPTERS: list[Any] = []


def adapters() -> list[Any]:
    """Every adapter wgpu finds (enumerated once per process: it probes every driver)."""
    with _LOCK:
        if not _ADAPTERS:
            _ADAPTERS.extend(_wgpu().gpu.enumerate_adapters_sync())
        return list(_ADAPTERS)


def pick_adapter(want: str | None = None) -> Any:
    """The best adapter (compute-capable backend, float64, real GPU first), or one whose name
    contains ``want``."""
    found = adapters()
    if want is not None:
        match = [a for a in found if want.lower() in f"{a.info['device']} {a.info['backend_type']} {a.info['vendor']}".lower()]
        if not match:
            names = ", ".join(a.summary for a in found) or "none"
            raise BackendUnavailable(f"no webgpu adapter matches '{want}'; adapters: {names}", backend="webgpu")
        found = match
    usable = [a for a in found if str(a.info["backend_type"]) in ("Vulkan", "Metal", "D3D12")]
    if not usable:
        names = ", ".join(a.summary for a in found) or "none"
        raise BackendUnavailable(
            f"no Vulkan, Metal or D3D12 adapter (found: {names})", backend="webgpu",
            hint="install a Vulkan driver (Debian: apt-get install mesa-vulkan-drivers libvulkan1)",
        )
    return max(usable, key=_score)


def describe() -> BuildInfo:
    """Build info without creating a device: wgpu version, the adapter that would be used."""
    from caramba.backends.webgpu import INSTALL_HINT

    try:
        wgpu = _wgpu()
        adapter = pick_adapter()
    except BackendUnavailable as exc:
        return BuildInfo("webgpu", False, reason=exc.message, install_hint=INSTALL_HINT)
    except Exception as exc:  # a driver that fails to enumerate is "unavailable", with why
        return BuildInfo("webgpu", False, reason=f"{type(exc).__name__}: {exc}", install_hint=INSTALL_HINT)
    info = adapter.info
    f64 = all(f in adapter.features for f in F64_FEATURES)
    return BuildInfo(
        "webgpu",
        True,
        location=location_of(info),
        versions={"wgpu": wgpu.__version__},
        details={
            "adapter": adapter.summary,
            "description": str(info.get("description", "")),
            "precision": "float64 (shader-f64)" if f64 else "float32 contract (no shader-f64)",
            "adapter_type": str(info.get("adapter_type", "")),  # CPU: a software adapter (lavapipe)
        },
    )


@dataclass
class Device:
    """A wgpu device shared by every runner on one adapter, with its pipeline cache."""

    adapter: Any
    device: Any
    float64: bool
    int64: bool
    limits: dict[str, int]
    pipelines: dict[str, Any] = field(default_factory=dict)
    layouts: dict[tuple, Any] = field(default_factory=dict)

    @property
    def location(self) -> str:
        return location_of(self.adapter.info)

    def pipeline(self, source: str, params: tuple) -> tuple[Any, Any]:
        """(compute pipeline, bind group layout) for a WGSL module, compiled once per device."""
        with _LOCK:
            hit = self.pipelines.get(source)
            if hit is not None:
                return hit
        wgpu = _wgpu()
        key = tuple(p.access for p in params)
        bgl = self.layouts.get(key)
        if bgl is None:
            entries = []
            for i, access in enumerate(key):
                ro = access in ("read", "params")
                kind = wgpu.BufferBindingType.read_only_storage if ro else wgpu.BufferBindingType.storage
                entries.append({"binding": i, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": kind}})
            bgl = self.device.create_bind_group_layout(entries=entries)
            self.layouts[key] = bgl
        layout = self.device.create_pipeline_layout(bind_group_layouts=[bgl])
        module = self.device.create_shader_module(code=source)
        pipe = self.device.create_compute_pipeline(layout=layout, compute={"module": module, "entry_point": "main"})
        with _LOCK:
            self.pipelines[source] = (pipe, bgl)
        return pipe, bgl


def open_device(float64_wanted: bool | None, want: str | None = None) -> Device:
    """The shared device for the chosen adapter, with shader-f64/shader-int64 whenever the adapter
    has them (float64 *storage*). ``float64_wanted`` is checked here: True requires shader-f64;
    the compute precision itself is the runner's choice."""
    adapter = pick_adapter(want)
    has64 = all(f in adapter.features for f in F64_FEATURES)
    if float64_wanted and not has64:
        missing = [f for f in F64_FEATURES if f not in adapter.features]
        raise BackendUnavailable(
            f"adapter {adapter.summary} lacks {', '.join(missing)}: float64 is not available",
            backend=location_of(adapter.info),
            hint="use webgpu:precision=float32 (float64 nodes then need precision=float32)",
        )
    float64 = has64
    int64 = "shader-int64" in adapter.features
    key = (adapter.summary, float64, int64)
    with _LOCK:
        dev = _DEVICES.get(key)
    if dev is not None:
        return dev
    features = [f for f in ("shader-f64", "shader-int64") if (f == "shader-f64" and float64) or (f == "shader-int64" and int64)]
    wanted_limits = (
        "max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
        "max-compute-workgroup-storage-size",
    )
    limits = {k: adapter.limits[k] for k in wanted_limits if k in adapter.limits}
    device = adapter.request_device_sync(required_features=features, required_limits=limits)
    dev = Device(adapter, device, float64, int64, dict(device.limits))
    with _LOCK:
        return _DEVICES.setdefault(key, dev)
