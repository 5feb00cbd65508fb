"""Lowering: a manifest topology -> an ``ir.Graph`` with parameters as state.

Each manifest node becomes IR nodes. The node's ID survives as the ID of the IR node that
produces its value (internal nodes are ``<id>.<part>``, nodes inside a block are
``<block id>.<inner id>``), every IR node carries an ``ir.Origin`` pointing at the manifest
line, and layers declare their parameters as ``Graph.state`` named after the node
(``fc1.weight``, ``gpt.h_0.attn.qkv.weight``). Shapes are inferred by the IR builder as the
graph is built, so a shape mismatch is reported at the manifest node that caused it.

The manifest's ``model`` section (``ModelSpec``) reaches the layers through ``LayerContext``:
``ctx.linear`` adds the LoRA branch of ``model.lora`` to the linears it targets (the math is in
``caramba.manifest.lora``), and ``Lowered.frozen`` names the parameters a run does not train.

``cache=CacheSpec(capacity, batch)`` lowers the same model for incremental decoding: the graph
gains an input ``positions`` [batch] int64 (where each row's first token of this call sits),
attention layers keep their keys and values as resident state ``<attn>.k_cache`` /
``<attn>.v_cache`` [batch, kv_heads, capacity, head_dim] and attend over all of it through a
keep-mask, and position-dependent layers read their tables at ``positions + arange(seq)``
(the ``ctx.cache_*`` helpers). ``None`` (the default) gives today's graphs exactly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from caramba.errors import CarambaError, did_you_mean
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.graph import Graph, Origin, Ref, StateDecl, Value
from caramba.ir.types import ValueType
from caramba.manifest import lora as _lora
from caramba.manifest.errors import ManifestError
from caramba.manifest.loader import Document, _Ctx, _Expander, _plain, _Scope, _Splice
from caramba.manifest.registry import Asset, Registry, registry
from caramba.manifest.schema import LoraSpec, ModelSpec, NodeSpec, Strict, Topology, _to_manifest_error

MAX_BLOCK_DEPTH = 32
MAX_IR_NODES = 10_000  # a graph this large lowers in well under a second (gpt2-small: 384 nodes)
MAX_PARAMETERS = 2**30  # parameter values of a model: 8 GiB in float64, before optimizer state
MAX_VALUE_ELEMENTS = 2**31  # elements of one value (an input, an activation, a parameter)


@dataclass(frozen=True)
class ParamSpec:
    """How a parameter is initialized. ``init`` is ``normal`` (``std``), ``uniform`` (``bound``),
    ``zeros`` or ``ones``; values come from a seeded host generator at experiment time."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    init: str = "normal"
    std: float = 0.02
    bound: float = 0.0
    origin: Origin | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return prod(self.shape)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype.value, "init": self.init}
        if self.init == "normal":
            d["std"] = self.std
        if self.init == "uniform":
            d["bound"] = self.bound
        return d


@dataclass(frozen=True)
class CacheSpec:
    """Decode-mode lowering with a resident KV cache: ``capacity`` positions per sequence
    (prompt plus generated tokens), ``batch`` sequences. The caches are state, not parameters.

    ``span`` (default: capacity) is how many leading slots this graph reads and rewrites: a
    graph for positions below ``span`` attends over ``span`` slots and leaves the others as they
    are, so early decode steps do not pay for the whole capacity. The caller keeps
    ``positions + T <= span`` (``caramba.generate`` picks the span per step)."""

    capacity: int
    batch: int
    span: int | None = None

    def __post_init__(self) -> None:
        for k in ("capacity", "batch", "span"):
            v = getattr(self, k)
            if (k != "span" or v is not None) and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise CarambaError(f"cache {k} must be a positive integer, got {v!r}")
        if self.span is not None and self.span > self.capacity:
            raise CarambaError(f"cache span {self.span} is larger than its capacity {self.capacity}")

    @property
    def slots(self) -> int:
        """The slots a graph of this spec reads and writes (``span``, else ``capacity``)."""
        return self.span if self.span is not None else self.capacity


POSITIONS = "positions"  # the cache-mode graph input: [batch] int64, each row's first position


@dataclass
class Lowered:
    """A lowered topology: the graph, its parameters, inputs and the published values."""

    graph: Graph
    params: dict[str, ParamSpec]
    inputs: dict[str, ValueType]
    published: dict[str, Ref]
    seconds: float = 0.0
    frozen: frozenset[str] = frozenset()  # parameters a run does not train (model.freeze, model.lora)

    @property
    def outputs(self) -> dict[str, Ref]:
        return dict(self.graph.outputs)

    def param_count(self) -> int:
        """Number of parameter elements; a tied parameter is one state, so it counts once."""
        return sum(p.size for p in self.params.values())

    def summary(self) -> str:
        g = self.graph
        ops: dict[str, int] = {}
        for n in g.nodes:
            ops[n.op] = ops.get(n.op, 0) + 1
        frozen = f", {len(self.frozen)} frozen" if self.frozen else ""
        lines = [
            f"graph {g.name}: {len(g.nodes)} nodes, {len(self.params)} parameters "
            f"({self.param_count():,} values{frozen}), lowered in {self.seconds * 1e3:.1f} ms",
            "inputs:  " + ", ".join(f"{k}: {v}" for k, v in self.inputs.items()),
            "outputs: " + ", ".join(f"{k}: {g.type_of(r)}" for k, r in g.outputs.items()),
            "ops:     " + ", ".join(f"{k} x{v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])),
        ]
        return "\n".join(lines)


# ---- the layer API ------------------------------------------------------------------------


class LayerContext:
    """What a layer lowering sees: its node's ID prefix, origin and precision, and helpers that
    declare parameters (``param``) and add IR nodes (``op``) named under that prefix."""

    def __init__(self, lowering: "_Lowering", prefix: str, scope: str, origin: Origin, precision: DType | None) -> None:
        self._low = lowering
        self.prefix = prefix
        self.scope = scope  # the enclosing block's prefix ("" at the top level)
        self.origin = origin
        self.precision = precision

    @property
    def graph(self) -> Graph:
        return self._low.graph

    @property
    def dtype(self) -> DType:
        return self._low.dtype

    @property
    def training(self) -> bool:
        return self._low.training

    def _id(self, name: str | None) -> str:
        nid = self.prefix if name is None else f"{self.prefix}.{name}"
        return nid if not self.graph.has_node(nid) else self.graph.fresh_id(nid)

    def op(self, op_id: str, inputs: Sequence[Value] = (), attrs: Mapping[str, Any] | None = None,
           name: str | None = None) -> Any:
        """Add one IR node; ``name=None`` makes it the node that carries the manifest node's ID."""
        return self.graph.call(op_id, inputs, attrs, id=self._id(name), origin=self.origin, precision=self.precision)

    def const(self, value: Any, dtype: DType | str | None = None, name: str = "const") -> Value:
        import numpy as np

        arr = np.asarray(value, dtype=as_dtype(dtype or self.dtype).numpy)
        node = self.graph.apply("graph.constant", (), {"value": arr}, id=self._id(name), origin=self.origin)
        return Value(self.graph, node.outputs[0])

    def param(self, name: str, shape: Sequence[int], init: str = "normal", *, std: float = 0.02,
              bound: float = 0.0, dtype: DType | None = None) -> Value:
        """Declare parameter ``<prefix>.<name>`` as state and return a read of it."""
        full = f"{self.prefix}.{name}"
        spec = ParamSpec(full, tuple(int(s) for s in shape), dtype or self.dtype, init, std, bound, self.origin)
        if any(s <= 0 for s in spec.shape):
            raise CarambaError(f"parameter '{full}' would have shape {list(spec.shape)}; every size must be positive")
        old = self._low.params.get(full)
        if old is not None and (old.shape, old.dtype) != (spec.shape, spec.dtype):
            raise CarambaError(f"parameter '{full}' declared twice with shapes {list(old.shape)} and {list(spec.shape)}")
        self._low.params[full] = spec
        self.graph.state[full] = StateDecl(full, ValueType(spec.shape, spec.dtype), "external")
        return self.read(full)

    def linear(self, x: Value, d_out: int, sub: str = "", init: str = "normal", *, std: float = 0.02,
               bound: float = 0.0, name: str | None = "matmul") -> Value:
        """``x @ W`` with ``W`` [in, out] the parameter ``<prefix>[.<sub>].weight`` of the linear
        ``<prefix>[.<sub>]``; when ``model.lora`` targets that linear, plus its LoRA branch
        (``caramba.manifest.lora``). ``name`` names the IR node of the result (None: the node
        that carries the manifest node's ID). Every layer with a weight matrix goes through here."""
        pre = f"{sub}." if sub else ""
        full = f"{self.prefix}.{sub}" if sub else self.prefix
        w = self.param(f"{pre}weight", (x.shape[-1], d_out), init, std=std, bound=bound)
        self._low.linears.append(full)
        lora = self._low.lora
        if lora is None or not _lora.targets(lora, full):
            return self.op("linalg.matmul", (x, w), name=name)
        y = self.op("linalg.matmul", (x, w), name=f"{pre}matmul" if name is None else name)
        delta = _lora.branch(self, x, sub, d_out, lora)
        return self.op("math.add", (y, delta), name=None if name is None else f"{pre}lora.add")

    def read(self, state_name: str) -> Value:
        """Read a declared parameter by its full name (used for tied weights)."""
        decl = self.graph.state.get(state_name)
        if decl is None:
            raise CarambaError(f"no parameter '{state_name}'; declared: {did_you_mean(state_name, self.graph.state)}")
        attrs = {"name": state_name, "shape": decl.type.shape, "dtype": decl.type.dtype}
        rel = state_name[len(self.prefix) + 1 :] if state_name.startswith(self.prefix + ".") else state_name.rsplit(".", 1)[-1]
        node = self.graph.apply("state.read", (), attrs, id=self._id(rel), origin=self.origin)
        return Value(self.graph, node.outputs[0])

    def sibling(self, node_id: str) -> str:
        """The full prefix of a node in the same scope (``tied_to: tok_emb`` -> ``gpt.tok_emb``)."""
        return f"{self.scope}.{node_id}" if self.scope else node_id

    def step_key(self) -> Value:
        """An int64 scalar graph input ``step`` (fed by the trainer) for per-step randomness."""
        return self._low.step_input()

    # ---- decode mode (lower_topology(..., cache=CacheSpec)) ------------------------------
    @property
    def cache(self) -> CacheSpec | None:
        """The KV-cache lowering (capacity, batch), or None for ordinary full-sequence graphs."""
        return self._low.cache

    def shared(self, key: tuple, build: Callable[[], Any]) -> Any:
        """``build()`` once per graph for ``key`` (positions, masks, rope rows), then reused by
        every layer that asks for the same key."""
        memo = self._low.memo
        if key not in memo:
            memo[key] = build()
        return memo[key]

    def _cache_op(self, op_id: str, inputs: Sequence[Value] = (), attrs: Mapping[str, Any] | None = None,
                  name: str = "x") -> Value:
        return self.graph.call(op_id, inputs, attrs, id=self._low._fresh(f"cache.{name}"), origin=self.origin)

    def _cache_const(self, value: int, name: str) -> Value:
        return self.graph.constant(value, DType.int64, id=self._low._fresh(f"cache.{name}"))

    def _cache_spec(self, t: int) -> CacheSpec:
        spec = self._low.cache
        if spec is None:
            raise CarambaError("the KV-cache helpers need a cache lowering (lower_topology(..., cache=CacheSpec))")
        if t > spec.slots:
            raise CarambaError(f"{t} tokens do not fit a cache of {spec.slots} slots (capacity {spec.capacity})",
                               hint="give a larger cache capacity (or span)")
        return spec

    def cache_positions(self, t: int) -> Value:
        """[B, T] int64: the absolute position of each of this call's T tokens
        (``positions[:, None] + arange(T)``)."""
        spec = self._cache_spec(t)

        def build() -> Value:
            pos = self._low.positions_input()
            col = self._cache_op("shape.reshape", (pos,), {"shape": (spec.batch, 1)}, "pos_col")
            ar = self._cache_op("shape.iota", (), {"shape": (1, t), "axis": 1, "dtype": DType.int64}, "arange_t")
            return self._cache_op("math.add", (col, ar), name="token_pos")

        return self.shared(("positions", t), build)

    def cache_keep(self, t: int, window: int = 0) -> Value:
        """[B, T, slots] bool: token t of row b (at position p = positions[b] + t) sees cache
        slot c when c <= p and, with a window W > 0, c > p - W (W keys, its own included)."""
        spec = self._cache_spec(t)
        window = window if 0 < window < spec.slots else 0  # a window >= the slots keeps every causal key

        def build() -> Value:
            qpos = self._cache_op("shape.reshape", (self.cache_positions(t),), {"shape": (spec.batch, t, 1)}, "qpos")
            slots = self.shared(("slots",), lambda: self._cache_op(
                "shape.iota", (), {"shape": (1, 1, spec.slots), "axis": 2, "dtype": DType.int64}, "slots"))
            keep = self._cache_op("math.less_equal", (slots, qpos), name="causal")
            if window:
                lo = self._cache_op("math.sub", (qpos, self._cache_const(window, "window")), name="window_start")
                inside = self._cache_op("math.greater", (slots, lo), name="in_window")
                keep = self._cache_op("math.logical_and", (keep, inside), name="keep")
            return keep

        return self.shared(("keep", t, window), build)

    def cache_append(self, name: str, new: Value) -> Value:
        """Write ``new`` [B, H, T, D] (this call's keys or values) into the resident cache
        ``<prefix>.<name>`` [B, H, capacity, D] at positions ``positions[b] .. + T - 1`` of each
        row, and return the updated cache's first ``slots`` [B, H, slots, D] (a ``state.write``
        keeps the whole cache for the next call). Slots past a row's position keep what they
        held; the keep-mask never reads them."""
        spec = self._cache_spec(new.shape[2] if new.ndim == 4 else 0)
        if new.ndim != 4 or new.shape[0] != spec.batch:
            raise CarambaError(f"a cached value must be [batch, heads, seq, dim], got {new.type}")
        b, h, _, d = new.shape
        full = f"{self.prefix}.{name}"
        if full in self.graph.state:
            raise CarambaError(f"cache '{full}' declared twice")
        self.graph.state[full] = StateDecl(full, ValueType((b, h, spec.capacity, d), new.dtype), "zeros")
        self._low.caches.append(full)
        whole = self.read(full)
        # Rows positions[b] .. + T - 1 of each sequence take the new keys/values: one
        # shape.update_rows, which a backend performs in place on the resident cache.
        updated = self.op("shape.update_rows", (whole, new, self._low.positions_input()), {"axis": 2},
                          name=f"{name}.update")
        self.graph.write(full, updated, id=self._id(f"{name}.write"))
        n = spec.slots
        if n == spec.capacity:
            return updated
        return self.op("shape.slice", (updated,), {"starts": (0,), "ends": (n,), "axes": (2,)}, name=f"{name}.head")


Layer = Callable[[LayerContext, list[Value], dict[str, Any]], "Value | tuple[Value, ...]"]
LAYERS: dict[str, Layer] = {}


def layer(name: str) -> Callable[[Layer], Layer]:
    def deco(fn: Layer) -> Layer:
        if name in LAYERS:
            raise ValueError(f"layer {name} registered twice")
        LAYERS[name] = fn
        return fn

    return deco


# ---- lowering -----------------------------------------------------------------------------


class BlockTopology(Strict):
    nodes: list[NodeSpec] = Field(min_length=1)
    outputs: dict[str, str] = Field(default_factory=dict)
    description: str = ""


class _BlockDoc(Strict):
    topology: BlockTopology


class _Lowering:
    def __init__(self, reg: Registry, graph: Graph, dtype: DType, training: bool, lora: LoraSpec | None = None,
                 cache: CacheSpec | None = None) -> None:
        self.registry = reg
        self.graph = graph
        self.dtype = dtype
        self.training = training
        self.lora = lora
        self.cache = cache
        self.memo: dict[tuple, Any] = {}  # values shared by the layers of a cache lowering
        self.caches: list[str] = []  # the KV-cache state the layers declared
        self.params: dict[str, ParamSpec] = {}
        self.linears: list[str] = []  # every linear lowered (what model.lora.targets may name)
        self.block_stack: list[str] = []

    def step_input(self) -> Value:
        from caramba.train.layers import STEP_KEY

        key = STEP_KEY.get()  # set while a TrainStep builds its graph: the update counter
        if key is not None and key.graph is self.graph:
            return key
        if not self.graph.has_node("step"):
            return self.graph.input("step", (), DType.int64)
        return Value(self.graph, Ref("step"))

    def positions_input(self) -> Value:
        """The cache lowering's ``positions`` [batch] int64 graph input (made on first use)."""
        assert self.cache is not None
        if not self.graph.has_node(POSITIONS):
            return self.graph.input(POSITIONS, (self.cache.batch,), DType.int64)
        v = Value(self.graph, Ref(POSITIONS))
        if self.graph.node(POSITIONS).op != "graph.input" or v.type != ValueType((self.cache.batch,), DType.int64):
            raise CarambaError(f"a cache lowering needs the graph input '{POSITIONS}' [{self.cache.batch}] int64; "
                               f"the topology already has a '{POSITIONS}' of type {v.type}")
        return v

    def lower_nodes(self, nodes: list[NodeSpec], published: dict[str, Value], prefix: str, doc: Document,
                    path: tuple, producers: dict[str, str]) -> None:
        for i, spec in enumerate(nodes):
            self.lower_node(spec, (*path, i), published, prefix, doc, producers)

    def lower_node(self, spec: NodeSpec, npath: tuple, published: dict[str, Value], prefix: str, doc: Document,
                   producers: dict[str, str]) -> None:
        full = f"{prefix}.{spec.id}" if prefix else spec.id
        if len(self.graph.nodes) > MAX_IR_NODES:
            raise doc.error(npath, f"the model lowers to more than {MAX_IR_NODES:,} IR nodes (limit); check repeat "
                            "counts and layers", node=spec.id)
        origin = doc.origin(npath)
        try:
            asset = self.registry.get(spec.op, ("operation", "block", "model"))
        except KeyError as exc:
            raise doc.error((*npath, "op"), exc.args[0], node=spec.id) from None
        if spec.id in producers:
            raise doc.error((*npath, "id"), f"duplicate node id '{spec.id}' (also {producers[spec.id]})", node=spec.id)
        lo, hi = asset.arity()
        if not lo <= len(spec.in_) <= hi:
            names = ", ".join(p.name + ("?" if p.optional else "") for p in asset.inputs) or "none"
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise doc.error((*npath, "in"), f"{spec.op} takes {want} input{'s' if hi != 1 else ''} ({names}), "
                            f"got {len(spec.in_)}: {spec.in_}", node=spec.id)
        values = []
        for j, name in enumerate(spec.in_):
            v = published.get(name)
            if v is None:
                hint = did_you_mean(name, published) if published else "nothing is defined yet"
                raise doc.error((*npath, "in", j), f"input '{name}' of node '{spec.id}' is not an input of the "
                                f"topology nor produced by an earlier node; {hint}", node=spec.id)
            values.append(v)

        def bad_config(key: str | None, msg: str) -> None:
            p = (*npath, "config", key) if key is not None else (*npath, "config")
            raise doc.error(p, msg, key=key is not None and key not in spec.config, node=spec.id, op=spec.op)

        cfg = asset.resolve_config(spec.config, bad_config)
        precision = None
        if spec.precision is not None:
            try:
                precision = as_dtype(spec.precision)
            except CarambaError as exc:
                raise doc.error((*npath, "precision"), exc.message, node=spec.id) from None
        scope = prefix
        try:
            if asset.kind in ("block", "model"):
                results = self.lower_block(asset, cfg, values, full, doc, npath)
            elif asset.ir is not None:
                attrs = {k: v for k, v in cfg.items()}
                results = self.graph.call(asset.ir, values, attrs, id=self._fresh(full), origin=origin, precision=precision)
            else:
                fn = LAYERS.get(asset.lowering or "")
                if fn is None:
                    raise doc.error((*npath, "op"), f"{spec.op} names layer '{asset.lowering}', which is not implemented; "
                                    f"{did_you_mean(asset.lowering or '', LAYERS)}", node=spec.id)
                results = fn(LayerContext(self, full, scope, origin, precision), values, cfg)
        except ManifestError:
            raise
        except CarambaError as exc:
            raise ManifestError(f"node '{spec.id}' ({spec.op}): {exc.message}", loc=doc.loc(npath),
                                path=_fmt(npath), node=spec.id, op=spec.op, hint=exc.hint) from None
        results = results if isinstance(results, tuple) else (results,)
        if len(spec.out) > len(results):
            raise doc.error((*npath, "out"), f"{spec.op} produces {len(results)} output(s), but `out` names "
                            f"{len(spec.out)}: {spec.out}", node=spec.id)
        names = [spec.id] + [n for n in spec.out if n != spec.id]
        for name in names:
            if name in published:
                where = producers.get(name, "a topology input")
                raise doc.error((*npath, "out" if name != spec.id else "id"),
                                f"'{name}' is already defined (by {where})", node=spec.id)
        published[spec.id] = results[0]
        producers[spec.id] = f"node at {doc.loc(npath)}"
        for j, name in enumerate(spec.out):
            published[name] = results[j]
            producers[name] = f"node '{spec.id}' at {doc.loc(npath)}"

    def _fresh(self, nid: str) -> str:
        return nid if not self.graph.has_node(nid) else self.graph.fresh_id(nid)

    def lower_block(self, asset: Asset, cfg: dict[str, Any], values: list[Value], full: str, doc: Document,
                    npath: tuple) -> tuple[Value, ...]:
        site = doc.loc(npath)
        if asset.op in self.block_stack:
            raise doc.error(npath, f"block {asset.op} contains itself ({' -> '.join(self.block_stack)})")
        if len(self.block_stack) >= MAX_BLOCK_DEPTH:
            raise doc.error(npath, f"blocks nested more than {MAX_BLOCK_DEPTH} deep")
        bdoc = expand_block(asset, cfg, self.registry, notes=(f"in {asset.kind} '{full}' ({asset.op}) at {site}", *site.notes))
        try:
            topo = _BlockDoc.model_validate(bdoc.data).topology
        except ValidationError as exc:
            raise _to_manifest_error(bdoc, exc) from None
        published = {p.name: v for p, v in zip(asset.inputs, values)}
        producers = {p.name: f"port '{p.name}' of {asset.op}" for p in asset.inputs[: len(values)]}
        self.block_stack.append(asset.op)
        try:
            self.lower_nodes(topo.nodes, published, full, bdoc, ("topology", "nodes"), producers)
        finally:
            self.block_stack.pop()
        out = []
        for p in asset.outputs:
            name = topo.outputs.get(p.name, p.name if p.name in published else None)
            if name is None or name not in published:
                raise bdoc.error(("topology", "outputs"), f"{asset.op} output port '{p.name}' is not bound to a "
                                 f"value (topology.outputs: {topo.outputs})")
            out.append(published[name])
        return tuple(out)


def origin_error(doc: Document, origin: Origin | None, msg: str) -> ManifestError:
    """A ManifestError at the manifest line an IR node came from (else at the topology)."""
    from caramba.manifest.errors import Loc

    if origin is None or origin.file is None or origin.line is None:
        return doc.error(("topology",), msg)
    loc = Loc(origin.file, origin.line, origin.col or 1, (origin.note,) if origin.note else ())
    return ManifestError(msg, loc=loc, path=origin.path)


def check_sizes(low: Lowered, doc: Document) -> None:
    """Refuse a model whose parameters or values are too large to run (MAX_PARAMETERS,
    MAX_VALUE_ELEMENTS), at the node that declares the largest one."""

    def error(origin: Origin | None, msg: str) -> ManifestError:
        return origin_error(doc, origin, msg)

    if low.param_count() > MAX_PARAMETERS:
        big = max(low.params.values(), key=lambda p: p.size)
        raise error(big.origin, f"the model has {low.param_count():,} parameter values, over the limit of "
                    f"{MAX_PARAMETERS:,}; the largest is '{big.name}' {list(big.shape)}")
    for node in low.graph.nodes:
        for t in node.types:
            if prod(t.shape) > MAX_VALUE_ELEMENTS:
                raise error(node.origin, f"IR node '{node.id}' ({node.op}) makes a value of shape {list(t.shape)}: "
                            f"{prod(t.shape):,} elements, over the limit of {MAX_VALUE_ELEMENTS:,}",)


def _fmt(path: tuple) -> str:
    from caramba.manifest.errors import format_path

    return format_path(path)


def expand_block(asset: Asset, cfg: Mapping[str, Any], reg: Registry | None = None, notes: tuple[str, ...] = ()) -> Document:
    """Expand a block/model asset's topology with ``${config.*}`` bound to ``cfg``."""
    from caramba.manifest.errors import Loc
    from caramba.manifest.registry import asset_display, asset_root

    # includes resolve in the asset's own folder (a user's search-path folder), else the registry's
    root = asset.root or (reg.root if reg is not None and reg.root is not None else asset_root())
    ctx = _Ctx(root, display=lambda p: asset_display(p, root))
    scope = _Scope()
    scope.bind_value("config", dict(cfg), Loc(asset.file, 1, 1))
    expanded = _Expander(ctx).expand(asset.topology, scope, notes)  # type: ignore[arg-type]
    if isinstance(expanded, _Splice) or expanded.kind != "map":
        raise ManifestError(f"the topology of {asset.op} must be a mapping with nodes", loc=asset.topology.loc)  # type: ignore[union-attr]
    locs: dict[tuple, Any] = {}
    key_locs: dict[tuple, Any] = {}
    data = _plain(expanded, ("topology",), locs, key_locs)
    return Document({"topology": data}, asset.file, root, locs, key_locs)


def resolve_dims(topology: Topology, doc: Document, dims: Mapping[str, int] | None, base: tuple) -> dict[str, ValueType]:
    known = {**topology.dims, **(dims or {})}
    out: dict[str, ValueType] = {}
    for name, spec in topology.inputs.items():
        shape = []
        for j, d in enumerate(spec.shape):
            if isinstance(d, str):
                if d not in known:
                    raise doc.error((*base, "inputs", name, "shape", j),
                                    f"symbolic dimension '{d}' has no size; give it in topology.dims or let the trainer "
                                    f"bind it ({did_you_mean(d, known) if known else 'no dims are defined'})")
                shape.append(int(known[d]))
            else:
                shape.append(d)
        dt = spec.dtype if "dtype" in spec.model_fields_set else topology.dtype
        try:
            out[name] = ValueType(tuple(shape), as_dtype(dt))
        except CarambaError as exc:
            raise doc.error((*base, "inputs", name, "dtype"), exc.message) from None
    return out


def lower_topology(
    topology: Topology,
    doc: Document,
    *,
    dims: Mapping[str, int] | None = None,
    outputs: Sequence[str] | None = None,
    training: bool = False,
    name: str = "model",
    base: tuple = ("topology",),
    reg: Registry | None = None,
    model_spec: ModelSpec | None = None,
    cache: CacheSpec | None = None,
) -> Lowered:
    """Lower ``topology`` (from ``doc``, for locations) to an IR graph.

    ``dims`` binds symbolic input dimensions (``batch``, ``seq``); ``outputs`` picks which
    published values become graph outputs (default: ``topology.outputs``, else the last node);
    ``training`` selects training behaviour of layers such as dropout; ``model_spec`` (the
    manifest's ``model`` section) adds LoRA adapters and names the frozen parameters;
    ``cache`` lowers for incremental decoding with a resident KV cache (see the module docstring).
    """
    t0 = time.perf_counter()
    graph = Graph(name)
    inputs = resolve_dims(topology, doc, dims, base)
    values: dict[str, Value] = {}
    for k, vt in inputs.items():
        node = graph.apply("graph.input", (), {"shape": vt.shape, "dtype": vt.dtype}, id=k,
                           origin=doc.origin((*base, "inputs", k)))
        values[k] = Value(graph, node.outputs[0])
    published, params = lower_into(graph, topology, doc, values, training=training, base=base, reg=reg,
                                   model_spec=model_spec, cache=cache)
    wanted: dict[str, str]
    if outputs is not None:
        wanted = {o: topology.outputs.get(o, o) for o in outputs}
    elif topology.outputs:
        wanted = dict(topology.outputs)
    else:
        last = topology.all_nodes[-1].id
        wanted = {last: last}
    for out_name, src in wanted.items():
        v = published.get(src)
        if v is None:
            path = (*base, "outputs", out_name) if out_name in topology.outputs else (*base, "outputs")
            raise doc.error(path, f"output '{out_name}' names '{src}', which no node produces; "
                            f"{did_you_mean(src, published)}")
        graph.output(out_name, v)
    return Lowered(graph, params, inputs, {k: v.ref for k, v in published.items()}, time.perf_counter() - t0,
                   frozenset(_lora.frozen(params, model_spec)))


def lower_into(graph: Graph, topology: Topology, doc: Document, inputs: Mapping[str, Value], *,
               training: bool = False, base: tuple = ("topology",), reg: Registry | None = None,
               model_spec: ModelSpec | None = None, cache: CacheSpec | None = None,
               ) -> tuple[dict[str, Value], dict[str, ParamSpec]]:
    """Build ``topology``'s nodes into ``graph`` (e.g. a train step being built) on ``inputs``;
    returns every published value and the parameters the layers declared. ``model_spec`` and
    ``cache``: as in ``lower_topology`` (its globs must each match a parameter or linear)."""
    try:
        dtype = as_dtype(topology.dtype)
    except CarambaError as exc:
        raise doc.error((*base, "dtype"), exc.message) from None
    if cache is not None and training:
        raise doc.error(base, "a KV-cache lowering is for inference; it cannot train")
    low = _Lowering(reg or registry(), graph, dtype, training, model_spec.lora if model_spec is not None else None,
                    cache)
    missing = [k for k in topology.inputs if k not in inputs]
    if missing:
        raise doc.error((*base, "inputs"), f"no value given for topology input(s) {missing}")
    published: dict[str, Value] = {k: inputs[k] for k in topology.inputs}
    producers = {k: "a topology input" for k in published}
    res = topology.pretrained
    if res is not None:  # the checkpoint's model node, located at the from_safetensors section
        low.lower_node(res.node, (*base, "from_safetensors"), published, "", doc, producers)
    low.lower_nodes(topology.nodes, published, "", doc, (*base, "nodes"), producers)
    _lora.check(model_spec, low.params, low.linears, doc, training=training)
    if cache is not None and not low.caches:
        raise doc.error(base, "this model has no attention layer that keeps a KV cache (causal self-attention: "
                        "attention.sdpa, attention.gqa), so it cannot decode incrementally")
    return published, low.params




def lower_example(asset: Asset, reg: Registry | None = None) -> Lowered:
    """Lower a block/model/operation asset on its ``example`` inputs and config (asset browser, tests)."""
    from caramba.manifest.schema import validate

    ex = asset.example
    if not isinstance(ex, dict) or "inputs" not in ex:
        raise ManifestError(f"{asset.op} has no example (example: {{inputs: {{...}}, config: {{...}}}})")
    node_id = asset.op.rsplit(".", 1)[-1]
    data = {
        "name": node_id,
        "topology": {
            "inputs": ex["inputs"],
            "nodes": [{"id": node_id, "op": asset.op, "in": list(ex["inputs"]), "config": ex.get("config") or {}}],
        },
    }
    doc = Document(data, asset.file, Path("."))
    return lower_topology(validate(doc).topology, doc, reg=reg, name=node_id)


__all__ = [
    "LAYERS", "MAX_IR_NODES", "MAX_PARAMETERS", "MAX_VALUE_ELEMENTS", "POSITIONS", "CacheSpec", "LayerContext", "Lowered", "ParamSpec", "check_sizes", "expand_block", "origin_error", "layer", "lower_example", "lower_into", "lower_topology",
    "resolve_dims",
]

from caramba.manifest import layers as _layers  # noqa: E402, F401  (registers the layer lowerings)
