"""The cpu runner: NumPy arrays as resident tensors; graphs compiled to straight-line Python.

``compile`` generates one Python function per graph: each node becomes one line calling a
kernel that was specialized at compile time (attributes already read), so executing a graph
walks no graph and looks nothing up. Fused nodes call generated Numba kernels
(``backends/cpu/fused``); with a memory plan, every intermediate an out-capable kernel
produces is written into its planned view of one arena allocated at compile time.
"""

from __future__ import annotations

import linecache
import threading
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from caramba.backends.cpu.capabilities import cpu_capabilities
from caramba.backends.cpu.kernels import KERNELS, OUT
from caramba.backends.cpu.kernels.shape import update_rows_kernel
from caramba.compute.runner import Executable, Runner
from caramba.compute.tensor import Tensor
from caramba.errors import CarambaError
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.graph import Graph, Ref

if TYPE_CHECKING:
    from caramba.compiler.memory import MemoryPlan

# np.errstate(all="ignore") as a bare context-variable set/reset: the context manager costs
# ~2 µs a run in NumPy 2 (a one-node graph's whole kernel is 1-2 µs); None: NumPy has moved
# these, use np.errstate
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _FP_STATE
    from numpy._core._ufunc_config import _make_extobj

    _FP_IGNORE: Any = _make_extobj(all="ignore")
except Exception:  # private NumPy names: any failure means the public path
    _FP_STATE = _FP_IGNORE = None


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
        plan = getattr(report, "memory", None)
        if plan is not None and plan.order != tuple(n.id for n in graph.nodes):
            plan = None  # made for another node order: not applicable
        self.plan = plan
        self._fn, self._code_name, self._line_nodes = _generate(graph, runner.debug, plan)
        self._writes = tuple(n.attrs["name"] for n in graph.nodes if n.op == "state.write")
        self._aliasing = _may_alias_state(graph)
        # Planned buffers are reused by every run: one run at a time.
        self._lock = threading.Lock() if plan is not None and plan.slots else None
        self._stateless = not self._state_decls

    def run(self, inputs: Mapping[str, Tensor] | None = None) -> dict[str, Tensor]:
        """``Executable.run``; a graph without state, rerun on the tensors of a run that passed
        every check, goes straight to its kernels. Why: a one-node graph's whole call is a few
        µs, and the state bookkeeping of the general path was a fifth of softmax 8x64's."""
        if self._stateless and self._is_rerun(inputs, self.runner.state):
            host_in = {}
            for name, t in inputs.items():  # type: ignore[union-attr]
                host_in[name] = t.array  # type: ignore[attr-defined]
            return self._tensors(self._execute(host_in, {}))
        return super().run(inputs)

    def _run(self, inputs: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        host_in = {k: t.array for k, t in inputs.items()}  # type: ignore[attr-defined]
        host_state = {k: t.array for k, t in state.items()} if state else {}  # type: ignore[attr-defined]
        outs = self._execute(host_in, host_state)
        runner = self.runner
        for name in self._writes:
            runner.state._values[name] = CpuTensor(np.asarray(host_state[name]), runner)
        for k in self._aliasing:  # an output that may be (a view of) state: freeze that state's array
            _freeze_shared(outs[k], host_state.values())
        return self._tensors(outs)

    def _execute(self, host_in: dict[str, Any], host_state: dict[str, Any]) -> dict[str, Any]:
        """The generated function on host arrays, under IEEE error handling; a failure names its node."""
        try:
            if _FP_IGNORE is not None:  # IEEE results (inf/nan) as every backend gives them
                token = _FP_STATE.set(_FP_IGNORE)
                try:
                    return self._call(host_in, host_state)
                finally:
                    _FP_STATE.reset(token)
            with np.errstate(all="ignore"):
                return self._call(host_in, host_state)
        except CarambaError as exc:
            node = self._failing_node(exc)
            if node is not None and exc.node is None:
                exc.node = node
                exc.args = (exc._render(),)
            raise
        except Exception as exc:  # a bug or an unchecked runtime condition in a kernel
            node = self._failing_node(exc)
            raise KernelFailed(f"{type(exc).__name__}: {exc}", node=node, backend="cpu") from exc

    def _tensors(self, outs: dict[str, Any]) -> dict[str, Tensor]:
        runner, ndarray = self.runner, np.ndarray  # kernels give arrays (NumPy scalars from a few: made 0-d arrays)
        res: dict[str, Tensor] = {}
        for k, v in outs.items():  # a loop: a dict comprehension is a function call more
            res[k] = CpuTensor(v if type(v) is ndarray else np.asarray(v), runner)
        return res

    def _call(self, host_in: dict[str, Any], host_state: dict[str, Any]) -> Any:
        if self._lock is None:
            return self._fn(host_in, host_state)
        with self._lock:
            return self._fn(host_in, host_state)

    def _failing_node(self, exc: BaseException) -> str | None:
        for frame, lineno in traceback.walk_tb(exc.__traceback__):
            if frame.f_code.co_filename == self._code_name:
                return self._line_nodes.get(lineno)
        return None

    def source_code(self) -> str:
        return "".join(linecache.getlines(self._code_name))


def _freeze_shared(value: Any, arrays: Any) -> None:
    for a in arrays:
        if isinstance(a, np.ndarray) and a.flags.writeable and np.may_share_memory(value, a):
            a.setflags(write=False)  # the next in-place update copies it first


_COUNTER = [0]
_VIEWS_CONTIGUOUS = frozenset({"shape.reshape", "shape.expand_dims", "shape.squeeze"})


def _hints(graph: Graph, writes_out: frozenset[str]) -> dict[Ref, tuple[bool, bool]]:
    """Likely (contiguous, readonly) of each value at run time, to compile fused kernels for
    the argument types they will see (another combination compiles lazily, also cached)."""
    hints: dict[Ref, tuple[bool, bool]] = {}
    for node in graph.nodes:
        ins = [hints[r] for r in node.inputs]
        if node.op in ("graph.input", "graph.constant", "state.read", "shape.iota"):  # iota: a read-only constant
            h = (True, True)
        elif node.op in writes_out or not node.op.startswith("shape."):
            h = (True, False)
        else:  # a view (or copy) of its first input
            c, ro = ins[0] if ins else (True, False)
            h = (c and node.op in _VIEWS_CONTIGUOUS, ro or node.op == "shape.broadcast_to")
        for j in range(len(node.types)):
            hints[Ref(node.id, j)] = h
    return hints


def _in_place_updates(graph: Graph) -> frozenset[str]:
    """Nodes ``shape.update_rows(state.read(S), ...)`` whose result is written back to S, where
    that read is the graph's only read of S and has no other use: their kernel may update the
    state's array itself (a KV-cache append costs its new rows, not a copy of the cache)."""
    reads: dict[str, list[Any]] = {}
    uses: dict[Ref, int] = {}
    for node in graph.nodes:
        if node.op == "state.read":
            reads.setdefault(node.attrs["name"], []).append(node)
        for r in node.inputs:
            uses[r] = uses.get(r, 0) + 1
    outputs = set(graph.outputs.values())
    written = {(n.inputs[0], n.attrs["name"]) for n in graph.nodes if n.op == "state.write"}
    found = set()
    for node in graph.nodes:
        if node.op != "shape.update_rows":
            continue
        src = graph.node(node.inputs[0].node)
        if src.op != "state.read":
            continue
        name = src.attrs["name"]
        if (len(reads[name]) == 1 and uses.get(node.inputs[0]) == 1 and node.inputs[0] not in outputs
                and (node.outputs[0], name) in written):
            found.add(node.id)
    return frozenset(found)


def _may_alias_state(graph: Graph) -> tuple[str, ...]:
    """Outputs that may share memory with a state array (a state read, a value written to
    state, or a view of one): the runner makes those arrays read-only after the run, so no
    later in-place update can change a tensor a caller holds."""
    alias: set[Ref] = {n.inputs[0] for n in graph.nodes if n.op == "state.write"}
    for node in graph.nodes:
        if node.op == "state.read" or (node.op.startswith("shape.") and node.op != "shape.update_rows"
                                       and any(r in alias for r in node.inputs)):
            alias.update(node.outputs)
    return tuple(k for k, r in graph.outputs.items() if r in alias)


def _arena(nbytes: int) -> np.ndarray:
    """``nbytes`` of storage starting on a 64-byte boundary."""
    try:
        raw = np.empty(nbytes + 64, dtype=np.uint8)
    except MemoryError:
        from caramba.errors import ResourceError

        raise ResourceError(
            f"the compiled graph needs {nbytes / 2**30:.1f} GiB of working memory (its planned buffers) and this "
            "host could not allocate it", backend="cpu",
            hint="make the batch or the model smaller (e.g. trainer.batch_size), or run on a larger machine") from None
    start = (-raw.ctypes.data) % 64
    return raw[start : start + nbytes]


def _generate(graph: Graph, debug: bool, plan: "MemoryPlan | None" = None):
    """Generate ``run(inputs, state) -> outputs`` for ``graph``; returns (fn, filename, line->node).

    Every kernel, constant and planned buffer is bound as a default argument (a local: no
    global lookups per node). With a memory plan, out-capable kernels write into their planned
    views of one preallocated arena, and every other value is released after its last use.
    """
    from caramba.backends.cpu.fused import FACTORIES, jit

    writes_out = frozenset(OUT) | frozenset(FACTORIES)
    in_place = _in_place_updates(graph) if any(n.op == "shape.update_rows" for n in graph.nodes) else frozenset()
    env: dict[str, Any] = {"_empty": np.empty, "_asarray": np.asarray}
    names: dict[Ref, str] = {}
    lines: list[str] = []
    line_nodes: dict[int, str] = {}
    hints = _hints(graph, writes_out) if any(n.op in FACTORIES for n in graph.nodes) else {}
    arena = _arena(plan.arena_bytes) if plan is not None and plan.slots else None
    last_use: dict[Ref, int] = {}
    for i, node in enumerate(graph.nodes):
        for r in node.inputs:
            last_use[r] = i
    kept = set(graph.outputs.values())

    def emit(text: str, node_id: str) -> None:
        lines.append("    " + text)
        line_nodes[len(lines) + 1] = node_id  # +1: the def line comes first

    def bind(name: str, value: Any) -> str:
        env[name] = value
        return name

    # the kernels new to this process compile together at the end, on two cores where there are two
    with jit.batch():
        for i, node in enumerate(graph.nodes):
            outs = [f"v{i}_{j}" for j in range(len(node.types))]
            refs = node.outputs
            args = [names[r] for r in node.inputs]
            if node.op == "graph.input":
                emit(f"{outs[0]} = inputs[{node.id!r}]", node.id)
            elif node.op == "graph.constant":
                outs[0] = bind(f"c{i}", node.attrs["value"])
            elif node.op == "state.read":
                emit(f"{outs[0]} = state[{node.attrs['name']!r}]", node.id)
            elif node.op == "state.write":
                emit(f"state[{node.attrs['name']!r}] = {args[0]}", node.id)
            else:
                in_types = tuple(graph.type_of(r) for r in node.inputs)
                placed = [plan.slots.get(r) if plan is not None else None for r in refs]
                if node.op in FACTORIES:
                    kern = FACTORIES[node.op](node, in_types, [hints[r] for r in node.inputs])
                elif node.id in in_place:
                    kern = update_rows_kernel(node, in_types, in_place=True)
                else:
                    kern = KERNELS[node.op](node, in_types)
                k = bind(f"k{i}", kern)
                if any(placed) or node.op in FACTORIES:
                    if node.op not in writes_out:
                        raise KernelFailed(f"memory plan places {node.op}, whose cpu kernel cannot write into a buffer",
                                           node=node.id, backend="cpu")
                    for j, (slot, t) in enumerate(zip(placed, node.types, strict=True)):
                        if slot is not None:
                            view = arena[slot.offset : slot.offset + slot.nbytes].view(t.dtype.numpy).reshape(t.shape)
                            outs[j] = bind(f"b{i}_{j}", view)
                        else:
                            emit(f"{outs[j]} = _empty({bind(f's{i}_{j}', t.shape)}, {bind(f'd{i}_{j}', t.dtype.numpy)})",
                                 node.id)
                    emit(f"{k}({', '.join(args + outs)})", node.id)
                else:
                    target = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"
                    call = f"{k}({', '.join(args)})"
                    if len(outs) == 1 and node.types[0].rank == 0:
                        call = f"_asarray({call})"  # NumPy gives 0-d results as scalars
                    emit(f"{target} = {call}", node.id)
                if debug:
                    bind(f"t{i}", node.types)
                    emit(f"_check({', '.join(outs)}, t{i}, {node.id!r})", node.id)
            for j, r in enumerate(refs):
                names[r] = outs[j]
            if plan is not None:
                # Release what this node was the last user of (never buffers, outputs or constants).
                dead = [names[r] for r in dict.fromkeys(node.inputs) if last_use[r] == i and r not in kept
                        and names[r].startswith("v")]
                dead += [names[r] for r in refs if r not in last_use and r not in kept and names[r].startswith("v")]
                if dead:
                    emit(f"del {', '.join(dead)}", node.id)
    ret = ", ".join(f"{k!r}: {names[r]}" for k, r in graph.outputs.items())
    lines.append(f"    return {{{ret}}}")
    env["_check"] = _check_types
    defaults = [k for k in env if k not in ("_check",)]
    header = "def run(inputs, state, " + ", ".join(f"{k}={k}" for k in defaults) + "):"
    _COUNTER[0] += 1
    filename = f"<caramba-cpu-{_COUNTER[0]}:{graph.name}>"
    src = "\n".join([header, *lines]) + "\n"
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

    def compiling_together(self):
        """The new Numba kernels of every graph compiled in the block compile at its end, shared
        with a forked helper on another core (``fused/jit.batch``, ``fused/fork_compile.py``)."""
        from caramba.backends.cpu.fused import jit

        return jit.batch()

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

    def _adopt(self, array: np.ndarray, dtype: DType) -> CpuTensor:
        array.setflags(write=False)  # resident tensors are immutable; the donor gave it up
        return CpuTensor(array, self)

    def _lend(self, tensor: Tensor) -> None:
        tensor.array.setflags(write=False)  # type: ignore[attr-defined]

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
