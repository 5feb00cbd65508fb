"""webgpu test fixtures: a runner per precision contract, skipped with the build-info reason when
no adapter is available (CI installs lavapipe)."""

from __future__ import annotations

import numpy as np
import pytest

from caramba.compute import build_info, new


def _need_webgpu() -> None:
    info = build_info("webgpu")
    if not info.available:
        pytest.skip(f"webgpu unavailable: {info.reason}")


@pytest.fixture(scope="session")
def gpu():
    """The default webgpu runner (float64 when the adapter has shader-f64)."""
    _need_webgpu()
    r = new("webgpu")
    yield r
    r.close()


@pytest.fixture(scope="session")
def gpu32():
    """A webgpu runner under the forced float32 contract."""
    _need_webgpu()
    r = new("webgpu:precision=float32")
    yield r
    r.close()


@pytest.fixture(scope="session")
def run_kernel():
    """``run_kernel(runner, kernel, inputs, out_dtype, n_out)``: dispatch one generated kernel."""
    return _run_kernel


def _run_kernel(runner, kernel, inputs: list[np.ndarray], out_dtype, n_out: int) -> np.ndarray:
    """Dispatch one generated kernel on ``runner``'s device: inputs in0.., one output out0."""
    from caramba.backends.codegen.wgsl import dispatch_size

    dev = runner.dev
    pipe, bgl = dev.pipeline(kernel.source, kernel.params)
    tensors = [runner.upload(a) for a in inputs]
    out = runner.fill((n_out,), out_dtype, 0.0)
    entries = [{"binding": i, "resource": {"buffer": t.buffer}} for i, t in enumerate([*tensors, out])]
    if kernel.values:
        entries.append({"binding": len(entries), "resource": {"buffer": runner._params_buffer(kernel.values)}})
    group = dev.device.create_bind_group(layout=bgl, entries=entries)
    enc = dev.device.create_command_encoder()
    p = enc.begin_compute_pass()
    p.set_pipeline(pipe)
    p.set_bind_group(0, group)
    p.dispatch_workgroups(*dispatch_size(kernel.groups))
    p.end()
    dev.device.queue.submit([enc.finish()])
    return out.download()
