"""The compliance harness: spec rows, input generators, and the one function that runs a case.

A spec module (``specs/<family>.py``) lists ``ROWS``: one :class:`Row` per op ID, holding the
dtypes the op accepts, its :class:`Case` s (inputs, attributes, a float64 reference that does not
reuse any backend kernel, a tolerance) and its bad-input examples. ``run_case`` builds the
case's graph for one dtype and one runner and checks, from the runner's capabilities alone,
what must happen: claimed -> runs and matches the reference; not claimed -> refused at compile
time with ``UnsupportedOperation``; claimed at lower precision -> ``PrecisionError``, then runs
with ``precision=`` opted in on the node under test.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

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
    "compare", "ints", "run_case", "tol", "uniform", "values",
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
    """The case's graph for dtype ``d``: inputs x0, x1, ..., the node under test, outputs."""
    attrs = case.attrs_for(d)
    g = ir.Graph(f"{case.op}[{case.label}]:{d.value}")
    with g:
        ins = [g.input(f"x{i}", a.shape, a.dtype or d) for i, a in enumerate(case.args)]
        if case.build is not None:
            result = case.build(g, ins, d, precision)
        else:
            result = g.call(case.op, ins, attrs, id=SUBJECT, precision=precision)
        if isinstance(result, dict):
            for k, v in result.items():
                g.output(k, v)
        elif isinstance(result, tuple):
            for i, v in enumerate(result):
                g.output(f"out{i}", v)
        elif result is not None:
            g.output("out", result)
    if g.has_node(SUBJECT):  # the reference sees the canonical attributes, defaults included
        attrs = dict(g.node(SUBJECT).attrs)
    return Built(g, host_inputs(case, d) if with_values else {}, attrs)


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


def claimed(case: Case, d: DType, caps) -> bool:
    """Would this case run (possibly after a precision opt-in) on a backend with ``caps``?"""
    b = build(case, d, with_values=False)
    unsupported, precision = node_problems(b.graph, caps)
    if unsupported:
        return False
    if precision:
        b = build(case, d, caps.precision_for(case.op), with_values=False)
        return not any(node_problems(b.graph, caps))
    return True


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


def run_case(runner, case: Case, d: DType) -> None:
    """Check ``case`` at dtype ``d`` on ``runner`` (see the module docstring)."""
    if case.check is not None and case.ref is None:
        # Custom checks still obey the claim/refuse rule; they run only when claimed.
        b = build(case, d, with_values=False)
        if not _expect_refusal(runner, b.graph, case):
            case.check(runner, case, d)
        return
    b = build(case, d)
    caps = runner.capabilities
    _, precision = node_problems(b.graph, caps)
    compute_d = d
    if _expect_refusal(runner, b.graph, case):
        return
    if precision:
        with pytest.raises(PrecisionError) as info:
            runner.compile(b.graph)
        assert f"node '{precision[0]}'" in str(info.value)
        offered = caps.precision_for(case.op)
        b = build(case, d, offered)
        if any(node_problems(b.graph, caps)):
            return  # plumbing nodes need the precision too: honestly not runnable here
        compute_d = offered if d.is_float and rank_of_precision(offered) < rank_of_precision(d) else d
    exe = runner.compile(b.graph)
    tensors = {k: runner.upload(v) for k, v in b.inputs.items()}
    outs = exe.run(tensors)
    assert set(outs) == set(b.graph.outputs), f"outputs {sorted(outs)} != {sorted(b.graph.outputs)}"
    got = {k: outs[k].download() for k in b.graph.outputs}
    names = list(b.graph.outputs)
    expected = _as_tuple(case.ref(*b.inputs.values(), **b.attrs))
    assert len(expected) == len(names), f"{case.id}: reference gave {len(expected)} outputs for {names}"
    slack: tuple = (0.0,) * len(names)
    if compute_d is not d:
        # Computed at lower precision (opt-in): a backend may round the inputs to it first. Take
        # the reference at inputs rounded to compute_d, and allow what that rounding moves it.
        rounded = {k: (v.astype(compute_d.numpy) if v.dtype.kind == "f" else v) for k, v in b.inputs.items()}
        low = _as_tuple(case.ref(*rounded.values(), **b.attrs))
        with np.errstate(invalid="ignore"):  # inf - inf: no slack there (NaN -> 0 below)
            slack = tuple(np.abs(_as_f64(_value(e)) - _as_f64(_value(lo))) for e, lo in zip(expected, low))
        expected = low
    for name, want, sl in zip(names, expected, slack):
        t = b.graph.type_of(b.graph.outputs[name])
        arr = got[name]
        assert arr.dtype == t.dtype.numpy, f"{case.id} output {name}: dtype {arr.dtype}, graph says {t}"
        assert arr.shape == t.shape, f"{case.id} output {name}: shape {arr.shape}, graph says {t}"
        cmp_d = t.dtype if not t.dtype.is_float or rank_of_precision(compute_d) >= rank_of_precision(t.dtype) else compute_d
        compare(arr, want, cmp_d, case.tol, f"{case.id} output {name}", np.nan_to_num(sl, nan=0.0, posinf=0.0))


def _as_tuple(x: Any) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def _value(e: Any) -> Any:
    return e.value if isinstance(e, Expect) else e


def _expect_refusal(runner, graph: ir.Graph, case: Case) -> bool:
    """If the capabilities do not claim some node, compiling must raise UnsupportedOperation
    naming it (and nothing may run). Returns whether the graph was refused."""
    unsupported, _ = node_problems(graph, runner.capabilities)
    if not unsupported:
        return False
    with pytest.raises(UnsupportedOperation) as info:
        runner.compile(graph)
    msg = str(info.value)
    assert f"node '{unsupported[0]}'" in msg, msg
    assert runner.location in msg, msg
    return True
