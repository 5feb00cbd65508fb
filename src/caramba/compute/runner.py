"""Runner and Executable: the backend contract every backend implements.

A backend subclasses Runner (upload, _compile) and Executable (_run). The base classes do the
checks that must be the same everywhere: closed runners, tensor locations, input names,
shapes and dtypes, state initialization, compile caching by graph fingerprint.
"""

from __future__ import annotations

import contextlib
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

import numpy as np

from caramba.compute.capabilities import Capabilities
from caramba.compute.tensor import Location, Tensor
from caramba.errors import GraphError, RunnerClosed, StateError, TransferError
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.graph import Graph, StateDecl


class StateStore(MutableMapping[str, Tensor]):
    """Resident state of a runner, by hierarchical name. Setting it is an explicit transfer:
    values must be tensors of this runner (``runner.upload(array)``)."""

    def __init__(self, runner: "Runner") -> None:
        self._runner = runner
        self._values: dict[str, Tensor] = {}
        # Bumped by every change of what the store holds (and by every run of a graph that writes):
        # an executable whose last run left it unchanged skips re-checking its state's types.
        self.version = 0

    def __getitem__(self, name: str) -> Tensor:
        try:
            t = self._values[name]
        except KeyError:
            raise StateError(f"no state '{name}' on runner {self._runner.location}") from None
        self._runner._lend(t)
        return t

    def __setitem__(self, name: str, value: Tensor) -> None:
        self._runner._check_open()
        self._runner.check_tensor(value, f"state '{name}'")
        self._values[name] = value
        self.version += 1

    def __delitem__(self, name: str) -> None:
        del self._values[name]
        self.version += 1

    def __contains__(self, name: object) -> bool:  # Mapping's default would raise StateError
        return name in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def ensure(self, decl: StateDecl) -> Tensor:
        """The state tensor for ``decl``; zeros/ones state is created on the device when first used."""
        t = self._values.get(decl.name)
        if t is None:
            if decl.init == "external":
                raise StateError(
                    f"state '{decl.name}' ({decl.type}) is not set on runner {self._runner.location}",
                    hint=f"runner.state[{decl.name!r}] = runner.upload(initial_value)",
                )
            t = self._runner.fill(decl.type.shape, decl.type.dtype, 0.0 if decl.init == "zeros" else 1.0)
            self._values[decl.name] = t
            self.version += 1
        elif t.shape != decl.type.shape or t.dtype != decl.type.dtype:
            raise StateError(f"state '{decl.name}' holds {t.type} but the graph declares {decl.type}")
        return t


class Executable(ABC):
    """A compiled graph bound to one runner. ``run(inputs)`` -> ``{output name: Tensor}``."""

    def __init__(self, runner: "Runner", graph: Graph, source: Graph, report: Any = None) -> None:
        self.runner = runner
        self.graph = graph  # after the pipeline
        self.source = source  # as given
        self.report = report  # the pipeline's report (passes, diagnostics, memory plan)
        self.input_types = {n.id: n.types[0] for n in graph.inputs}
        self.output_names = tuple(graph.outputs)
        self._state_decls = tuple(graph.state.values())
        self._state_checked_at = -1  # the store's version after this executable's last run
        # The inputs of the last run that passed the checks, weakly (a dropped batch is not kept
        # alive for this): a tensor's runner and type never change, so the same tensors again
        # need no second look.
        self._checked_inputs: tuple[tuple[str, weakref.ref], ...] = ()
        self._writes_state = any(n.op == "state.write" for n in graph.nodes)

    def run(self, inputs: Mapping[str, Tensor] | None = None) -> dict[str, Tensor]:
        store = self.runner.state
        if not self._is_rerun(inputs, store):  # a rerun is the common loop: ~1 µs (see _is_rerun)
            inputs = self._checked(inputs or {})
        state = {}
        if store.version == self._state_checked_at:  # the state as our last run left it
            values = store._values
            for d in self._state_decls:
                state[d.name] = values[d.name]
        else:
            for d in self._state_decls:
                state[d.name] = store.ensure(d)
        if self._writes_state:  # other graphs may declare other types for what this one writes
            store.version += 1
        out = self._run(inputs, state)  # type: ignore[arg-type]
        self._state_checked_at = store.version
        return out

    def _is_rerun(self, inputs: Mapping[str, Tensor] | None, store: StateStore) -> bool:
        """The same input tensors as a run that passed every check, and the state as this
        executable's last run left it: nothing to check again.

        Why it matters: the Python a backend runs between one result and the next call is paid
        more than once on small graphs. XLA's and ONNX Runtime's worker threads spin a little,
        then sleep, and a call that comes late waits for them to wake (dense+GELU 8x128x256 on
        xla: 10 µs of Python before each call cost +14%); spinning workers also slow the Python
        itself on a 2-core machine."""
        checked = self._checked_inputs
        if (self.runner._closed or not inputs or store.version != self._state_checked_at
                or len(inputs) != len(checked)):
            return False
        for name, ref in checked:
            t = inputs.get(name)
            if t is None or t is not ref():
                return False
        return True

    def _checked(self, inputs: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        """``inputs`` after the full checks: the graph's names, tensors of this runner, the
        declared types. Raises the error that explains the first thing wrong."""
        runner = self.runner
        runner._check_open()
        types = self.input_types
        if inputs.keys() != types.keys():
            missing = [n for n in types if n not in inputs]
            extra = [n for n in inputs if n not in types]
            raise GraphError(
                f"graph '{self.source.name}' inputs are {sorted(types)}; "
                + (f"missing {missing} " if missing else "")
                + (f"unexpected {extra}" if extra else "")
            )
        for name, t in inputs.items():
            if getattr(t, "runner", None) is not runner:  # not one of ours at a glance: the full check
                runner.check_tensor(t, f"input '{name}'")
            want = types[name]
            if t.shape != want.shape or t.dtype != want.dtype:
                raise GraphError(f"input '{name}' is {t.type} but the graph declares {want}", node=name)
        self._checked_inputs = tuple((name, weakref.ref(t)) for name, t in inputs.items())
        return inputs

    @abstractmethod
    def _run(self, inputs: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> dict[str, Tensor]: ...

    def as_text(self) -> str:
        return self.graph.as_text()


class Runner(ABC):
    """One backend instance: owns its tensors, its state and its compiled graphs."""

    name: str = "?"
    location: Location = "?"
    capabilities: Capabilities

    def __init__(self) -> None:
        self._closed = False
        self._cache: dict[tuple, Executable] = {}
        self.state = StateStore(self)

    # ---- transfers ---------------------------------------------------------------------
    def upload(self, array: Any, dtype: "DType | str | None" = None, *, donate: bool = False) -> Tensor:
        """Copy host data into a new tensor on this backend (the only way data enters).

        ``donate=True`` hands a NumPy array over: a backend whose tensors live in host memory
        (cpu) keeps that very array (made read-only) instead of a copy, when it already has the
        dtype and layout; the caller must not use it afterwards. Loading a large model this way
        never holds a weight twice."""
        self._check_open()
        if isinstance(array, Tensor):
            raise TransferError(
                f"upload takes host data; got a tensor already on {array.location}",
                backend=self.location,
                hint="download() it first if you mean to copy it between backends",
            )
        arr = np.asarray(array)
        d = as_dtype(dtype) if dtype is not None else as_dtype(arr.dtype)
        self.check_dtype(d)
        if (donate and isinstance(array, np.ndarray) and arr.base is None and arr.flags.c_contiguous
                and arr.flags.writeable and arr.dtype == d.numpy):
            kept = self._adopt(arr, d)
            if kept is not None:
                return kept
        return self._upload(np.ascontiguousarray(arr, dtype=d.numpy).reshape(arr.shape), d)

    def _adopt(self, array: np.ndarray, dtype: DType) -> Tensor | None:
        """Keep a donated host array as a tensor without copying it (None: this backend copies)."""
        return None

    def evaluate_constant(self, node: Any, in_types: list[Any], consts: list[np.ndarray]) -> np.ndarray | None:
        """Constant folding's host evaluator for graphs compiled here: ``node`` applied to
        constant inputs, or None. Every backend folds with the cpu reference kernels (the
        float64-accurate NumPy definitions the compliance suite checks all backends against);
        the compiler gets it from the runner and never imports a backend itself."""
        from caramba.backends.cpu.fold import evaluate

        return evaluate(node, in_types, consts)

    def _lend(self, tensor: Tensor) -> None:  # noqa: B027 - optional hook
        """``tensor`` (resident state) is handed to a caller: a backend that updates state in
        place stops doing so for this buffer (its next update copies first)."""

    def check_dtype(self, d: DType) -> None:  # noqa: B027 - optional hook
        """Raise UnsupportedOperation if tensors of dtype ``d`` cannot live here (default: all can)."""

    @abstractmethod
    def _upload(self, array: np.ndarray, dtype: DType) -> Tensor: ...

    @abstractmethod
    def fill(self, shape: tuple[int, ...], dtype: DType, value: float) -> Tensor:
        """A new tensor filled with ``value``, made on the device."""

    def check_tensor(self, t: Any, what: str) -> None:
        if isinstance(t, Tensor):
            if t.location != self.location or not self._owns(t):
                where = t.location if t.location != self.location else f"another {t.location} runner"
                raise TransferError(
                    f"{what} lives on {where}, not on this runner ({self.location})",
                    backend=self.location,
                    hint="tensors never move implicitly: t.download() then runner.upload(...)",
                )
            return
        raise TransferError(
            f"{what} is a {type(t).__name__}, not a tensor of {self.location}",
            backend=self.location,
            hint="upload host data explicitly with runner.upload(array)",
        )

    def _owns(self, t: Tensor) -> bool:
        return getattr(t, "runner", self) is self

    # ---- compile and execute -------------------------------------------------------------
    def compiling_together(self) -> contextlib.AbstractContextManager[None]:
        """A block whose ``compile`` calls may share their work: a backend can compile their
        kernels together when the block ends (the cpu backend: its new Numba kernels, on two
        cores). What is compiled inside runs only after the block; by default nothing changes."""
        return contextlib.nullcontext()

    def compile(self, graph: Graph, targets: Iterable[str] | None = None, *, disable: Iterable[str] = ()) -> Executable:
        """Run the compiler pipeline for this backend and build an Executable (cached)."""
        self._check_open()
        targets = tuple(targets) if targets is not None else tuple(graph.outputs)
        disabled = tuple(sorted(disable))
        key = (graph.fingerprint(), targets, disabled)
        exe = self._cache.get(key)
        if exe is None:
            from caramba.compiler import compile_graph

            lowered, report = compile_graph(graph, self, targets=targets, disable=disabled)
            exe = self._compile(lowered, graph, report)
            self._cache[key] = exe
        return exe

    @abstractmethod
    def _compile(self, lowered: Graph, source: Graph, report: Any) -> Executable: ...

    def execute(
        self, graph: Graph, targets: Iterable[str] | None = None, inputs: Mapping[str, Tensor] | None = None
    ) -> dict[str, Tensor]:
        return self.compile(graph, targets).run(inputs)

    # ---- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Release everything. Idempotent; any later use raises RunnerClosed."""
        if not self._closed:
            self._closed = True
            self._cache.clear()
            self.state._values.clear()
            self.state.version += 1
            self._close()

    def _close(self) -> None:  # noqa: B027 - optional hook
        pass

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise RunnerClosed(f"runner {self.location} is closed", backend=self.location)

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.location}{' closed' if self._closed else ''}>"
