"""The onnx runner: resident OrtValues; one InferenceSession per graph, run with IO binding.

A graph is exported to ONNX (``caramba.onnx.export`` with the ORT CPU profile). ONNX graphs
are pure: the state a graph reads is bound as session inputs and the state it writes comes
back as session outputs, which the runner keeps as its new resident state: no host round
trip. With a non-CPU execution provider, ORT's CPU fallback is disabled, so a node that
provider cannot run fails session creation (at compile time) instead of moving to the CPU.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
import onnxruntime as ort

from caramba.backends.onnx.capabilities import onnx_capabilities
from caramba.compute.runner import Executable, Runner
from caramba.compute.spare import Spare
from caramba.compute.tensor import Tensor
from caramba.errors import BackendUnavailable, CarambaError, UnsupportedOperation
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph
from caramba.onnx.export import ORT_CPU, RUNTIME_CHECKS, export_graph
from caramba.ops.cost import graph_flops

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
LEVELS = {
    "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


SMALL_WORK = 1 << 19  # flops (ops.cost.graph_flops) below which a session runs single-threaded


class KernelFailed(CarambaError):
    """ONNX Runtime reported an error while running a graph (e.g. an index out of range); the
    message names the caramba node whose ONNX nodes failed."""


class OnnxTensor(Tensor):
    __slots__ = ("_dtype", "_shape", "runner", "value")

    def __init__(self, value: Any, runner: "OnnxRunner", shape: tuple[int, ...], dtype: DType) -> None:
        self.value = value
        self.runner = runner
        self._shape = shape
        self._dtype = dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def location(self) -> str:
        return self.runner.location

    def download(self) -> np.ndarray:
        self.runner._check_open()
        return np.array(self.value.numpy(), copy=True)


_NODE_NAME = re.compile(r"Name:'([^'|]*)\|")


class OnnxExecutable(Executable):
    def __init__(self, runner: "OnnxRunner", graph: Graph, source: Graph, report: Any) -> None:
        super().__init__(runner, graph, source, report)
        self.exported = export_graph(graph, ORT_CPU)
        self.session = runner._session(self.exported.model, graph)
        ex = self.exported
        self._inputs = tuple(ex.inputs.items())
        self._state_in = tuple(ex.state_inputs.items())
        self._outputs = tuple((name, ex.outputs[name], graph.type_of(ref)) for name, ref in graph.outputs.items())
        self._state_out = tuple((name, onnx_name, graph.state[name].type) for name, onnx_name in ex.state_outputs.items())
        self._out_names = tuple(o[1] for o in self._outputs) + tuple(s[1] for s in self._state_out)
        # The C-level session and binding: the Python wrappers add ~10 us of checks per call.
        self._binding = self.session.io_binding()._iobinding
        self._sess = self.session._sess
        self._device = runner.ort_device
        self._spares = [Spare(2) for _ in self._out_names]  # per output: the live value and a released one
        self._bound: list[Any] = [None] * (len(self._inputs) + len(self._state_in))

    @property
    def model(self) -> Any:
        """The ONNX model ONNX Runtime runs for this graph."""
        return self.exported.model

    def _run(self, inputs: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        # Plain loops throughout: comprehensions and nested tuples cost ~1 µs more per call,
        # which small graphs feel (see Executable._is_rerun).
        b = self._binding
        self._bind(self._state_in, state, self._bind(self._inputs, inputs, 0))
        # Each output goes into a buffer nobody else can see: one this executable returned
        # before and that no tensor, state slot or caller holds any more (CPython's reference
        # count says so), else a fresh one ORT allocates. Results of earlier runs that are
        # still held stay valid; a small graph's call no longer pays an allocation per output
        # (~10% of dense+GELU 8x128x256).
        taken = []
        fresh = False
        for spare, onnx_name in zip(self._spares, self._out_names):
            v = spare.take()
            if v is None:
                b.bind_output(onnx_name, self._device)
                fresh = True
            else:
                b.bind_ortvalue_output(onnx_name, v._ortvalue)
            taken.append(v)
        try:
            self._sess.run_with_iobinding(b, None)
        except Exception as exc:  # ORT raises its own exception types
            raise self._failure(exc) from None
        if fresh:
            vec = b.get_outputs()
            for i, v in enumerate(taken):
                if v is None:
                    taken[i] = v = ort.OrtValue(vec[i])
                    self._spares[i].keep(v)
        runner = self.runner
        if self._state_out:
            store = runner.state._values
            i = len(self._outputs)
            for name, _, t in self._state_out:
                store[name] = OnnxTensor(taken[i], runner, t.shape, t.dtype)
                i += 1
        out = {}
        i = 0
        for name, _, t in self._outputs:
            out[name] = OnnxTensor(taken[i], runner, t.shape, t.dtype)
            i += 1
        return out

    def _bind(self, names: tuple[tuple[str, str], ...], tensors: Mapping[str, Tensor], j: int) -> int:
        """Bind ``tensors`` as the session inputs ``names`` (slots from ``j`` on); the binding
        keeps what it was given, so only what changed since the last run is bound again."""
        b, bound = self._binding, self._bound
        for name, onnx_name in names:
            ov = tensors[name].value._ortvalue  # type: ignore[attr-defined]
            if bound[j] is not ov:
                b.bind_ortvalue_input(onnx_name, ov)
                bound[j] = ov
            j += 1
        return j

    def _failure(self, exc: Exception) -> CarambaError:
        text = str(exc)
        m = _NODE_NAME.search(text)
        node = m.group(1) if m else None
        status = text.split("Status Message:", 1)[-1].strip() if "Status Message:" in text else text
        op = next((n.op for n in self.graph.nodes if n.id == node), None) if node else None
        if op in RUNTIME_CHECKS and "out of data bounds" in status:
            status = f"{op}'s run-time check failed: it needs {RUNTIME_CHECKS[op]} ({status})"
        return KernelFailed(f"ONNX Runtime failed: {status}", node=node, backend=self.runner.location)


class OnnxRunner(Runner):
    """Tensors are OrtValues on the provider's device; graphs are ORT sessions."""

    name = "onnx"

    def __init__(self, provider: str = "cpu", threads: int | None = None, opt: str = "all") -> None:
        super().__init__()
        available = ort.get_available_providers()
        if PROVIDERS[provider] not in available:
            raise BackendUnavailable(
                f"backend 'onnx:{provider}' is not available here: onnxruntime {ort.__version__} has providers "
                f"{', '.join(available)}",
                backend=f"onnx:{provider}",
                hint="pip install onnxruntime-gpu for the CUDA provider" if provider == "cuda" else None,
            )
        self.provider = provider
        self.threads = threads
        self.opt = opt
        self.device = provider  # OrtValue device type: "cpu" or "cuda"
        self.ort_device = ort.OrtDevice.make(provider, 0)._get_c_device()
        self.location = f"onnx:{provider}"
        self.capabilities = onnx_capabilities()

    def _session(self, model: Any, graph: Graph) -> Any:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = LEVELS[self.opt]
        if self.threads is not None:
            so.intra_op_num_threads = self.threads
        elif graph_flops(graph) < SMALL_WORK:
            # A thread pool costs more to start (per session) than it can save on tiny graphs.
            so.intra_op_num_threads = 1
        if self.provider != "cpu":
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        try:
            return ort.InferenceSession(model.SerializeToString(), so, providers=[PROVIDERS[self.provider]])
        except Exception as exc:
            m = _NODE_NAME.search(str(exc))
            raise UnsupportedOperation(
                f"ONNX Runtime ({PROVIDERS[self.provider]}) refused graph '{graph.name}': {str(exc).splitlines()[0]}",
                node=m.group(1) if m else None,
                backend=self.location,
            ) from None

    def _upload(self, array: np.ndarray, dtype: DType) -> OnnxTensor:
        # ORT wraps a CPU numpy array without copying: give it a private copy.
        arr = np.array(array, dtype=dtype.numpy, copy=True, order="C")
        return OnnxTensor(ort.OrtValue.ortvalue_from_numpy(arr, self.device, 0), self, arr.shape, dtype)

    def fill(self, shape: tuple[int, ...], dtype: DType, value: float) -> OnnxTensor:
        arr = np.full(shape, value, dtype=dtype.numpy)
        return OnnxTensor(ort.OrtValue.ortvalue_from_numpy(arr, self.device, 0), self, tuple(shape), dtype)

    def check_dtype(self, d: DType) -> None:
        if d is DType.bfloat16:
            raise UnsupportedOperation("ONNX Runtime has no bfloat16 arithmetic on this provider", backend=self.location)

    def _compile(self, lowered: Graph, source: Graph, report: Any) -> OnnxExecutable:
        return OnnxExecutable(self, lowered, source, report)
