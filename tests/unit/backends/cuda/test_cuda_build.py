""""Not ported fails the build": every kernel the cuda backend claims compiles to PTX for sm_90
without a GPU (NVRTC from the nvidia-cuda-nvrtc wheel, or nvcc), and the capability table is
exactly the kernel table."""

from __future__ import annotations

import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from caramba.backends.codegen.capabilities import kernel_table
from caramba.backends.codegen.cuda import ENTRY, CudaEmitter
from caramba.backends.codegen.kernels import BUILDERS
from caramba.backends.codegen.plan import PLUMBING, make_plan
from caramba.backends.codegen.program import LibraryCall
from caramba.compiler.passes import PassContext
from caramba.compiler.pipeline import PIPELINE, run_pipeline
from caramba.errors import GraphError
from caramba.ir.dtypes import DType


def _samples():
    path = Path(__file__).resolve().parents[1] / "codegen" / "gpu_samples.py"
    spec = importlib.util.spec_from_file_location("caramba_gpu_samples", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("caramba_gpu_samples", mod)
    spec.loader.exec_module(mod)
    return mod


def _compiler_or_skip():
    pytest.importorskip("cupy", reason="cupy is not installed (pip install 'caramba[cuda]')")
    from caramba.backends.cuda import nvrtc

    try:
        return nvrtc.compiler()
    except Exception as exc:
        pytest.skip(f"no CUDA compiler: {exc}")


def test_capability_table_is_the_kernel_table():
    from caramba.backends.cuda.runner import cuda_capabilities

    caps = cuda_capabilities()
    table = kernel_table(CudaEmitter())
    claimed = {op: ds for op, ds in caps.ops.items() if op not in PLUMBING}
    assert claimed == table
    assert set(table) == set(BUILDERS), f"kernels with no cuda dtype: {sorted(set(BUILDERS) - set(table))}"
    for op in PLUMBING:
        assert caps.ops[op] == CudaEmitter().dtypes


def lowered(graph, caps, optimize: bool):
    """The graph lowered for ``caps``; without ``optimize`` only the required stages run, so
    every op of the sample reaches the backend as written."""
    ctx = PassContext(caps, "cuda:0", tuple(graph.outputs))
    skip = () if optimize else tuple(s.name for s in PIPELINE if s.optional)
    g, _ = run_pipeline(graph, ctx, disable=skip)
    return g


def collect(caps):
    """Every (op, dtype) pair the samples lower to, and every distinct kernel source."""
    s = _samples()
    e = CudaEmitter()
    covered: set[tuple[str, DType]] = set()
    sources: dict[str, str] = {}
    library: set[str] = set()
    graphs = []
    for op, dtypes in caps.ops.items():
        for d in sorted(dtypes, key=lambda x: x.value):
            try:
                graphs += [(g, False) for _, g, _ in s.samples(op, d)]
            except GraphError:  # the op's type rule refuses d (e.g. bool: only an output of less)
                continue
    for d in (DType.float64, DType.float32):
        graphs += [(g, True) for _, g, _ in s.fusion_bait(d)]
    for d in (DType.int64, DType.int32):
        graphs += [(g, True) for _, g, _ in s.fusion_bait_int(d)]
    for g, fuse in graphs:
        low = lowered(g, caps, fuse)
        for n in low.nodes:
            touched = {t.dtype for t in n.types} | {low.type_of(r).dtype for r in n.inputs}
            covered.update((n.op, d) for d in touched)
        plan = make_plan(low, e)
        for st in plan.steps:
            for step in st.program.steps:
                if isinstance(step, LibraryCall):
                    library.add(st.node.op)
            for k in st.program.kernels:
                sources.setdefault(k.source, f"{k.name}")
    return covered, sources, library


def test_every_claimed_kernel_compiles_to_ptx():
    from caramba.backends.cuda.nvrtc import compile_ptx
    from caramba.backends.cuda.runner import cuda_capabilities

    _compiler_or_skip()
    caps = cuda_capabilities()
    covered, sources, library = collect(caps)
    missing = sorted(f"{op} {d.value}" for op, ds in caps.ops.items() if op not in PLUMBING for d in ds if (op, d) not in covered)
    assert not missing, f"claimed by the cuda capability table but never compiled: {missing}"

    # NVRTC's fixed cost dominates: compile the kernels in batches, each kernel in a namespace
    # of its own with a renamed entry point (a failing batch is retried kernel by kernel).
    items = list(sources.items())
    batches = [items[i : i + 48] for i in range(0, len(items), 48)]

    def build(batch):
        unit = "\n".join(
            f"namespace k{i} {{\n{src.replace(ENTRY, f'{ENTRY}_{i}')}}}\n" for i, (src, _) in enumerate(batch)
        )
        try:
            ptx = compile_ptx(unit, "sm_90", "batch.cu")
        except Exception:
            for src, name in batch:  # name the kernel that fails
                compile_ptx(src, "sm_90", f"{name}.cu")
            raise
        return [(name, ptx, f"{ENTRY}_{i}") for i, (_, name) in enumerate(batch)]

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = [r for batch in pool.map(build, batches) for r in batch]
    assert len(results) == len(sources)
    for name, ptx, entry in results:
        assert ".target sm_90" in ptx and f".entry {entry}(" in ptx, f"{name}: no {entry} entry in its PTX"
    assert library <= {"linalg.matmul", "fused.linear"}
    print(f"{len(results)} distinct CUDA kernels compiled to PTX (sm_90); cuBLAS for {sorted(library)}")


def test_compile_only_runner_lowers_compiles_and_refuses_to_run():
    import caramba
    from caramba import ops
    from caramba.backends.cuda import compile_only
    from caramba.errors import BackendUnavailable

    _compiler_or_skip()
    r = compile_only()
    with caramba.Graph("mlp") as g:
        x = g.input("x", (4, 8))
        w = g.input("w", (8, 3))
        g.output("y", ops.softmax(ops.gelu(x @ w)))
    exe = r.compile(g)
    assert exe.ptx and all(".entry" in p for p in exe.ptx.values())
    x, w = r.upload(np.ones((4, 8))), r.upload(np.ones((8, 3)))
    assert x.location == "cuda:0:compile-only"
    with pytest.raises(BackendUnavailable, match="only compiles"):
        exe.run({"x": x, "w": w})
    r.close()


def test_build_info_never_crashes_without_a_gpu():
    from caramba.compute import build_info

    info = build_info("cuda")
    if not info.available:
        assert info.reason
    else:
        assert "compute capability" in info.details
