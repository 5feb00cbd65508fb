"""The webgpu runner: resident wgpu buffers, WGSL kernels from the shared codegen, and one
command-encoder submit per graph execution (every dispatch of the graph in one compute pass).

Storage: float64 is f64 on a ``shader-f64`` device and f32 under the float32 contract; bool is
u32. ``upload``/``download`` convert explicitly between the logical dtype and the storage type.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np

from caramba.backends.codegen.capabilities import gpu_capabilities
from caramba.backends.codegen.kernels import fill_kernel
from caramba.backends.codegen.kernels.shape import INDEX_ERROR
from caramba.backends.codegen.plan import Plan, make_plan
from caramba.backends.codegen.program import Launch, LibraryCall, Slot
from caramba.backends.codegen.wgsl import WgslEmitter, dispatch_size
from caramba.backends.webgpu.device import Device, _wgpu, open_device
from caramba.compute.runner import Executable, Runner
from caramba.compute.tensor import Tensor
from caramba.errors import CarambaError, UnsupportedOperation
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph, Ref
from caramba.ir.types import ValueType


class IndexOutOfRange(CarambaError):
    """An index fed to gather/scatter/embedding was outside the indexed axis (checked on the device)."""


class WebGPUTensor(Tensor):
    __slots__ = ("_dtype", "_shape", "buffer", "runner")

    def __init__(self, buffer: Any, shape: tuple[int, ...], dtype: DType, runner: "WebGPURunner") -> None:
        self.buffer = buffer
        self._shape = tuple(shape)
        self._dtype = dtype
        self.runner = runner

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
        r = self.runner
        r._check_open()
        storage = r.emitter.host_storage(self._dtype)
        n = int(np.prod(self._shape, dtype=np.int64))
        if n == 0:
            return np.zeros(self._shape, self._dtype.numpy)
        raw = r.dev.device.queue.read_buffer(self.buffer, 0, n * storage.itemsize)
        host = np.frombuffer(raw, dtype=storage, count=n).reshape(self._shape)
        if self._dtype is DType.bool:
            return host != 0
        return host.astype(self._dtype.numpy)


class Pool:
    """Device buffers by byte size, reused across nodes and executions of one runner."""

    def __init__(self, runner: "WebGPURunner") -> None:
        self.runner = runner
        self.free: dict[int, list[Any]] = defaultdict(list)

    def take(self, nbytes: int) -> Any:
        size = max(16, -(-nbytes // 16) * 16)
        bucket = self.free.get(size)
        if bucket:
            return bucket.pop()
        return self.runner._new_buffer(size)

    def give(self, buf: Any) -> None:
        self.free[buf.size].append(buf)

    def clear(self) -> None:
        self.free.clear()


class WebGPUExecutable(Executable):
    def __init__(self, runner: "WebGPURunner", graph: Graph, source: Graph, report: Any) -> None:
        super().__init__(runner, graph, source, report)
        e = runner.emitter
        self.plan: Plan = make_plan(graph, e)
        limit = runner.dev.limits.get("max-storage-buffer-binding-size")
        for st in self.plan.steps:
            for t in st.program.temps:
                if limit and t.size * e.host_storage(t.dtype).itemsize > limit:
                    raise UnsupportedOperation(
                        f"{st.node.op} needs a {t.size}-element temporary, above this device's binding limit of {limit} bytes",
                        node=st.node.id, op=st.node.op, backend=runner.location,
                    )
        dev = runner.dev
        # compile every kernel now (cached per device by source): nothing compiles at run time
        self.pipelines = {k.source: dev.pipeline(k.source, k.params) for k in self.plan.kernels}
        self.consts = {ref: runner._upload_array(np.asarray(v), self.plan.types[ref].dtype) for ref, v in self.plan.constants.items()}
        # each kernel's sizes and strides (its params buffer), uploaded once
        self.params = {k.values: runner._params_buffer(k.values) for k in self.plan.kernels if k.values}
        # the last bind group of each launch, reused while it binds the same buffers (the pool
        # hands intermediates the same buffers run after run); it keeps those buffers alive
        self.groups: dict[int, tuple[tuple, Any, tuple]] = {}
        self.node_consts = [
            [runner._upload_array(c, self._const_dtype(c)) for c in st.program.consts] for st in self.plan.steps
        ]

    @staticmethod
    def _const_dtype(c: np.ndarray) -> DType:
        from caramba.ir.dtypes import dtype as as_dtype

        return as_dtype(c.dtype)

    def _run(self, inputs: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        runner: WebGPURunner = self.runner  # type: ignore[assignment]
        plan = self.plan
        e = runner.emitter
        dev = runner.dev.device
        pool = runner.pool
        bufs: dict[Ref, Any] = {}
        for ref, name in plan.inputs.items():
            bufs[ref] = inputs[name].buffer  # type: ignore[attr-defined]
        for ref, t in self.consts.items():
            bufs[ref] = t.buffer
        for ref, name in plan.state_reads.items():
            bufs[ref] = state[name].buffer  # type: ignore[attr-defined]
        err = runner._error_buffer() if plan.checks else None
        if err is not None:
            dev.queue.write_buffer(err, 0, np.zeros(4, np.uint32))
        encoder = dev.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        wgpu = _wgpu()
        for i, st in enumerate(plan.steps):
            for j, ref in enumerate(st.outputs):
                if j not in st.program.views:
                    bufs[ref] = pool.take(self._nbytes(e, plan.types[ref]))
            temps = [pool.take(t.size * e.host_storage(t.dtype).itemsize) for t in st.program.temps]

            def resolve(slot: Slot, st=st, temps=temps, i=i) -> Any:
                if slot.kind == "in":
                    return bufs[plan.root[st.inputs[slot.index]]]
                if slot.kind == "out":
                    return bufs[plan.root[st.outputs[slot.index]]]
                if slot.kind == "tmp":
                    return temps[slot.index]
                if slot.kind == "const":
                    return self.node_consts[i][slot.index].buffer
                return err

            for step in st.program.steps:
                if isinstance(step, LibraryCall):  # pragma: no cover - webgpu has no vendor library
                    raise UnsupportedOperation(f"webgpu has no library call {step.name}", node=st.node.id)
                self._dispatch(wgpu, dev, cpass, step, resolve)
            for t in temps:
                pool.give(t)
            for ref in st.release:
                pool.give(bufs[ref])
        cpass.end()
        dev.queue.submit([encoder.finish()])
        if err is not None:
            flag = int(np.frombuffer(dev.queue.read_buffer(err, 0, 4), np.uint32)[0])
            if flag == INDEX_ERROR:
                nodes = [st.node.id for st in plan.steps if st.program.checks]
                raise IndexOutOfRange(
                    f"an index was out of range in {', '.join(nodes)} (gather/scatter/embedding)",
                    node=nodes[0] if len(nodes) == 1 else None, backend=runner.location,
                )
        for name, ref in plan.state_writes:
            runner.state._values[name] = WebGPUTensor(bufs[plan.root[ref]], plan.types[ref].shape, plan.types[ref].dtype, runner)
        return {
            name: WebGPUTensor(bufs[plan.root[ref]], plan.types[ref].shape, plan.types[ref].dtype, runner)
            for name, ref in plan.outputs.items()
        }

    @staticmethod
    def _nbytes(e: WgslEmitter, t: ValueType) -> int:
        return t.size * e.host_storage(t.dtype).itemsize

    def _dispatch(self, wgpu, dev, cpass, launch: Launch, resolve) -> None:
        k = launch.kernel
        if k.groups == 0:
            return
        pipe, bgl = self.pipelines[k.source]
        buffers = tuple(resolve(s) for s in launch.args) + ((self.params[k.values],) if k.values else ())
        key = tuple(id(b) for b in buffers)
        cached = self.groups.get(id(launch))
        if cached is not None and cached[0] == key:
            group = cached[1]
        else:
            entries = [{"binding": b, "resource": {"buffer": buf}} for b, buf in enumerate(buffers)]
            group = dev.create_bind_group(layout=bgl, entries=entries)
            self.groups[id(launch)] = (key, group, buffers)
        cpass.set_pipeline(pipe)
        cpass.set_bind_group(0, group)
        cpass.dispatch_workgroups(*dispatch_size(k.groups))


class WebGPURunner(Runner):
    """A runner on one wgpu device (shared with other runners of the process)."""

    name = "webgpu"

    def __init__(self, precision: str | None = None, adapter: str | None = None) -> None:
        super().__init__()
        want = None if precision is None else precision == "float64"
        self.dev: Device = open_device(want, adapter)
        self.location = self.dev.location
        # compute float64 in float64 when the device has it (unless forced to the float32 contract);
        # float64 values are *stored* as f64 whenever the device has shader-f64
        compute64 = self.dev.float64 if precision is None else precision == "float64"
        self.emitter = WgslEmitter(float64=compute64, int64=self.dev.int64, store64=self.dev.float64)
        self.capabilities = gpu_capabilities(
            self.emitter,
            max_binding=self.dev.limits.get("max-storage-buffer-binding-size"),
            max_buffers=self.dev.limits.get("max-storage-buffers-per-shader-stage"),
        )
        self.pool = Pool(self)
        self._err = None
        self._params: dict[tuple[int, ...], Any] = {}

    # ---- buffers ---------------------------------------------------------------------------
    def _new_buffer(self, size: int) -> Any:
        wgpu = _wgpu()
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        return self.dev.device.create_buffer(size=size, usage=usage)

    def _params_buffer(self, values: tuple[int, ...]) -> Any:
        buf = self._params.get(values)
        if buf is None:
            data = np.asarray(values, dtype=np.int32)
            buf = self._new_buffer(max(16, -(-data.nbytes // 16) * 16))
            self.dev.device.queue.write_buffer(buf, 0, data)
            self._params[values] = buf
        return buf

    def _error_buffer(self) -> Any:
        if self._err is None:
            self._err = self._new_buffer(16)
        return self._err

    def check_dtype(self, d: DType) -> None:
        if d not in self.emitter.dtypes:
            have = ", ".join(sorted(x.value for x in self.emitter.dtypes))
            raise UnsupportedOperation(f"{self.location} cannot hold {d} tensors (holds {have})", backend=self.location)

    def _upload_array(self, array: np.ndarray, dtype: DType) -> WebGPUTensor:
        host = np.ascontiguousarray(array, dtype=self.emitter.host_storage(dtype))
        buf = self._new_buffer(max(16, -(-host.nbytes // 16) * 16))
        if host.nbytes:
            self.dev.device.queue.write_buffer(buf, 0, host)
        return WebGPUTensor(buf, array.shape, dtype, self)

    def _upload(self, array: np.ndarray, dtype: DType) -> WebGPUTensor:
        return self._upload_array(array, dtype)

    def fill(self, shape: tuple[int, ...], dtype: DType, value: float) -> WebGPUTensor:
        self.check_dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        buf = self._new_buffer(max(16, -(-n * self.emitter.host_storage(dtype).itemsize // 16) * 16))
        if value != 0 and n:  # new buffers are zeroed by WebGPU
            k = fill_kernel(self.emitter, n, dtype, value)
            pipe, bgl = self.dev.pipeline(k.source, k.params)
            dev = self.dev.device
            entries = [{"binding": 0, "resource": {"buffer": buf}}]
            if k.values:
                entries.append({"binding": 1, "resource": {"buffer": self._params_buffer(k.values)}})
            group = dev.create_bind_group(layout=bgl, entries=entries)
            enc = dev.create_command_encoder()
            p = enc.begin_compute_pass()
            p.set_pipeline(pipe)
            p.set_bind_group(0, group)
            p.dispatch_workgroups(*dispatch_size(k.groups))
            p.end()
            dev.queue.submit([enc.finish()])
        return WebGPUTensor(buf, shape, dtype, self)

    def _compile(self, lowered: Graph, source: Graph, report: Any) -> WebGPUExecutable:
        return WebGPUExecutable(self, lowered, source, report)

    def _close(self) -> None:
        self.pool.clear()
        self._params.clear()
        self._err = None
