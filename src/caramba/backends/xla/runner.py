"""The xla runner: resident ``jax.Array`` tensors; one jit-compiled XLA executable per graph.

A graph becomes one pure function ``f(*inputs, *state, *constants) -> (*outputs, *new_state)``:
state reads are arguments, state writes are results the runner keeps resident. It is traced
and compiled once, ahead of time, with float64 enabled in a scoped context (the user's
global ``jax_enable_x64`` is never touched); running it is one call of the compiled
executable with no host round trip. Index checks (gather, scatter, embedding) come back as
one small bool vector, since XLA cannot raise from inside a computation.
"""

from __future__ import annotations

import functools
import operator
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from caramba.backends.xla.capabilities import xla_capabilities
from caramba.backends.xla.lowering import RULES, TraceContext
from caramba.compute.runner import Executable, Runner
from caramba.compute.tensor import Tensor
from caramba.errors import BackendUnavailable, CarambaError, StateError
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.graph import Graph, Ref
from caramba.ops.cost import graph_flops

_DEAD = weakref.ref(set())  # a reference to nothing: never the tensor at hand

# Constants larger than this are uploaded once per executable instead of embedded in the HLO.
INLINE_CONSTANT_LIMIT = 4096


def enable_x64():
    """A scoped float64 context (jax >= 0.6: jax.enable_x64; older: jax.experimental)."""
    ctx = getattr(jax, "enable_x64", None)
    if ctx is None:  # pragma: no cover - old jax
        from jax.experimental import enable_x64 as ctx
    return ctx(True)


class IndexOutOfRange(CarambaError):
    """An index fed to gather/scatter/embedding is outside the indexed axis."""


class LoweringFailed(CarambaError):
    """A node could not be traced into XLA although the capability table claims it (a bug)."""


class XlaTensor(Tensor):
    __slots__ = ("_dtype", "_shape", "array", "runner")

    def __init__(self, array: jax.Array, runner: "XlaRunner", shape: tuple[int, ...] | None = None,
                 dtype: DType | None = None) -> None:
        self.array = array
        self.runner = runner
        self._shape = shape  # given where the graph already says it (results of a run)
        self._dtype = dtype

    # Read from the jax.Array once: every run checks its inputs' types, and jax.Array's own
    # properties cost microseconds each (a third of caramba's per-call cost on small graphs).
    @property
    def shape(self) -> tuple[int, ...]:
        if self._shape is None:
            self._shape = tuple(self.array.shape)
        return self._shape

    @property
    def dtype(self) -> DType:
        if self._dtype is None:
            self._dtype = as_dtype(self.array.dtype)
        return self._dtype

    @property
    def location(self) -> str:
        return self.runner.location

    def _live(self) -> jax.Array:
        self.runner._check_open()
        if self.array.is_deleted():
            raise StateError(
                f"this {self.location} tensor was donated to a later execution and no longer exists",
                backend=self.location,
                hint="read state after the step (runner.state[name]) or create the runner without 'donate'",
            )
        return self.array

    def download(self) -> np.ndarray:
        return np.array(self._live(), copy=True)

    def wait(self) -> "XlaTensor":
        if self.runner._closed:
            self.runner._check_open()
        try:
            self.array.block_until_ready()
        except RuntimeError:
            self._live()  # a donated tensor: the error that says so
            raise
        return self


class _Core:
    """One traced and compiled XLA executable, shared by every graph of the same structure."""

    def __init__(self, runner: "XlaRunner", graph: Graph) -> None:
        self.in_names = tuple(n.id for n in graph.inputs)
        self.state_names = tuple(graph.state)
        # Written state in the order of the state arguments, and returned first: JAX pairs donated
        # arguments with results greedily by shape and dtype, in order, so this order makes every
        # write reuse its own state's buffer. Any other order can hand a bias's buffer to an Adam
        # moment of the same shape, and XLA then copies to keep the old value alive (9 copies in
        # the small MLP train step instead of 4).
        written = {n.attrs["name"] for n in graph.nodes if n.op == "state.write"}
        self.writes = tuple(name for name in self.state_names if name in written)
        self.checks: list[tuple[int, str]] = []  # (node index, message)
        self.single = False  # whether the compiled step returns one result (bare; see _results)
        self.input_checks: list[tuple[int | None, int, int]] = []  # (input position or None, lo, hi)
        self.location = runner.location
        big = [n for n in graph.nodes if n.op == "graph.constant" and n.attrs["value"].size > INLINE_CONSTANT_LIMIT]
        self.big_ids = tuple(n.id for n in big)
        self.graph = graph
        with enable_x64():
            self.const_args = tuple(jax.device_put(np.asarray(n.attrs["value"]), runner.device) for n in big)
            donate: tuple[int, ...] = ()
            if runner.donate:
                n_in = len(self.in_names)
                donate = tuple(n_in + i for i, name in enumerate(self.state_names) if name in self.writes)
            self.donates = bool(donate)
            jitted = jax.jit(self._results, donate_argnums=donate)
            specs = [_spec(graph.node(n).types[0], runner.sharding) for n in self.in_names]
            specs += [_spec(graph.state[s].type, runner.sharding) for s in self.state_names]
            specs += [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding) for a in self.const_args]
            self.lowered = jitted.lower(*specs)  # tracing finds the graph's checks
            # A failed check must leave the state as it was. Donated buffers are gone once the
            # step runs, so a donating step with checks makes them first and runs only if they
            # pass (selecting the old state inside the step made XLA copy all of it: 16 copies in
            # the small MLP step). On the CPU, where a device array is host memory, checks of
            # inputs as fed read them in place (~5 µs); other checks run as a small program of
            # their own (no donation; one more dispatch and wait, ~20-100 µs). The step itself
            # then no longer reports them (three fewer kernels in the MLP step).
            self.preflight = None
            self.host_checks: list[tuple[int, int, int]] | None = None
            if donate and self.checks:
                if runner.platform == "cpu" and all(pos is not None for pos, _, _ in self.input_checks):
                    self.host_checks = self.input_checks
                else:
                    self.preflight = jax.jit(self._checks_only).lower(*specs).compile(compiler_options=SMALL_OPTIONS)
                step = functools.partial(self._results, flags=False)
                self.lowered = jax.jit(step, donate_argnums=donate).lower(*specs)
            # Small graphs compile without LLVM's optimization passes: ~40% less compile time,
            # and their run time is dominated by dispatch anyway (numerics are IEEE either way).
            small = graph_flops(graph) < SMALL_WORK
            self.compiled = self.lowered.compile(compiler_options=SMALL_OPTIONS) if small else self.lowered.compile()
        del self.graph  # the core outlives the graph it was traced from

    def _results(self, *args: jax.Array, flags: bool = True) -> Any:
        """``_function`` as compiled: a lone result comes back bare, not in a 1-tuple (JAX then
        has no tuple to build and unpack: ~1.5 µs a call, ~2% of dense+GELU 8x128x256)."""
        res = self._function(*args, flags=flags)
        self.single = len(res) == 1
        return res[0] if self.single else res

    def _function(self, *args: jax.Array, flags: bool = True) -> tuple[jax.Array, ...]:
        """The graph as a JAX function: (*writes, *outputs, check flags if ``flags`` and any)."""
        graph = self.graph
        n_in, n_st = len(self.in_names), len(self.state_names)
        inputs = dict(zip(self.in_names, args[:n_in]))
        state = dict(zip(self.state_names, args[n_in : n_in + n_st]))
        big = dict(zip(self.big_ids, args[n_in + n_st :]))
        env: dict[Ref, jax.Array] = {}
        ctx = TraceContext()
        position = {n.id: i for i, n in enumerate(graph.nodes)}
        for node in graph.nodes:
            if node.op == "graph.input":
                env[Ref(node.id)] = inputs[node.id]
            elif node.op == "graph.constant":
                env[Ref(node.id)] = big[node.id] if node.id in big else jnp.asarray(node.attrs["value"])
            elif node.op == "state.read":
                env[Ref(node.id)] = state[node.attrs["name"]]
            elif node.op == "state.write":
                state[node.attrs["name"]] = env[node.inputs[0]]
            else:
                in_types = tuple(graph.type_of(r) for r in node.inputs)
                try:
                    fn = RULES[node.op](node, in_types, ctx)
                    out = fn(*(env[r] for r in node.inputs))
                except CarambaError:
                    raise
                except Exception as exc:
                    raise LoweringFailed(f"{type(exc).__name__}: {exc}", node=node.id, op=node.op, backend=self.location) from exc
                outs = out if isinstance(out, tuple) else (out,)
                for i, (value, t) in enumerate(zip(outs, node.types, strict=True)):
                    if tuple(value.shape) != t.shape or value.dtype != jnp.dtype(t.dtype.numpy):
                        raise LoweringFailed(
                            f"rule produced {value.dtype}{list(value.shape)}, graph says {t}",
                            node=node.id, op=node.op, backend=self.location,
                        )
                    env[Ref(node.id, i)] = value
        results = [state[name] for name in self.writes] + [env[r] for r in graph.outputs.values()]
        if ctx.checks:
            self.checks = [(position[c.node], c.message) for c in ctx.checks]
            # checks of an input as fed (labels, token ids): the host can make them before a run
            position_of = {id(a): i for i, a in enumerate(args[:n_in])}
            self.input_checks = [(position_of.get(id(c.value)), c.lo, c.hi) for c in ctx.checks]
            if flags:
                results.append(jnp.stack([jnp.asarray(c.bad) for c in ctx.checks]))
        return tuple(results)

    def _checks_only(self, *args: jax.Array) -> jax.Array:
        """The runtime checks alone (XLA drops everything they do not need)."""
        return self._function(*args)[-1]


SMALL_WORK = 1 << 17  # flops (ops.cost.graph_flops) below which a graph is compiled at XLA's -O0
SMALL_OPTIONS = {"xla_backend_optimization_level": 0}


def _spec(t, sharding) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(t.shape, jnp.dtype(t.dtype.numpy), sharding=sharding)


def structure_key(graph: Graph) -> tuple:
    """What the compiled executable depends on: ops, attributes, types and edges in order,
    output positions, state, but not node IDs or the graph's name."""
    index: dict[str, int] = {}
    items = []
    for i, n in enumerate(graph.nodes):
        index[n.id] = i
        items.append((n.op, n.version, n.attrs.key, n.types, tuple((index[r.node], r.index) for r in n.inputs)))
    outs = tuple((index[r.node], r.index) for r in graph.outputs.values())
    return tuple(items), outs, tuple((d.name, d.type, d.init) for d in graph.state.values())


# Compiled executables by (device, donation, structure): graphs that differ only in names (and
# values fed at run time) share one XLA compilation. Bounded, least recently used dropped.
_CORES: OrderedDict[tuple, _Core] = OrderedDict()
CORE_CACHE_SIZE = 512


def _core(runner: "XlaRunner", graph: Graph) -> _Core:
    key = (runner.device, runner.donate, structure_key(graph))
    core = _CORES.get(key)
    if core is None:
        core = _Core(runner, graph)
        _CORES[key] = core
        while len(_CORES) > CORE_CACHE_SIZE:
            _CORES.popitem(last=False)
    else:
        _CORES.move_to_end(key)
    return core


class XlaExecutable(Executable):
    def __init__(self, runner: "XlaRunner", graph: Graph, source: Graph, report: Any) -> None:
        super().__init__(runner, graph, source, report)
        core = _core(runner, graph)
        self._core = core
        self._compiled = core.compiled
        self._single = core.single  # the compiled step returns its one result bare
        self._const_args = core.const_args
        self._in_names = tuple(n.id for n in graph.inputs)  # same order as the core's
        self._state_names = core.state_names
        self._writes = core.writes
        # results come back typed as the graph says: their tensors need not ask the jax.Array
        n_in, n_writes = len(self._in_names), len(core.writes)
        # (name, position in the results, shape, dtype) of each output and each write
        self._outs = [(name, n_writes + i, t.shape, t.dtype)
                      for i, (name, t) in enumerate((name, graph.type_of(r)) for name, r in graph.outputs.items())]
        self._writes_at = [(name, i, graph.state[name].type.shape, graph.state[name].type.dtype, n_in + core.state_names.index(name))
                           for i, name in enumerate(core.writes)]  # ... and its position in the arguments
        self._n_in = n_in
        self._checks = [(graph.nodes[i].id, msg) for i, msg in core.checks]
        self._preflight = core.preflight
        self._direct = False  # calls go past Compiled.__call__ (see _call_directly)
        names = self._in_names  # the inputs' tensors in order, taken by one C call
        self._take = operator.itemgetter(*names) if len(names) > 1 else (lambda feed: tuple(feed[n] for n in names))
        self._host_checks = core.host_checks
        # the flags the step itself returns are read unless the checks already ran before it
        self._read_flags = bool(self._checks) and core.preflight is None and core.host_checks is None
        self._passed_host_checks: dict[int, weakref.ref] = {}  # check index -> the array that passed it
        # A step that donates nothing is pure until its writes are stored: it may start before
        # its inputs are checked (see run).
        self._speculative = not core.donates
        # The state and constant arguments as this executable's last run left them (the store
        # holds the same arrays unless its version moved on).
        self._tail: list[jax.Array] = []
        self._plain = False  # see _call_directly

    def run(self, inputs: Mapping[str, Tensor] | None = None) -> dict[str, Tensor]:
        """``Executable.run``: the same checks, the same errors, two shortcuts. Why: on small
        graphs the Python between one result and the next call is paid several times over, as
        XLA's worker threads go to sleep and must be woken (dense+GELU 8x128x256: ~5% per µs).

        With the state as this executable's last run left it, the arguments are that run's
        (``_tail``) plus the inputs' arrays. A graph that donates nothing takes its inputs' arrays
        in one pass that also checks what only caramba checks (the names, which runner a tensor
        belongs to) and is handed to XLA; JAX itself refuses arrays of another shape, dtype or
        device, and anything refused runs the full checks, which say what is wrong. A donating
        graph checks first, as ever (its inputs must be the last run's, checked then)."""
        if inputs is None:
            inputs = {}
        runner = self.runner
        store = runner.state
        if store.version != self._state_checked_at or runner._closed:
            return super().run(inputs)
        if not self._speculative:
            if not self._is_rerun(inputs, store):
                return super().run(inputs)
            args = [inputs[n].array for n in self._in_names]  # type: ignore[index,attr-defined]
            args += self._tail  # the inputs of the last run, checked then
            return self._stored(self._dispatch(args))
        # One pass takes the arrays of this runner's tensors: a name missing, a tensor of
        # another runner or not a tensor at all leaves the list short (or raises) and the full
        # checks say what is wrong; JAX refuses arrays of another shape, dtype or device.
        try:
            args = [t.array for t in self._take(inputs) if t.runner is runner]  # type: ignore[union-attr,attr-defined]
            ok = len(args) == self._n_in == len(inputs)  # type: ignore[arg-type]
            if ok:
                args += self._tail
                res = self._compiled(*args)
                if self._single:
                    res = (res,)
        except Exception:
            ok = False
        if not ok:
            return super().run(inputs)
        if not self._plain:
            return self._stored(self._finish(args, res))
        out = {}  # _finish and _stored where there is nothing to store or read: ~0.5 µs less
        for name, i, shape, dtype in self._outs:
            out[name] = XlaTensor(res[i], runner, shape, dtype)
        return out

    def _checked(self, inputs: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        """The full checks, and no input that was donated away (JAX's own error names no input)."""
        inputs = super()._checked(inputs)
        for t in inputs.values():
            t._live()  # type: ignore[attr-defined]
        return inputs

    def _stored(self, out: dict[str, Tensor]) -> dict[str, Tensor]:
        """What a run that got this far returns: its writes are stored; the store moves on."""
        store = self.runner.state
        if self._writes_state:
            store.version += 1
        self._state_checked_at = store.version
        return out

    def _run(self, inputs: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        args = [inputs[n].array for n in self._in_names]  # type: ignore[attr-defined]
        args += [state[n].array for n in self._state_names]  # type: ignore[attr-defined]
        args += self._const_args
        self._tail = args[self._n_in :]  # the next run's, unless this one writes state (_finish)
        return self._dispatch(args)

    def _dispatch(self, args: list) -> dict[str, Tensor]:
        """Checks that must precede a donating step, the step, its results."""
        if self._host_checks is not None:
            self._check_on_host(args)
        elif self._preflight is not None:
            self._raise_if_bad(self._preflight(*args))
        res = self._compiled(*args)
        return self._finish(args, (res,) if self._single else res)

    def _finish(self, args: list, res: Any) -> dict[str, Tensor]:
        """Store a run's writes (``args`` with them become the next run's tail) and return its
        outputs."""
        if self._read_flags:
            self._raise_if_bad(res[-1])  # before the writes are stored: the old state stays
        runner = self.runner
        if self._writes_at:
            values = runner.state._values
            for name, i, shape, dtype, pos in self._writes_at:
                values[name] = XlaTensor(res[i], runner, shape, dtype)
                args[pos] = res[i]
            self._tail = args[self._n_in :]
        if not self._direct:
            self._call_directly()
        # plain loops: a dict comprehension costs ~1 µs more per call, which small graphs feel
        out = {}
        for name, i, shape, dtype in self._outs:
            out[name] = XlaTensor(res[i], runner, shape, dtype)
        return out

    def _call_directly(self) -> None:
        """Call the compiled programs through their C++ entry, not ``Compiled.__call__``.

        JAX builds that entry (the one a ``jax.jit`` function calls too) on a program's first
        call; ``__call__`` wraps it in JAX's traceback filtering, ~4.5 µs a call: 8% of
        dense+GELU 8x128x256. The entry takes the same arguments and refuses the same ones
        (a mismatch goes to JAX's own checks), so only tracebacks differ."""
        entries = [getattr(c, "_call", None) for c in (self._core.compiled, self._preflight) if c is not None]
        if not all(callable(e) for e in entries):
            return  # not built yet (or another JAX): __call__ keeps the job
        self._compiled = entries[0]
        if self._preflight is not None:
            self._preflight = entries[1]
        self._direct = True
        # a rerun then only wraps its outputs: no flags to read, no state written
        self._plain = not self._read_flags and not self._writes_at

    def _raise_if_bad(self, flags: Any) -> None:
        bad = np.asarray(flags)
        if bad.any():
            self._fail(int(np.argmax(bad)))

    def _fail(self, check: int) -> None:
        node_id, msg = self._checks[check]
        raise IndexOutOfRange(f"{msg} (node '{node_id}'); state unchanged", node=node_id,
                              backend=self.runner.location)

    def _check_on_host(self, args: list) -> None:
        checked = self._passed_host_checks
        for k, (pos, lo, hi) in enumerate(self._host_checks):  # type: ignore[arg-type]
            array = args[pos]
            if checked.get(k, _DEAD)() is array:  # jax.Arrays are immutable: checked once is enough
                continue
            values = np.asarray(array)  # xla:cpu memory is host memory: a view, no copy
            if values.min() < lo or values.max() >= hi:
                self._fail(k)
            checked[k] = weakref.ref(array)

    def hlo_text(self) -> str:
        """The StableHLO module XLA compiled (what `--explain` can show)."""
        return self._core.lowered.as_text()


class XlaRunner(Runner):
    """Tensors are jax.Arrays committed to one PJRT device; graphs are XLA executables."""

    name = "xla"

    def __init__(self, platform: str = "cpu", plugin: Any = None, donate: bool = False, sync: bool = False) -> None:
        super().__init__()
        self.platform = platform
        self.plugin = plugin
        self.donate = donate
        self.device = _device(platform, plugin, sync)
        self.location = "xla:cpu" if platform == "cpu" else "xla:gpu"
        self.sharding = jax.sharding.SingleDeviceSharding(self.device)
        self.capabilities = xla_capabilities()

    def _upload(self, array: np.ndarray, dtype: DType) -> XlaTensor:
        with enable_x64():
            # On the CPU client PJRT aliases a suitably aligned host array instead of copying it
            # (may_alias=False does not stop it in jax 0.10): a later edit of the caller's array
            # would change the tensor. Upload a private copy; PJRT may alias that one.
            if self.platform == "cpu":
                array = np.array(array, copy=True, order="C")
            return XlaTensor(jax.device_put(array, self.device), self)

    def fill(self, shape: tuple[int, ...], dtype: DType, value: float) -> XlaTensor:
        with enable_x64():
            arr = jax.jit(lambda: jnp.full(shape, value, dtype=jnp.dtype(dtype.numpy)), out_shardings=self.sharding)()
        return XlaTensor(arr, self)

    def _compile(self, lowered: Graph, source: Graph, report: Any) -> XlaExecutable:
        return XlaExecutable(self, lowered, source, report)


@functools.cache
def _sync_cpu_device() -> Any:
    """The device of a PJRT CPU client of caramba's own that runs each execution on the calling
    thread (``asynchronous=False``; the ``xla:sync`` option). JAX's shared CPU client hands
    every execution to a worker thread and back, ~100 µs a call on a small VM, more than a tiny
    graph's whole work (dense+GELU 8x128x256 float64: ~200 µs through the shared client, ~120
    µs through this one). But executed inline, a program's independent parts no longer run
    concurrently: the [128,64] MLP train step took ~1.5x as long (5.3 vs 3.6 ms median, 2 cores),
    so the shared client stays the default. A client of our own leaves the user's JAX
    configuration and default devices alone. Where jaxlib cannot make one (an API change), the
    shared client's device is used, with a RuntimeWarning saying so (the results are the same;
    only the per-call cost differs)."""
    try:
        from jax._src.lib import xla_client

        return xla_client.make_cpu_client(asynchronous=False, num_devices=1).devices()[0]
    except Exception as exc:  # a jaxlib without this entry point: JAX's own CPU client still works
        import warnings

        warnings.warn(
            f"xla:sync runs on JAX's shared CPU client (same results, ~100 µs more per call on small graphs): "
            f"this jaxlib cannot make a synchronous one ({type(exc).__name__}: {exc})",
            RuntimeWarning, stacklevel=3,
        )
        return jax.devices("cpu")[0]


def _device(platform: str, plugin: Any, sync: bool = False):
    if platform == "cpu":
        return _sync_cpu_device() if sync else jax.devices("cpu")[0]
    if plugin is not None and plugin.path is not None and not plugin.auto:
        from jax._src import xla_bridge

        try:
            xla_bridge.register_plugin(platform, library_path=plugin.path)
        except Exception as exc:  # already initialized backends, bad file, ...
            raise BackendUnavailable(
                f"backend 'xla:{platform}' could not register PJRT plugin {plugin.path}: {exc}", backend="xla:gpu"
            ) from None
    try:
        devices = jax.devices(platform)
    except RuntimeError as exc:
        where = plugin.describe() if plugin is not None else "no plugin"
        raise BackendUnavailable(
            f"backend 'xla:{platform}' found no {platform} device ({where}): {exc}", backend="xla:gpu"
        ) from None
    return devices[0]
