"""The Backend actor: one runner (``caramba.compute.new(spec)``) behind messages.

Graphs arrive through the versioned IR codec (``ir.dumps``), so a remote worker compiles them
with the same op versions and the same pipeline. Tensors cross as dtype + shape + raw bytes;
state stays resident in the actor's runner between steps, exactly as it would locally.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from caramba.actors.base import Actor, Placement, handler
from caramba.actors.messages import Message
from caramba.errors import CarambaError


class TensorData(Message):
    """A host array on the wire: caramba dtype name, shape and C-order bytes."""

    dtype: str
    shape: list[int]
    data: bytes

    @classmethod
    def of(cls, array: np.ndarray) -> "TensorData":
        from caramba.ir.dtypes import dtype as as_dtype

        arr = np.asarray(array)  # (not ascontiguousarray: it makes 0-d arrays 1-d)
        return cls(dtype=as_dtype(arr.dtype).value, shape=list(arr.shape), data=arr.tobytes(order="C"))

    def array(self) -> np.ndarray:
        from caramba.ir.dtypes import dtype as as_dtype

        return np.frombuffer(self.data, dtype=as_dtype(self.dtype).numpy).reshape(tuple(self.shape)).copy()


class GetCapabilities(Message):
    pass


class BackendCaps(Message):
    location: str
    build: dict[str, str] = Field(default_factory=dict)
    ops: dict[str, list[str]] = Field(default_factory=dict)
    precision: dict[str, str] = Field(default_factory=dict)
    state: bool = True


class Compile(Message):
    graph: str  # ir.dumps(graph)
    targets: list[str] | None = None


class Program(Message):
    id: str
    inputs: dict[str, str] = Field(default_factory=dict)  # name -> printed type
    outputs: list[str] = Field(default_factory=list)
    report: str = ""


class Step(Message):
    """Run a compiled program; ``fetch`` names the outputs to send back (None: all)."""

    program: str
    inputs: dict[str, TensorData] = Field(default_factory=dict)
    fetch: list[str] | None = None


class Tensors(Message):
    values: dict[str, TensorData] = Field(default_factory=dict)


class SetState(Message):
    values: dict[str, TensorData]


class GetState(Message):
    names: list[str] | None = None


class UnknownProgram(CarambaError):
    """The program was never compiled on this Backend actor (or it restarted): compile it again."""


class BackendActor(Actor):
    """Owns one runner. Spawn it with ``placement=Placement(backend=name)`` so that it lands on
    a node that has the backend (``placement_for(spec)``)."""

    def __init__(self, spec: str = "cpu") -> None:
        self.spec = spec
        self.programs: dict = {}

    def started(self) -> None:
        from caramba import compute

        self.runner = compute.new(self.spec)

    def stopped(self) -> None:
        self.runner.close()

    @handler
    def capabilities(self, msg: GetCapabilities) -> BackendCaps:
        from caramba.compute.registry import build_info

        caps = self.runner.capabilities
        info = build_info(self.runner.name)
        return BackendCaps(
            location=self.runner.location,
            build={"available": str(info.available), **info.versions},
            ops={op: sorted(d.value for d in dts) for op, dts in sorted(caps.ops.items())},
            precision={k: v.value for k, v in caps.precision.items()},
            state=caps.state,
        )

    @handler
    def compile(self, msg: Compile) -> Program:
        from caramba import ir

        graph = ir.loads(msg.graph)
        exe = self.runner.compile(graph, msg.targets)
        pid = f"{graph.fingerprint()[:16]}:{','.join(exe.output_names)}"
        self.programs[pid] = exe
        report = exe.report.as_text() if hasattr(exe.report, "as_text") else ""
        return Program(id=pid, inputs={k: str(t) for k, t in exe.input_types.items()}, outputs=list(exe.output_names), report=report)

    def _program(self, pid: str):
        try:
            return self.programs[pid]
        except KeyError:
            raise UnknownProgram(f"program {pid!r} is not compiled on backend actor '{self.context.name}'") from None

    @handler
    def step(self, msg: Step) -> Tensors:
        exe = self._program(msg.program)
        inputs = {k: self.runner.upload(v.array(), v.dtype) for k, v in msg.inputs.items()}
        outs = exe.run(inputs)
        names = msg.fetch if msg.fetch is not None else list(outs)
        return Tensors(values={k: TensorData.of(outs[k].download()) for k in names})

    @handler
    def set_state(self, msg: SetState) -> None:
        for k, v in msg.values.items():
            self.runner.state[k] = self.runner.upload(v.array(), v.dtype)

    @handler
    def get_state(self, msg: GetState) -> Tensors:
        names = msg.names if msg.names is not None else sorted(self.runner.state)
        return Tensors(values={k: TensorData.of(self.runner.state[k].download()) for k in names})


def placement_for(spec: str) -> Placement:
    """Place a Backend actor for ``spec`` (``"xla:..."``) on a node that has that backend."""
    return Placement(backend=spec.partition(":")[0])
