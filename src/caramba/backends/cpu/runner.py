"""The cpu runner: NumPy arrays as resident tensors; graphs compiled to straight-line Python.

``compile`` generates one Python function per graph: each node becomes one line calling a
kernel that was specialized at compile time (attributes already read), so executing a graph
walks no graph and looks nothing up.
"""

from __future__ import annotations

import linecache
import traceback
from collections.abc import Mapping
from typing import Any

import numpy as np

from caramba.backends.cpu.capabilities import cpu_capabilities
from caramba.backends.cpu.kernels import KERNELS
from caramba.compute.runner import Executable, Runner
from caramba.compute.tensor import Tensor
from caramba.errors import CarambaError
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.graph import Graph, Ref


class CpuTensor(Tensor):
    __slots__ = ("array", "runner")

    def __init__(self, array: np.ndarray, runner: "CpuRunner") -> None:
        self.array = array
        self.runner = runner

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def dtype(self) -> DType:
        return as_dtype(self.array.dtype)

    @property
    def location(self) -> str:
        return "cpu"

    def download(self) -> np.ndarray:
        self.runner._check_open()
        return np.array(self.array, copy=True)


class KernelFailed(CarambaError):
    """A kernel raised while running; the message names the node and the original error."""


class CpuExecutable(Executable):
    def __init__(self, runner: "CpuRunner", graph: Graph, source: Graph, report: Any) -> None:
        super().__init__(runner, graph, source, report)
        self._fn, self._code_name, self._line_nodes = _generate(graph, runner.debug)
        self._writes = tuple(n.attrs["name"] for n in graph.nodes if n.op == "state.write")

    def _run(self, inputs: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        host_in = {k: t.array for k, t in inputs.items()}  # type: ignore[attr-defined]
        host_state = {k: t.array for k, t in state.items()}  # type: ignore[attr-defined]
        try:
            with np.errstate(all="ignore"):  # IEEE results (inf/nan) as every backend gives them
                outs = self._fn(host_in, host_state)
        except CarambaError as exc:
            node = self._failing_node(exc)
            if node is not None and exc.node is None:
                exc.node = node
                exc.args = (exc._render(),)
            raise
        except Exception as exc:  # a bug or an unchecked runtime condition in a kernel
            node = self._failing_node(exc)
            raise KernelFailed(f"{type(exc).__name__}: {exc}", node=node, backend="cpu") from exc
        runner = self.runner
        for name in self._writes:
            runner.state._values[name] = CpuTensor(np.asarray(host_state[name]), runner)
        return {k: CpuTensor(np.asarray(v), runner) for k, v in outs.items()}

    def _failing_node(self, exc: BaseException) -> str | None:
        for frame, lineno in traceback.walk_tb(exc.__traceback__):
            if frame.f_code.co_filename == self._code_name:
                return self._line_nodes.get(lineno)
        return None

    def source_code(self) -> str:
        return "".join(linecache.getlines(self._code_name))


_COUNTER = [0]


def _generate(graph: Graph, debug: bool):
    """Generate ``run(inputs, state) -> outputs`` for ``graph``; returns (fn, filename, line->node)."""
    env: dict[str, Any] = {"np": np}
    names: dict[Ref, str] = {}
    lines = ["def run(inputs, state):"]
    line_nodes: dict[int, str] = {}

    def emit(text: str, node_id: str) -> None:
        lines.append("    " + text)
        line_nodes[len(lines)] = node_id

    for i, node in enumerate(graph.nodes):
        outs = [f"v{i}_{j}" for j in range(len(node.types))]
        for j, var in enumerate(outs):
            names[Ref(node.id, j)] = var
        args = ", ".join(names[r] for r in node.inputs)
        if node.op == "graph.input":
            emit(f"{outs[0]} = inputs[{node.id!r}]", node.id)
        elif node.op == "graph.constant":
            env[outs[0]] = node.attrs["value"]
        elif node.op == "state.read":
            emit(f"{outs[0]} = state[{node.attrs['name']!r}]", node.id)
        elif node.op == "state.write":
            emit(f"state[{node.attrs['name']!r}] = {args}", node.id)
        else:
            in_types = tuple(graph.type_of(r) for r in node.inputs)
            env[f"k{i}"] = KERNELS[node.op](node, in_types)
            target = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"
            emit(f"{target} = k{i}({args})", node.id)
            if debug:
                env[f"t{i}"] = node.types
                emit(f"_check({', '.join(outs)}, t{i}, {node.id!r})", node.id)
    ret = ", ".join(f"{k!r}: {names[r]}" for k, r in graph.outputs.items())
    lines.append(f"    return {{{ret}}}")
    env["_check"] = _check_types
    _COUNTER[0] += 1
    filename = f"<caramba-cpu-{_COUNTER[0]}:{graph.name}>"
    src = "\n".join(lines) + "\n"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), env)
    return env["run"], filename, line_nodes


def _check_types(*args: Any) -> None:
    *values, types, node_id = args
    for v, t in zip(values, types, strict=True):
        a = np.asarray(v)
        if a.shape != t.shape or a.dtype != t.dtype.numpy:
            raise KernelFailed(
                f"cpu kernel produced {a.dtype}{list(a.shape)}, graph says {t}", node=node_id, backend="cpu"
            )


class CpuRunner(Runner):
    """The reference backend: float64-accurate NumPy kernels."""

    name = "cpu"
    location = "cpu"

    def __init__(self, threads: int | None = None, debug: bool = False) -> None:
        super().__init__()
        self.capabilities = cpu_capabilities()
        self.threads = threads
        self.debug = debug
        self._limits = None
        if threads is not None:
            from threadpoolctl import threadpool_limits

            # Process-wide while this runner lives (BLAS pools are global); restored on close.
            self._limits = threadpool_limits(limits=threads)

    def _upload(self, array: np.ndarray, dtype: DType) -> CpuTensor:
        arr = np.array(array, dtype=dtype.numpy, copy=True)
        arr.setflags(write=False)
        return CpuTensor(arr, self)

    def fill(self, shape: tuple[int, ...], dtype: DType, value: float) -> CpuTensor:
        return CpuTensor(np.full(shape, value, dtype=dtype.numpy), self)

    def check_dtype(self, d: DType) -> None:
        if d is DType.bfloat16:
            from caramba.errors import UnsupportedOperation

            raise UnsupportedOperation("the cpu backend has no bfloat16 arithmetic", backend="cpu")

    def _compile(self, lowered: Graph, source: Graph, report: Any) -> CpuExecutable:
        return CpuExecutable(self, lowered, source, report)

    def _close(self) -> None:
        if self._limits is not None:
            self._limits.restore_original_limits()
            self._limits = None
