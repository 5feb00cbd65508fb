"""Every sample graph of the GPU kernel table (tests/unit/backends/codegen/gpu_samples.py) on
webgpu against the cpu reference, under both precision contracts; fused forms included (the
pipeline fuses what the webgpu capabilities declare)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from caramba.compute import new
from caramba.errors import GraphError
from caramba.ir.dtypes import DType


def _samples():
    path = Path(__file__).resolve().parents[1] / "codegen" / "gpu_samples.py"
    name = "caramba_gpu_samples"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


S = _samples()
DTYPES = (DType.float64, DType.float32, DType.int64, DType.int32, DType.bool)


def _cases():
    from caramba.backends.codegen.kernels import BUILDERS
    from caramba.backends.codegen.kernels import DTYPES as KDT

    out = []
    for op in sorted(BUILDERS):
        for d in DTYPES:
            if d not in KDT[op]:
                continue
            try:
                built = S.samples(op, d)
            except GraphError:
                continue
            out += [pytest.param(label, id=label) for label, _, _ in built]
    out += [pytest.param(label, id=label) for d in (DType.float64, DType.float32) for label, _, _ in S.fusion_bait(d)]
    out += [pytest.param(label, id=label) for d in (DType.int64, DType.int32) for label, _, _ in S.fusion_bait_int(d)]
    return out


def _by_label() -> dict:
    from caramba.backends.codegen.kernels import BUILDERS

    table = {}
    for op in BUILDERS:
        for d in DTYPES:
            try:
                for s in S.samples(op, d):
                    table[s[0]] = s
            except GraphError:
                continue
    for d in (DType.float64, DType.float32):
        table.update({s[0]: s for s in S.fusion_bait(d)})
    for d in (DType.int64, DType.int32):
        table.update({s[0]: s for s in S.fusion_bait_int(d)})
    return table


TABLE = _by_label()


@pytest.fixture(scope="module")
def cpu():
    r = new("cpu")
    yield r
    r.close()


def _compare(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, equal_nan=True, err_msg=what)


RANDOM = ("random.", "bernoulli", "dropout")  # per-backend streams: checked by the compliance suite


@pytest.mark.slow
@pytest.mark.parametrize("label", [p for p in _cases() if not any(r in p.values[0] for r in RANDOM)])
def test_sample_matches_cpu(gpu, cpu, label):
    _, g, host = TABLE[label]
    outs = gpu.execute(g, inputs={k: gpu.upload(v) for k, v in host.items()})
    ref = cpu.compile(g, disable=("fuse",)).run({k: cpu.upload(v) for k, v in host.items()})
    for k in g.outputs:
        want = ref[k].download()
        rtol = 1e-12 if want.dtype == np.float64 else 2e-5
        _compare(outs[k].download(), want, rtol, f"{label} output {k}")


BAIT64 = [s[0] for s in S.fusion_bait(DType.float64)]  # the op-by-op cases are the compliance suite's


@pytest.mark.parametrize("label", BAIT64)
def test_sample_under_the_float32_contract(gpu32, cpu, label):
    """float64 fused forms opted in to float32 run at float32 accuracy."""
    import caramba

    _, g, host = TABLE[label]
    opted = caramba.ir.Graph(g.name)
    opted.state = dict(g.state)
    for n in g.nodes:
        keep = n.op in ("graph.input", "graph.constant", "state.read", "state.write")
        opted.append(n if keep else n.replace(precision=DType.float32))
    opted.outputs = dict(g.outputs)
    outs = gpu32.execute(opted, inputs={k: gpu32.upload(v) for k, v in host.items()})
    ref = cpu.compile(g, disable=("fuse",)).run({k: cpu.upload(v) for k, v in host.items()})
    for k in g.outputs:
        want = ref[k].download()
        got = outs[k].download()
        if want.dtype == np.float64:
            scale = max(1.0, float(np.nanmax(np.abs(want))) if want.size else 1.0)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, equal_nan=True, err_msg=label)
        else:
            _compare(got, want, 0, f"{label} output {k}")
