"""The compliance harness: spec rows, input generators, and the one function that runs a case.

A spec module (``specs/<family>.py``) lists ``ROWS``: one :class:`Row` per op ID, holding the
dtypes the op accepts, its :class:`Case` s (inputs, attributes, a float64 reference that does not
reuse any backend kernel, a tolerance) and its bad-input examples. ``run_case`` builds the
case's graph for one dtype and one runner and checks, from the runner's capabilities alone
(applied to the graph lowering receives, after the optimizing passes), what must happen:
claimed -> runs and matches the reference; not claimed -> refused at compile time with
``UnsupportedOperation``; claimed at lower precision (the float32 contract) -> ``PrecisionError``
naming every such node, then runs with ``precision=`` opted in and is compared at the precision
actually computed.
"""

from __future__ import annotations

import os
import weakref
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from caramba import ir
from caramba.errors import PrecisionError, UnsupportedOperation
from caramba.ir.dtypes import ALL, FLOATS, INTS, NUMERIC, SIGNED_INTS, DType, rank_of_precision

F64, F32, F16, BF16 = DType.float64, DType.float32, DType.float16, DType.bfloat16
I64, I32, I8, U8, BOOL = DType.int64, DType.int32, DType.int8, DType.uint8, DType.bool
SIGNED = FLOATS | SIGNED_INTS
ANY = ALL
__all__ = [
    "ALL", "ANY", "BF16", "BOOL", "F16", "F32", "F64", "FLOATS", "I8", "I32", "I64", "INTS", "NUMERIC",
    "SIGNED", "SIGNED_INTS", "U8", "Arg", "Bad", "Built", "Case", "Expect", "Row", "Tol", "arg", "build",
    "compare", "computed_at", "ints", "received", "run_case", "tol", "uniform", "values",
]

SUBJECT = "under_test"  # node ID of the op under test in every generated graph

# Unit roundoff-ish spacing at 1.0 per float type; tolerances are multiples of it.
EPS = {F64: 2.0**-52, F32: 2.0**-23, F16: 2.0**-10, BF16: 2.0**-7}


# ---- tolerances --------------------------------------------------------------------------


@dataclass(frozen=True)
class Tol:
    """``|got - round_d(ref)| <= eps(d) * (ulps * |ref| + aulps * scale)`` per element.

    ``round_d(ref)`` is the reference rounded to the result dtype ``d`` (so ``tol(0, 0)`` means
    correctly rounded); ``eps(d)`` is the spacing of ``d`` at 1.0; ``max(ulps, 1)`` times the
    smallest normal number of ``d`` is allowed on top (results near underflow may flush to zero); ``scale`` is 1 unless the reference gives
    one (e.g. ``sum |x|`` for a sum, whose rounding error grows with it). Integer and bool
    results are always compared exactly.
    """

    ulps: float = 1.0
    aulps: float = 0.0
    per: tuple[tuple[DType, tuple[float, float]], ...] = ()

    def bounds(self, d: DType) -> tuple[float, float]:
        return dict(self.per).get(d, (self.ulps, self.aulps))


def tol(ulps: float = 1.0, aulps: float = 0.0, **per: tuple[float, float]) -> Tol:
    """``tol(4, 1, float16=(8, 8))``: defaults plus per-dtype (ulps, aulps) overrides."""
    return Tol(float(ulps), float(aulps), tuple((ir.dtype(k), (float(a), float(b))) for k, (a, b) in per.items()))


@dataclass(frozen=True)
class Expect:
    """A reference result with a per-element error scale (broadcast against ``value``)."""

    value: Any
    scale: Any = 1.0


# ---- input generators ---------------------------------------------------------------------

Gen = Callable[[np.random.Generator, DType, tuple[int, ...]], np.ndarray]


def _cast(values: np.ndarray, d: DType) -> np.ndarray:
    return np.asarray(values).astype(d.numpy)


def uniform(lo: float = -3.0, hi: float = 3.0, ilo: int | None = None, ihi: int | None = None) -> Gen:
    """Floats uniform in [lo, hi] (rounded to the dtype); ints in [ilo, ihi] (default: the float
    range, clipped to the dtype); bools fair coin flips."""

    def gen(rng: np.random.Generator, d: DType, shape: tuple[int, ...]) -> np.ndarray:
        if d.is_float:
            return _cast(rng.uniform(lo, hi, shape), d)
        if d.is_bool:
            return rng.random(shape) < 0.5
        info = np.iinfo(d.numpy)
        a = max(int(np.ceil(lo)) if ilo is None else ilo, int(info.min))
        b = min(int(np.floor(hi)) if ihi is None else ihi, int(info.max))
        return rng.integers(a, b, size=shape, endpoint=True).astype(d.numpy)

    return gen


def ints(lo: int, hi: int) -> Gen:
    """Integers in [lo, hi] in any dtype (floats hold them exactly; unsigned from max(lo, 0))."""

    def gen(rng: np.random.Generator, d: DType, shape: tuple[int, ...]) -> np.ndarray:
        if d.is_bool:
            return rng.integers(0, 1, size=shape, endpoint=True).astype(bool)
        low = max(lo, 0) if d is DType.uint8 else lo
        return rng.integers(low, max(hi, low), size=shape, endpoint=True).astype(d.numpy)

    return gen


def values(seq: Sequence[Any]) -> Gen:
    """Exactly these values (the arg's shape must match their count)."""

    def gen(rng: np.random.Generator, d: DType, shape: tuple[int, ...]) -> np.ndarray:
        return _cast(np.asarray(seq, dtype=np.float64 if d.is_float else object).reshape(shape), d)

    return gen


DEFAULT = uniform()


@dataclass(frozen=True)
class Arg:
    """One graph input of a case: shape, generator, and a fixed dtype (None: the case dtype)."""

    shape: tuple[int, ...]
    gen: Gen = DEFAULT
    dtype: DType | None = None


def arg(shape: Sequence[int] | int, gen: Gen = DEFAULT, dtype: "DType | str | None" = None) -> Arg:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return Arg(shape, gen, None if dtype is None else ir.dtype(dtype))


# ---- cases and rows -----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Case:
    """One graph to run: ``op`` applied to ``args`` with ``attrs``, checked against ``ref``.

    ``attrs`` may be a callable ``(dtype) -> dict``. ``ref(*host_inputs, **attrs)`` returns the
    float64/Python-int reference (array, tuple of arrays for multi-output ops, or Expect).
    ``build(g, inputs, dtype, precision) -> value(s)`` replaces the default single-node graph;
    ``check(runner, case, dtype)`` replaces the whole reference comparison (random, state ops).
    ``dtypes`` (None: the row's) restricts which accepted dtypes this case runs for.
    ``precision`` is the opt-in ``build`` puts on the node under test (and passes to a custom
    ``build``); ``run_case`` sets it when the backend computes the case below its dtype's
    precision, so a ``check`` that calls ``build(case, d)`` gets the opted-in graph.
    """

    label: str
    args: tuple[Arg, ...] = ()
    attrs: Any = field(default_factory=dict)
    ref: Callable[..., Any] | None = None
    tol: Tol = Tol()
    dtypes: frozenset[DType] | None = None
    build: Callable[..., Any] | None = None
    check: Callable[..., None] | None = None
    op: str = ""
    precision: DType | None = None

    @property
    def id(self) -> str:
        return f"{self.op}[{self.label}]"

    def attrs_for(self, d: DType) -> dict[str, Any]:
        return dict(self.attrs(d) if callable(self.attrs) else self.attrs)


@dataclass(frozen=True)
class Bad:
    """A misuse of the op that must raise GraphError while the graph is built.

    ``args`` are (shape, dtype) pairs; ``match`` is a regex the message must contain.
    """

    args: tuple[tuple[tuple[int, ...], DType], ...]
    attrs: Mapping[str, Any]
    match: str
    label: str = ""


@dataclass(frozen=True, eq=False)
class Row:
    """Every compliance fact about one op ID."""

    op: str
    dtypes: frozenset[DType]  # exactly the dtypes the op's type rule accepts (tested both ways)
    cases: tuple[Case, ...]
    bad: tuple[Bad, ...] = ()
    # For the dtype-acceptance test: which case to build for each dtype (default: the first).
    probe: Case | None = None
    # False for ops with no dtype parameter (random.bernoulli is always bool): ``dtypes`` then
    # names the one dtype the cases run at, and there is nothing to reject.
    typed: bool = True

    def __post_init__(self) -> None:
        fixed = []
        for c in self.cases:
            ds = self.dtypes if c.dtypes is None else frozenset(c.dtypes) & self.dtypes
            fixed.append(replace(c, op=self.op, dtypes=ds))
        object.__setattr__(self, "cases", tuple(fixed))
        probe = self.probe if self.probe is not None else self.cases[0]
        object.__setattr__(self, "probe", replace(probe, op=self.op, dtypes=self.dtypes))


def row(
    op: str,
    dtypes: frozenset[DType],
    cases: Sequence[Case],
    bad: Sequence[Bad] = (),
    probe: Case | None = None,
    typed: bool = True,
) -> Row:
    return Row(op, frozenset(dtypes), tuple(cases), tuple(bad), probe, typed)


def bad(match: str, *args: tuple[Sequence[int], "DType | str"], label: str = "", **attrs: Any) -> Bad:
    return Bad(tuple((tuple(s), ir.dtype(d)) for s, d in args), attrs, match, label or match.replace("\\", ""))


# ---- building -----------------------------------------------------------------------------


@dataclass
class Built:
    graph: ir.Graph
    inputs: dict[str, np.ndarray]  # host values of the graph inputs
    attrs: dict[str, Any]


def seed_of(*parts: object) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())


def host_inputs(case: Case, d: DType) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed_of(case.id, d.value))
    out = {}
    for i, a in enumerate(case.args):
        dt = a.dtype or d
        v = np.asarray(a.gen(rng, dt, a.shape))
        assert v.shape == a.shape and v.dtype == dt.numpy, f"{case.id}: generator gave {v.dtype}{v.shape} for {dt}{a.shape}"
        out[f"x{i}"] = v
    return out


def build(case: Case, d: DType, precision: DType | None = None, with_values: bool = True) -> Built:
    """The case's graph for dtype ``d``: inputs x0, x1, ..., the node under test, outputs.
    ``precision`` (default: the case's opt-in) is put on the node under test."""
    precision = case.precision if precision is None else precision
    g = ir.Graph(f"{case.op}[{case.label}]:{d.value}")
    with g:
        for k, v in _emit(g, case, d, precision).items():
            g.output(k, v)
    attrs = case.attrs_for(d)
    if g.has_node(SUBJECT):  # the reference sees the canonical attributes, defaults included
        attrs = dict(g.node(SUBJECT).attrs)
    return Built(g, host_inputs(case, d) if with_values else {}, attrs)


def _emit(g: ir.Graph, case: Case, d: DType, precision: DType | None, prefix: str = "") -> dict[str, Any]:
    """Add the case's inputs and nodes to ``g`` (IDs prefixed); returns {output name: value}."""
    ins = [g.input(f"{prefix}x{i}", a.shape, a.dtype or d) for i, a in enumerate(case.args)]
    if case.build is not None:
        assert not prefix, "custom-built cases are not batched"
        result = case.build(g, ins, d, precision)
    else:
        result = g.call(case.op, ins, case.attrs_for(d), id=prefix + SUBJECT, precision=precision)
    if isinstance(result, dict):
        return dict(result)
    if isinstance(result, tuple):
        return {f"out{i}": v for i, v in enumerate(result)}
    return {} if result is None else {"out": result}


# ---- what the capabilities say must happen ---------------------------------------------------


def node_problems(graph: ir.Graph, caps) -> tuple[list[str], list[str]]:
    """(unsupported, precision) node IDs, from the capability table only (the lowering rule:
    every input and output dtype of a node must be claimed for its op)."""
    unsupported, precision = [], []
    for n in graph.nodes:
        touched = {t.dtype for t in n.types} | {graph.type_of(r).dtype for r in n.inputs}
        rule = caps.shape_rules.get(n.op)
        if (
            not caps.supports(n.op)
            or not touched <= caps.dtypes(n.op)
            or (n.effect in (ir.Effect.state_read, ir.Effect.state_write) and not caps.state)
            or (rule is not None and rule(n))
        ):
            unsupported.append(n.id)
            continue
        req = n.required_precision()
        if req is not None and req.is_float and not caps.offers(n.op, req):
            precision.append(n.id)
    return unsupported, precision


def opt_in_for(graph: ir.Graph, refused: Sequence[str], caps) -> DType:
    """The precision to opt in with so that every node in ``refused`` (precision problems of
    ``graph``) is accepted: the lowest precision the backend computes any of them at."""
    return min((caps.precision_for(graph.node(n).op) for n in refused), key=rank_of_precision)


def received(graph: ir.Graph, caps, backend: str = "compliance") -> ir.Graph:
    """The graph lowering checks on a backend with ``caps``: the pipeline's stages before
    ``lower``, as ``runner.compile`` runs them (a no-op such as an identity transpose or a cast
    to the same dtype is gone by then, so nothing is asked of the backend for it)."""
    from caramba.compiler.passes import PassContext
    from caramba.compiler.pipeline import PIPELINE

    ctx = PassContext(caps, backend, tuple(graph.outputs))
    for stage in PIPELINE:
        if stage.name == "lower":
            return graph
        graph = stage.fn(graph, ctx).graph
    raise AssertionError("the pipeline has no lower stage")


def claimed(case: Case, d: DType, caps) -> bool:
    """Would this case run (possibly after a precision opt-in) on a backend with ``caps``?

    Judged on the graph as built (not after the pipeline), so a case whose node under test the
    compiler removes as a no-op does not count as exercising the backend's kernel."""
    b = build(case, d, with_values=False)
    unsupported, precision = node_problems(b.graph, caps)
    if unsupported:
        return False
    if precision:
        b = build(case, d, opt_in_for(b.graph, precision, caps), with_values=False)
        return not any(node_problems(b.graph, caps))
    return True


def computed_at(case: Case, d: DType) -> DType:
    """The dtype whose tolerance a float result of dtype ``d`` is held to: the case's precision
    opt-in where it is below ``d`` (the backend computed at it), else ``d`` itself."""
    p = case.precision
    if d.is_float and p is not None and p.is_float and rank_of_precision(p) < rank_of_precision(d):
        return p
    return d


# ---- comparison -------------------------------------------------------------------------------


def _as_f64(a: Any) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype == object:
        return np.array([float(v) for v in arr.ravel()], dtype=np.float64).reshape(arr.shape)
    return arr.astype(np.float64)


def compare(got: np.ndarray, expected: Any, d: DType, t: Tol, what: str, slack: Any = 0.0) -> None:
    """Assert ``got`` (dtype ``d``) matches the reference within ``t`` (plus an absolute
    per-element ``slack``)."""
    scale: Any = 1.0
    if isinstance(expected, Expect):
        expected, scale = expected.value, expected.scale
    exp = np.asarray(expected)
    assert got.shape == exp.shape, f"{what}: shape {got.shape}, reference {exp.shape}"
    if not d.is_float:
        want = np.array(exp.tolist() if exp.dtype == object else exp, dtype=object)
        if d.is_bool:
            want_t = want.astype(bool)
        else:
            info = np.iinfo(d.numpy)
            flat = [int(v) for v in want.ravel()]
            assert all(info.min <= v <= info.max for v in flat), f"{what}: reference leaves {d} (spec bug)"
            want_t = np.array(flat, dtype=d.numpy).reshape(want.shape)
        bad = np.flatnonzero(got.ravel() != want_t.ravel())
        assert bad.size == 0, (
            f"{what}: {bad.size} of {got.size} elements differ; first at flat index {bad[0]}: "
            f"got {got.ravel()[bad[0]]!r}, want {want_t.ravel()[bad[0]]!r}"
        )
        return
    ref = _as_f64(exp)
    with np.errstate(over="ignore", invalid="ignore"):
        ref_d = ref.astype(d.numpy).astype(np.float64)  # what a perfect d-typed result rounds to
    g64 = got.astype(np.float64)
    ulps, aulps = t.bounds(d)
    eps = EPS[d]
    scale = np.broadcast_to(_as_f64(scale), ref.shape)
    nan_ref = np.isnan(ref_d)
    inf_ref = np.isinf(ref_d)
    finite = ~(nan_ref | inf_ref)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(g64 - ref_d)
        allowed = eps * (ulps * np.abs(ref) + aulps * scale) + max(ulps, 1.0) * float(np.finfo(d.numpy).smallest_normal)
        allowed = allowed + np.broadcast_to(_as_f64(slack), ref.shape)
    ok = np.where(nan_ref, np.isnan(g64), np.where(inf_ref, g64 == ref_d, np.isfinite(g64) & (err <= allowed)))
    if not ok.all():
        i = np.flatnonzero(~ok.ravel())
        k = i[0]
        ratio = np.max(np.where(finite & np.isfinite(g64), err / np.maximum(allowed, 1e-300), np.inf).ravel()[i])
        raise AssertionError(
            f"{what} ({d}): {i.size} of {got.size} elements out of tolerance (ulps={ulps}, aulps={aulps}); "
            f"first at flat index {k}: got {g64.ravel()[k]!r}, reference {ref.ravel()[k]!r} (rounded {ref_d.ravel()[k]!r}), "
            f"allowed error {allowed.ravel()[k]!r}; worst error/allowed {ratio:.3g}"
        )


# ---- running ----------------------------------------------------------------------------------


def run_case(runner, case: Case, d: DType, siblings: Sequence[Case] = ()) -> None:
    """Check ``case`` at dtype ``d`` on ``runner`` (see the module docstring).

    What must happen is decided from the runner's capabilities applied to the graph lowering
    receives: a node they do not claim -> ``UnsupportedOperation`` naming it; a node computed
    below its required precision -> ``PrecisionError`` naming every such node, then the case
    again with the opt-in (``case.precision``), compared at the precision actually computed.
    Custom checks obey the same rule and get the opted-in case (the graph they build is already
    compiled, so they hit the runner's cache).

    ``siblings`` (the other cases of the row) lets a claimed case run in one graph with every
    claimed sibling at this dtype and opt-in (:class:`Batches`): one backend compilation per
    row and dtype instead of one per case, the case's own results compared as usual.
    """
    custom = case.check is not None and case.ref is None
    if siblings and not custom and case.build is None and BATCH:
        _run_batched(runner, case, d, siblings)
        return
    b = build(case, d, with_values=not custom)
    exe, refused = compile_as_claimed(runner, b.graph)
    if exe is None:
        if not refused:
            return  # not claimed: refused at compile time, as it must be
        case = replace(case, precision=opt_in_for(*refused, runner.capabilities))
        b = build(case, d, with_values=not custom)
        exe, _ = compile_as_claimed(runner, b.graph)
        if exe is None:
            # Plumbing nodes (inputs, constants, state) need the precision too (float64 on an
            # adapter without float64 storage): refused again, as the capabilities say.
            return
    if custom:
        case.check(runner, case, d)
        return
    _check_results(case, d, b, _run(runner, exe, b))


def _run(runner, exe, b: Built) -> dict[str, np.ndarray]:
    outs = exe.run({k: runner.upload(v) for k, v in b.inputs.items()})
    assert set(outs) == set(b.graph.outputs), f"outputs {sorted(outs)} != {sorted(b.graph.outputs)}"
    return {k: outs[k].download() for k in b.graph.outputs}


def _check_results(case: Case, d: DType, b: Built, got: Mapping[str, np.ndarray]) -> None:
    """Compare a run's outputs with the reference, at the precision the case was computed at."""
    names = list(b.graph.outputs)
    expected = reference(case, d, b)
    assert len(expected) == len(names), f"{case.id}: reference gave {len(expected)} outputs for {names}"
    slack: tuple = (0.0,) * len(names)
    low_d = case.precision
    if low_d is not None and low_d.is_float and any(_rounded(v, low_d) is not v for v in b.inputs.values()):
        # Computed at lower precision (opt-in): a backend may round the inputs to it first. Take
        # the reference at inputs rounded to that precision, and allow what that rounding moves it.
        low = reference(case, d, b, low_d)
        with np.errstate(invalid="ignore"):  # inf - inf: no slack there (NaN -> 0 below)
            slack = tuple(np.abs(_as_f64(_value(e)) - _as_f64(_value(lo))) for e, lo in zip(expected, low))
        expected = low
    for name, want, sl in zip(names, expected, slack):
        t = b.graph.type_of(b.graph.outputs[name])
        arr = got[name]
        assert arr.dtype == t.dtype.numpy, f"{case.id} output {name}: dtype {arr.dtype}, graph says {t}"
        assert arr.shape == t.shape, f"{case.id} output {name}: shape {arr.shape}, graph says {t}"
        compare(arr, want, computed_at(case, t.dtype), case.tol, f"{case.id} output {name}", np.nan_to_num(sl, nan=0.0, posinf=0.0))


# ---- batches: one compilation per row, dtype and opt-in ------------------------------------------

# CARAMBA_COMPLIANCE_BATCH=0 compiles every case on its own (to bisect a batch-only failure).
BATCH = os.environ.get("CARAMBA_COMPLIANCE_BATCH", "1") != "0"


class Batches:
    """Per runner: the capability prediction of each case (on the graph lowering receives),
    and the outputs of each batch.

    A batch is one graph holding every case of a row at one dtype and opt-in that the
    capabilities claim, each with its own inputs, node under test and outputs (IDs prefixed
    ``c<j>_``), compiled and run once. Compiling is what costs on backends with a real compiler
    (XLA: ~0.1 s a graph, a few times less per case in a batch); what each case checks does not
    change. If the batch fails to compile or run, every member is compiled and run on its own,
    so a failure lands on the case that causes it; if they all pass alone, the batch's failure
    is reported (a backend that cannot run independent legal nodes side by side has a bug).
    """

    def __init__(self, runner) -> None:
        self.caps = runner.capabilities  # no reference to the runner: it keys the registry weakly
        self.location = runner.location
        self.predictions: dict[tuple, tuple[ir.Graph, list[str], list[str]]] = {}
        self.outputs: dict[tuple, dict[str, Any]] = {}

    def problems(self, case: Case, d: DType, p: DType | None) -> tuple[ir.Graph, list[str], list[str]]:
        """(graph lowering receives, unsupported, precision) for ``case`` at ``d`` with opt-in ``p``."""
        key = (case.id, d, p)
        hit = self.predictions.get(key)
        if hit is None:
            seen = received(build(case, d, p, with_values=False).graph, self.caps, self.location)
            hit = self.predictions[key] = (seen, *node_problems(seen, self.caps))
        return hit

    def opt_in(self, case: Case, d: DType) -> DType | bool | None:
        """None: runs as built; a dtype: refused for precision only, runs with that opt-in;
        False: not runnable (unsupported, or still refused with the opt-in)."""
        seen, unsupported, precision = self.problems(case, d, None)
        if unsupported:
            return False
        if not precision:
            return None
        p = opt_in_for(seen, precision, self.caps)
        _, u2, p2 = self.problems(case, d, p)
        return False if (u2 or p2) else p

    def results(self, runner, case: Case, d: DType, p: DType | None, siblings: Sequence[Case]) -> dict[str, np.ndarray]:
        """The outputs of ``case`` (claimed at ``d`` with opt-in ``p``), from its batch."""
        key = (case.op, d, p)
        if case.id not in self.outputs.get(key, {}):  # first member (or a test run again): run the batch
            members = [
                s for s in siblings
                if (s.dtypes is None or d in s.dtypes) and s.build is None and s.check is None and s.ref is not None and self.opt_in(s, d) is p
            ]
            assert any(m.id == case.id for m in members), f"{case.id} is not in its own batch"
            self.outputs[key] = self._run_batch(runner, members, d, p)
        got = self.outputs[key].pop(case.id)
        if isinstance(got, BaseException):
            raise got
        return got

    def _run_batch(self, runner, members: Sequence[Case], d: DType, p: DType | None) -> dict[str, Any]:
        op = members[0].op
        g = ir.Graph(f"{op}[batch of {len(members)}]:{d.value}")
        inputs: dict[str, np.ndarray] = {}
        names: list[dict[str, str]] = []
        with g:
            for j, m in enumerate(members):
                prefix = f"c{j}_"
                outs = _emit(g, m, d, p, prefix)
                for k, v in outs.items():
                    g.output(prefix + k, v)
                names.append({k: prefix + k for k in outs})
                inputs.update({prefix + k: v for k, v in host_inputs(m, d).items()})
        try:
            exe = runner.compile(g)
            unsupported, precision = node_problems(exe.graph, runner.capabilities)
            assert not unsupported and not precision, f"compiled unclaimed nodes {unsupported + precision}"
            outs = exe.run({k: runner.upload(v) for k, v in inputs.items()})
            host = {k: t.download() for k, t in outs.items()}
            return {m.id: {k: host[full] for k, full in n.items()} for m, n in zip(members, names)}
        except Exception as exc:  # find the member that fails on its own
            batch_error = exc
        alone: dict[str, Any] = {}
        for m in members:
            try:
                b = build(replace(m, precision=p), d)
                exe, _ = compile_as_claimed(runner, b.graph)
                assert exe is not None, f"{m.id} refused on its own although its capabilities claim it"
                alone[m.id] = _run(runner, exe, b)
            except Exception as exc:
                alone[m.id] = exc
        if not any(isinstance(v, BaseException) for v in alone.values()):
            raise AssertionError(
                f"{runner.location}: a graph of {len(members)} independent {op} cases at {d.value} failed "
                f"although each runs alone ({type(batch_error).__name__}: {batch_error}); "
                "CARAMBA_COMPLIANCE_BATCH=0 runs them one by one"
            ) from batch_error
        return alone


_BATCHES: "weakref.WeakKeyDictionary[Any, Batches]" = weakref.WeakKeyDictionary()


def _run_batched(runner, case: Case, d: DType, siblings: Sequence[Case]) -> None:
    state = _BATCHES.get(runner)
    if state is None:
        state = _BATCHES[runner] = Batches(runner)
    _, unsupported, precision = state.problems(case, d, None)
    if unsupported or precision:
        # refusals are checked on the case's own graph (lowering refuses before any backend work)
        exe, refused = compile_as_claimed(runner, build(case, d, with_values=False).graph)
        assert exe is None  # compile_as_claimed fails if the backend compiled a predicted refusal
        if not refused:
            return
        p = state.opt_in(case, d)
        if p is False:
            opted = replace(case, precision=opt_in_for(*refused, runner.capabilities))
            exe, _ = compile_as_claimed(runner, build(opted, d, with_values=False).graph)
            assert exe is None
            return  # refused again with the opt-in, as the capabilities say (plumbing)
    else:
        p = None
    got = state.results(runner, case, d, p, siblings)
    if p is not None:
        case = replace(case, precision=p)
    _check_results(case, d, build(case, d), got)


def compile_as_claimed(runner, graph: ir.Graph):
    """Compile ``graph`` and check the outcome against the runner's capabilities, judged on the
    graph lowering receives (a no-op the pipeline removes, such as an identity transpose or a
    cast to the same dtype, asks nothing of the backend):

    - it compiled: the capabilities claim every node of the lowered graph at its precision
      (a backend must not run what it does not claim) -> ``(executable, None)``;
    - ``UnsupportedOperation``: some node is not claimed, and the message names the first such
      node and the backend -> ``(None, None)``;
    - ``PrecisionError``: nothing unclaimed but nodes computed below their required precision,
      and the message names every one of them, the backend and the opt-in ->
      ``(None, (received graph, refused node IDs))``.
    """
    caps = runner.capabilities
    try:
        exe = runner.compile(graph)
    except (UnsupportedOperation, PrecisionError) as exc:
        seen = received(graph, caps, runner.location)
        unsupported, precision = node_problems(seen, caps)
        msg = str(exc)
        assert runner.location in msg, msg
        if unsupported:
            assert type(exc) is UnsupportedOperation, f"expected UnsupportedOperation for {unsupported}, got {type(exc).__name__}: {msg}"
            assert f"node '{unsupported[0]}'" in msg, msg
            return None, None
        assert precision, f"{runner.location} refused a graph its capabilities claim entirely ({type(exc).__name__}): {msg}"
        assert type(exc) is PrecisionError, f"expected PrecisionError for {precision}, got {type(exc).__name__}: {msg}"
        for n in precision:
            assert f"node '{n}'" in msg, msg
        assert f"{len(precision)} problem(s)" in msg and "opt in with precision=" in msg, msg
        return None, (seen, precision)
    unsupported, precision = node_problems(exe.graph, caps)
    assert not unsupported, f"{runner.location} compiled nodes its capabilities do not claim: {unsupported} (lowering must refuse them)"
    assert not precision, (
        f"{runner.location} compiled nodes below their required precision without an opt-in: {precision} "
        "(lowering must raise PrecisionError)"
    )
    return exe, None


# References are pure functions of (case, dtype, opt-in): the same case runs on every backend
# variant in one session, so each is computed once (mpmath references dominate otherwise).
_REFERENCES: dict[tuple, tuple] = {}


def reference(case: Case, d: DType, b: Built, rounded_to: DType | None = None) -> tuple:
    """``case.ref`` at the built inputs (rounded to ``rounded_to`` when given), memoized."""
    key = (case.ref, case.id, case.args, d, rounded_to)
    hit = _REFERENCES.get(key)
    if hit is None:
        ins = b.inputs if rounded_to is None else {k: _rounded(v, rounded_to) for k, v in b.inputs.items()}
        hit = _REFERENCES[key] = _as_tuple(case.ref(*ins.values(), **b.attrs))
    return hit


def _rounded(v: np.ndarray, p: DType) -> np.ndarray:
    """A float input as a backend computing at ``p`` may see it (other inputs unchanged)."""
    if v.dtype.kind == "f" and rank_of_precision(ir.dtype(v.dtype.name)) > rank_of_precision(p):
        return v.astype(p.numpy)
    return v


def _as_tuple(x: Any) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def _value(e: Any) -> Any:
    return e.value if isinstance(e, Expect) else e
