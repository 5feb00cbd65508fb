"""The cuda runner: CuPy arrays as resident tensors, NVRTC-compiled kernels from the shared
codegen (cached by source), cuBLAS for float GEMM. ``CudaCompileOnlyRunner`` does everything up to
PTX and refuses to run (no GPU needed)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from caramba.backends.codegen.capabilities import gpu_capabilities
from caramba.backends.codegen.cuda import ENTRY, CudaEmitter
from caramba.backends.codegen.kernels import fill_kernel
from caramba.backends.codegen.kernels.shape import INDEX_ERROR
from caramba.backends.codegen.plan import Plan, make_plan
from caramba.backends.codegen.program import Kernel, Launch, LibraryCall, Slot
from caramba.backends.cuda.nvrtc import OPTIONS, compile_ptx
from caramba.compute.capabilities import Capabilities
from caramba.compute.runner import Executable, Runner
from caramba.compute.tensor import Tensor
from caramba.errors import BackendUnavailable, CarambaError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph, Ref

_LOCK = threading.Lock()
_MODULES: dict[tuple[int, str], Any] = {}  # (device, source) -> cupy RawKernel
_PTX: dict[str, str] = {}  # source -> PTX (compile-only)


def cuda_capabilities() -> Capabilities:
    """The cuda capability table: exactly the kernel table for the CUDA emitter (device-free)."""
    return gpu_capabilities(CudaEmitter())


class IndexOutOfRange(CarambaError):
    """An index fed to gather/scatter/embedding was outside the indexed axis (checked on the device)."""


class CudaTensor(Tensor):
    __slots__ = ("array", "runner")

    def __init__(self, array: Any, runner: "CudaRunner") -> None:
        self.array = array
        self.runner = runner

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def dtype(self) -> DType:
        from caramba.ir.dtypes import dtype as as_dtype

        return as_dtype(self.array.dtype)

    @property
    def location(self) -> str:
        return self.runner.location

    def download(self) -> np.ndarray:
        self.runner._check_open()
        import cupy

        with cupy.cuda.Device(self.runner.device):
            return cupy.asnumpy(self.array)


def _function(device: int, source: str) -> Any:
    key = (device, source)
    with _LOCK:
        fn = _MODULES.get(key)
    if fn is None:
        import cupy

        with cupy.cuda.Device(device):
            module = cupy.RawModule(code=source, backend="nvrtc", options=OPTIONS)
            fn = module.get_function(ENTRY)
        with _LOCK:
            _MODULES[key] = fn
    return fn


def gemm(a: Any, b: Any, out: Any, attrs: dict) -> None:
    """cuBLAS GEMM through CuPy: out[*batch, m, n] = a[*a_batch, m, k] @ b[*b_batch, k, n]."""
    import cupy

    m, k, n = attrs["m"], attrs["k"], attrs["n"]
    a3 = a.reshape(tuple(attrs["a_batch"]) + (m, k))
    b3 = b.reshape(tuple(attrs["b_batch"]) + (k, n))
    cupy.matmul(a3, b3, out=out.reshape(tuple(attrs["batch"]) + (m, n)))


class CudaExecutable(Executable):
    def __init__(self, runner: "CudaRunner", graph: Graph, source: Graph, report: Any) -> None:
        super().__init__(runner, graph, source, report)
        self.plan: Plan = make_plan(graph, runner.emitter)
        self.functions = {k.source: _function(runner.device, k.source) for k in self.plan.kernels}
        self.consts = {ref: runner._upload(np.asarray(v), self.plan.types[ref].dtype) for ref, v in self.plan.constants.items()}
        self.node_consts = [[runner._device_array(c) for c in st.program.consts] for st in self.plan.steps]

    def _run(self, inputs: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        import cupy

        runner: CudaRunner = self.runner  # type: ignore[assignment]
        plan = self.plan
        with cupy.cuda.Device(runner.device):
            arrays: dict[Ref, Any] = {}
            for ref, name in plan.inputs.items():
                arrays[ref] = inputs[name].array  # type: ignore[attr-defined]
            for ref, t in self.consts.items():
                arrays[ref] = t.array
            for ref, name in plan.state_reads.items():
                arrays[ref] = state[name].array  # type: ignore[attr-defined]
            err = cupy.zeros(1, dtype=np.uint32) if plan.checks else None

            def get(ref: Ref) -> Any:
                # a value with no array of its own shares its root's (e.g. a read after a write)
                a = arrays.get(ref)
                return a if a is not None else arrays[plan.root[ref]].reshape(plan.types[ref].shape)

            for i, st in enumerate(plan.steps):
                for j, ref in enumerate(st.outputs):
                    t = plan.types[ref]
                    if j in st.program.views:
                        arrays[ref] = get(st.inputs[st.program.views[j]]).reshape(t.shape)
                    else:
                        arrays[ref] = cupy.empty(t.shape, dtype=t.dtype.numpy)
                temps = [cupy.empty(tm.size, dtype=tm.dtype.numpy) for tm in st.program.temps]

                def resolve(slot: Slot, st=st, temps=temps, i=i) -> Any:
                    if slot.kind == "in":
                        return get(st.inputs[slot.index])
                    if slot.kind == "out":
                        return arrays[st.outputs[slot.index]]
                    if slot.kind == "tmp":
                        return temps[slot.index]
                    if slot.kind == "const":
                        return self.node_consts[i][slot.index]
                    return err

                for step in st.program.steps:
                    if isinstance(step, LibraryCall):
                        a, b, out = (resolve(s) for s in step.args)
                        gemm(a, b, out, dict(step.attrs))
                    else:
                        self._launch(step, resolve)
                for ref in st.release:
                    arrays.pop(ref, None)  # CuPy's pool reuses the memory
            if err is not None and int(err.get()[0]) == INDEX_ERROR:
                nodes = [st.node.id for st in plan.steps if st.program.checks]
                raise IndexOutOfRange(
                    f"an index was out of range in {', '.join(nodes)} (gather/scatter/embedding)",
                    node=nodes[0] if len(nodes) == 1 else None, backend=runner.location,
                )
            for name, ref in plan.state_writes:
                runner.state._values[name] = CudaTensor(get(ref), runner)
            return {name: CudaTensor(get(ref), runner) for name, ref in plan.outputs.items()}

    def _launch(self, launch: Launch, resolve) -> None:
        k: Kernel = launch.kernel
        if k.groups == 0:
            return
        args = tuple(resolve(s) for s in launch.args)
        if k.values:  # only when the emitter does not bake sizes in (the cuda emitter does)
            args = args + (self.runner._device_array(np.asarray(k.values, dtype=np.int64)),)
        self.functions[k.source]((k.groups,), (k.workgroup,), args)


class CudaRunner(Runner):
    """A runner on one CUDA device."""

    name = "cuda"

    def __init__(self, device: int = 0) -> None:
        super().__init__()
        import cupy

        self.device = device
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:
            raise BackendUnavailable(f"no usable CUDA device: {exc}", backend=f"cuda:{device}") from None
        if device >= count:
            raise BackendUnavailable(f"cuda:{device} does not exist ({count} device(s))", backend=f"cuda:{device}")
        self.location = f"cuda:{device}"
        self.emitter = CudaEmitter()
        self.capabilities = cuda_capabilities()

    def _device_array(self, host: np.ndarray) -> Any:
        import cupy

        with cupy.cuda.Device(self.device):
            return cupy.asarray(np.ascontiguousarray(host))

    def _upload(self, array: np.ndarray, dtype: DType) -> CudaTensor:
        return CudaTensor(self._device_array(np.asarray(array, dtype=dtype.numpy)), self)

    def check_dtype(self, d: DType) -> None:
        if d not in self.emitter.dtypes:
            from caramba.errors import UnsupportedOperation

            have = ", ".join(sorted(x.value for x in self.emitter.dtypes))
            raise UnsupportedOperation(f"{self.location} cannot hold {d} tensors (holds {have})", backend=self.location)

    def fill(self, shape: tuple[int, ...], dtype: DType, value: float) -> CudaTensor:
        import cupy

        self.check_dtype(dtype)
        with cupy.cuda.Device(self.device):
            out = cupy.empty(shape, dtype=dtype.numpy)
            n = out.size
            if n:
                k = fill_kernel(self.emitter, n, dtype, value)
                _function(self.device, k.source)((k.groups,), (k.workgroup,), (out,))
        return CudaTensor(out, self)

    def _compile(self, lowered: Graph, source: Graph, report: Any) -> CudaExecutable:
        return CudaExecutable(self, lowered, source, report)


# ---- compile-only ------------------------------------------------------------------------


class NullTensor(Tensor):
    """A host copy standing in for a device tensor on the compile-only runner."""

    __slots__ = ("array", "runner")

    def __init__(self, array: np.ndarray, runner: "CudaCompileOnlyRunner") -> None:
        self.array = array
        self.runner = runner

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def dtype(self) -> DType:
        from caramba.ir.dtypes import dtype as as_dtype

        return as_dtype(self.array.dtype)

    @property
    def location(self) -> str:
        return self.runner.location

    def download(self) -> np.ndarray:
        self.runner._check_open()
        return self.array.copy()


class CompileOnlyExecutable(Executable):
    """The lowered graph, its launch plan and the PTX of every kernel; running is refused."""

    def __init__(self, runner: "CudaCompileOnlyRunner", graph: Graph, source: Graph, report: Any) -> None:
        super().__init__(runner, graph, source, report)
        self.plan: Plan = make_plan(graph, runner.emitter)
        self.ptx: dict[str, str] = {}
        for k in self.plan.kernels:
            with _LOCK:
                ptx = _PTX.get(k.source)
            if ptx is None:
                ptx = compile_ptx(k.source, runner.arch, f"{k.name}.cu")
                with _LOCK:
                    _PTX[k.source] = ptx
            self.ptx[k.source] = ptx

    def _run(self, inputs: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        raise BackendUnavailable(
            f"{self.runner.location} only compiles: graph '{self.source.name}' was lowered and its "
            f"{len(self.ptx)} kernel(s) compiled to PTX, but nothing runs without a GPU",
            backend=self.runner.location,
        )


class CudaCompileOnlyRunner(Runner):
    """Lowers and compiles for cuda (capabilities, codegen, NVRTC -> PTX) and refuses to run."""

    name = "cuda"

    def __init__(self, device: int = 0, arch: str = "sm_90") -> None:
        super().__init__()
        self.device = device
        self.arch = arch
        self.location = f"cuda:{device}:compile-only"
        self.emitter = CudaEmitter()
        self.capabilities = cuda_capabilities()

    def _upload(self, array: np.ndarray, dtype: DType) -> NullTensor:
        return NullTensor(np.array(array, dtype=dtype.numpy, copy=True), self)

    def check_dtype(self, d: DType) -> None:
        CudaRunner.check_dtype(self, d)  # type: ignore[arg-type]

    def fill(self, shape: tuple[int, ...], dtype: DType, value: float) -> NullTensor:
        self.check_dtype(dtype)
        return NullTensor(np.full(shape, value, dtype=dtype.numpy), self)

    def _compile(self, lowered: Graph, source: Graph, report: Any) -> CompileOnlyExecutable:
        return CompileOnlyExecutable(self, lowered, source, report)
