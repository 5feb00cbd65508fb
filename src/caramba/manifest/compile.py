"""From a manifest file to a checked plan: document, typed manifest, datasets, bound dims, IR.

``prepare(path)`` is what ``caramba manifest validate`` runs and what every experiment starts
with; it raises one located ManifestError for the first problem it finds.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

from caramba.errors import CarambaError, did_you_mean
from caramba.manifest.errors import ManifestError
from caramba.manifest.loader import OVERRIDE_PATH, Document, _flow, load, load_string
from caramba.manifest.lower import MAX_IR_NODES, Lowered, check_sizes, lower_topology, origin_error
from caramba.manifest.schema import MAX_DATA_VALUES, MAX_RUNS, Manifest, validate


@dataclass
class Prepared:
    """A loaded, validated manifest with its datasets and the sizes of its symbolic dims."""

    doc: Document
    manifest: Manifest
    datasets: dict[str, Any] = field(default_factory=dict)
    dims: dict[str, int] = field(default_factory=dict)
    feed: dict[str, str] = field(default_factory=dict)  # topology input -> dataset field
    data_name: str | None = None
    sha256: str = ""
    seconds: float = 0.0
    optimizer: tuple[Any, dict[str, Any]] | None = None  # (optimizer asset, resolved config)

    @property
    def dataset(self) -> Any:
        return self.datasets.get(self.data_name) if self.data_name else None

    def lower(self, *, batch: int | None = None, training: bool = False, outputs: Iterable[str] | None = None,
              name: str | None = None) -> Lowered:
        dims = dict(self.dims)
        if batch is not None:
            dims["batch"] = batch
        return lower_topology(self.manifest.topology, self.doc, dims=dims, training=training,
                              outputs=list(outputs) if outputs is not None else None,
                              name=name or self.manifest.name, model_spec=self.manifest.model)


def load_document(source: str | Path | Document, overrides: Mapping[str, Any] | Iterable[str] | None = None) -> Document:
    if isinstance(source, Document):
        if not overrides:
            return source
        if not source.text:
            raise ManifestError("overrides apply when loading; this Document has no source text to load again")
        more = [f"{k}={v}" for k, v in overrides.items()] if isinstance(overrides, Mapping) else list(overrides)
        return load_string(source.text, source.source, root=source.root, overrides=[*source.overrides, *more])
    if isinstance(source, str) and ("\n" in source or (":" in source and not source.endswith((".yml", ".yaml")))):
        return load_string(source, overrides=overrides)  # YAML text
    return load(Path(source), overrides=overrides)


@dataclass
class _Work:
    """What one ``check`` (a manifest and its tuner arms) has loaded and lowered: an arm that
    keeps the data or the model reuses them, and the total is bounded so many arms stay fast."""

    datasets: dict[tuple, Any] = field(default_factory=dict)
    lowered: dict[str, Lowered] = field(default_factory=dict)  # by topology, dims and training
    ir_nodes: int = 0
    data_values: int = 0


MAX_TUNER_IR_NODES = 2 * MAX_IR_NODES  # IR nodes lowered for a manifest and all its arms
MAX_TUNER_DATA_VALUES = 2 * MAX_DATA_VALUES  # data values loaded for a manifest and all its arms


def prepare(source: str | Path | Document, overrides: Mapping[str, Any] | Iterable[str] | None = None, *,
            load_data: bool = True, _work: _Work | None = None) -> Prepared:
    """Load, validate, and bind the data of a manifest (file path, YAML text or Document)."""
    t0 = time.perf_counter()
    doc = load_document(source, overrides)
    manifest = validate(doc)
    sha = hashlib.sha256(doc.as_yaml().encode()).hexdigest()
    prep = Prepared(doc, manifest, sha256=sha)
    prep.dims = dict(manifest.topology.dims)
    if manifest.trainer is not None:
        prep.dims.setdefault("batch", manifest.trainer.batch_size)
    _check_references(prep)
    if load_data and manifest.datasets:
        _bind_data(prep, _work)
    prep.seconds = time.perf_counter() - t0
    return prep


def _check_references(prep: Prepared) -> None:
    m, doc = prep.manifest, prep.doc
    nodes = m.topology.all_nodes
    published = {n.id for n in nodes} | {o for n in nodes for o in n.out} | set(m.topology.inputs)
    published |= set(m.topology.outputs)
    if m.trainer is not None:
        if m.trainer.loss not in published:
            raise doc.error(("trainer", "loss"), f"trainer.loss '{m.trainer.loss}' is not produced by the topology; "
                            f"{did_you_mean(m.trainer.loss, published)}")
        if m.datasets:
            name = m.trainer.data
            if name is None:
                if len(m.datasets) > 1:
                    raise doc.error(("trainer",), f"several datasets ({', '.join(m.datasets)}): say which one with trainer.data")
                name = next(iter(m.datasets))
            elif name not in m.datasets:
                raise doc.error(("trainer", "data"), f"no dataset '{name}'; {did_you_mean(name, m.datasets)}")
            prep.data_name = name
        elif not any(r.mode == "eval" for t in m.targets for r in t.runs):
            raise doc.error(("trainer",), "a trainer needs data: add a `datasets:` section")
    elif m.datasets:
        prep.data_name = next(iter(m.datasets)) if len(m.datasets) == 1 else None
    if m.trainer is not None:
        prep.optimizer = resolve_optimizer(prep)
    for i, metric in enumerate(m.metrics):
        if metric not in published:
            raise doc.error(("metrics", i), f"metric '{metric}' is not produced by the topology; {did_you_mean(metric, published)}")
    for i, arm in enumerate(m.tuner.arms if m.tuner else ()):
        for key in arm.set:
            if not OVERRIDE_PATH.fullmatch(key) or key.split(".")[0] not in {"variables", *Manifest.model_fields} - {"tuner"}:
                raise doc.error(("tuner", "arms", i, "set", key), f"tuner arm '{arm.id}' sets '{key}', which is not a "
                                "manifest path (use variables.<name> or a section such as trainer.lr)", key=True)
    _check_targets(prep)


def _check_targets(prep: Prepared) -> None:
    """What a run refuses before it starts: backend specs, passes to disable, the number of runs."""
    from caramba.compiler.pipeline import optional_stages
    from caramba.compute.registry import parse_spec

    m, doc = prep.manifest, prep.doc
    for i, t in enumerate(m.targets):
        if t.backend is not None:  # a backend not installed here is fine: it may be on the machine that runs
            try:
                parse_spec(t.backend)
            except CarambaError as exc:
                raise doc.error(("targets", i, "backend"), exc.message, hint=exc.hint) from None
        for j, name in enumerate(t.disable_passes):
            if name not in optional_stages():
                raise doc.error(("targets", i, "disable_passes", j), f"'{name}' is not a pass that can be disabled; "
                                f"{did_you_mean(name, optional_stages())}")
    runs = (sum(len(t.runs) for t in m.targets) or 1) * (len(m.tuner.arms) if m.tuner else 1)
    if runs > MAX_RUNS:
        raise doc.error(("targets",), f"the manifest plans {runs} runs (tuner arms x targets x runs); the limit is {MAX_RUNS}")


def resolve_optimizer(prep: Prepared) -> tuple[Any, dict[str, Any]]:
    """The trainer's optimizer asset and its config checked against the asset's schema."""
    from caramba.manifest.registry import registry

    doc, spec = prep.doc, prep.manifest.trainer.optimizer  # type: ignore[union-attr]
    try:
        asset = registry().get(spec.op, ("optimizer",))
    except KeyError as exc:
        raise doc.error(("trainer", "optimizer", "op") if isinstance(doc.get(("trainer", "optimizer")), dict)
                        else ("trainer", "optimizer"), exc.args[0]) from None

    def bad(key: str | None, msg: str) -> None:
        raise doc.error(("trainer", "optimizer", key) if key else ("trainer", "optimizer"), msg, key=key is not None)

    return asset, asset.resolve_config(spec.config, bad)


def _bind_data(prep: Prepared, work: _Work | None = None) -> None:
    from caramba.data import DataError, TextDataset, load_dataset, unify_dims

    m, doc = prep.manifest, prep.doc
    base = doc.base_dir
    for name, spec in m.datasets.items():
        key = (name, spec.model_dump_json(), str(base))  # tuner arms that keep a dataset share it
        try:
            ds = work.datasets.get(key) if work is not None else None
            prep.datasets[name] = ds if ds is not None else load_dataset(name, spec, base)
        except DataError as exc:  # at the key it names (a text dataset's `tokenizer:`), else the entry
            raise doc.error(("datasets", name, *exc.key), exc.message, hint=exc.hint, key=bool(exc.key)) from None
        except (OSError, ValueError, MemoryError) as exc:  # a file that is not what its source says
            raise doc.error(("datasets", name), f"dataset '{name}' cannot be loaded: {type(exc).__name__}: "
                            f"{str(exc)[:300]}") from None
        if work is not None and ds is None:
            ds = work.datasets[key] = prep.datasets[name]
            width = sum(prod(f.shape) for f in ds.fields.values())
            work.data_values += width * sum(ds.size(s) for s in ds.splits)
    if prep.data_name is None:
        return
    ds = prep.datasets[prep.data_name]
    spec = m.datasets[prep.data_name]
    t = m.trainer
    if m.trains:
        n, batch = ds.size("train"), prep.dims.get("batch", t.batch_size)  # type: ignore[union-attr]
        if n == 0 or (batch > n and not isinstance(ds, TextDataset)):
            raise doc.error(("datasets", prep.data_name, "split"), f"dataset '{prep.data_name}' has {n} training "
                            f"examples, fewer than the batch of {batch}; give `train` a larger share or lower "
                            "trainer.batch_size")
    for k in spec.feed:
        if k not in m.topology.inputs:
            raise doc.error(("datasets", prep.data_name, "feed", k), f"feed names '{k}', which is not a topology input; "
                            f"{did_you_mean(k, m.topology.inputs)}", key=True)
    feed: dict[str, str] = {}
    for inp in m.topology.inputs:
        fld = spec.feed.get(inp, inp)
        if fld not in ds.fields:
            where = ("datasets", prep.data_name, "feed", inp) if inp in spec.feed else ("topology", "inputs", inp)
            raise doc.error(where, f"topology input '{inp}' has no field in dataset '{prep.data_name}' (fields: "
                            f"{', '.join(ds.fields)}); map it with datasets.{prep.data_name}.feed: {{{inp}: <field>}}"
                            + (f"; {did_you_mean(fld, ds.fields)}" if inp in spec.feed else ""))
        feed[inp] = fld
    prep.feed = feed
    if m.is_experiment:  # runs feed batches of varying size (the last eval batch) along the first axis
        for inp in feed:
            shape = m.topology.inputs[inp].shape
            if not shape or shape[0] != "batch" or "batch" in shape[1:]:
                raise doc.error(("topology", "inputs", inp, "shape"), f"input '{inp}' is fed from dataset "
                                f"'{prep.data_name}' in batches: its shape must start with the dimension `batch` "
                                f"(and name it once), got {list(shape)}")
    batch = prep.dims.get("batch", 1)
    specs = {k: v.shape for k, v in m.topology.inputs.items()}
    actual = {k: (batch, *ds.fields[f].shape) for k, f in feed.items()}
    try:
        prep.dims = unify_dims(specs, actual, prep.dims)
    except DataError as exc:
        raise doc.error(("topology", "inputs"), f"{exc.message} (dataset '{prep.data_name}')") from None
    for inp, fld in feed.items():
        want = m.topology.inputs[inp].dtype if "dtype" in m.topology.inputs[inp].model_fields_set else m.topology.dtype
        have = ds.fields[fld].dtype
        if (have.kind in "iu") != (want.startswith("int") or want.startswith("uint")):
            raise doc.error(("topology", "inputs", inp), f"input '{inp}' is {want} but dataset field '{fld}' holds "
                            f"{have.name}; declare dtype: {'int64' if have.kind in 'iu' else 'float64'}")


def check(source: str | Path | Document, overrides: Mapping[str, Any] | Iterable[str] | None = None, *,
          arms: bool = True, _work: _Work | None = None) -> tuple[Prepared, Lowered]:
    """Everything ``manifest validate`` checks: load, schema, data binding and lowering to IR,
    the sizes of the model, the loss and metrics a trainer reads, and (with ``arms``) the
    manifest each tuner arm makes."""
    work = _Work() if _work is None else _work
    prep = prepare(source, overrides, _work=work)
    training = prep.manifest.trains  # runs that only evaluate need nothing left to train (model.freeze)
    key = json.dumps([prep.doc.data.get("topology"), prep.doc.data.get("model"), prep.dims, training], sort_keys=True,
                     default=str)
    low = work.lowered.get(key)
    if low is None:
        low = prep.lower(training=training)
        try:
            from caramba.ir import verify

            verify(low.graph)
        except CarambaError as exc:  # pragma: no cover - the builder already checked every node
            raise ManifestError(f"the lowered graph does not verify: {exc}") from None
        check_sizes(low, prep.doc)
        if prep.manifest.topology.pretrained is not None:  # every parameter has its checkpoint tensor
            from caramba.manifest.pretrained import bind

            bind(prep.manifest.topology.pretrained, low.params, prep.doc)
        work.lowered[key] = low
        work.ir_nodes += len(low.graph.nodes)
    _check_outputs(prep, low)
    _check_index_ranges(prep, low)
    m = prep.manifest
    if m.is_experiment and prep.dataset is None and not m.datasets:  # every run, train or eval, reads one
        raise prep.doc.error(("datasets",) if "datasets" in prep.doc.data else (),
                             "this manifest has runs but no dataset for them to read",
                             hint="add a datasets: section (docs/manifest.md, Datasets)")
    for i, arm in enumerate(m.tuner.arms if m.tuner and arms else ()):
        more = [f"{k}={_flow(v)}" for k, v in arm.set.items()]
        where = prep.doc.loc(("tuner", "arms", i))
        try:
            check(prep.doc, more, arms=False, _work=work)
        except ManifestError as exc:
            raise ManifestError(exc.message, loc=(exc.loc or where).noted((f"with tuner arm '{arm.id}' at {where}",)),
                                path=exc.path, hint=exc.hint, node=exc.node, op=exc.op) from None
        if work.ir_nodes > MAX_TUNER_IR_NODES or work.data_values > MAX_TUNER_DATA_VALUES:
            raise prep.doc.error(("tuner", "arms", i), f"with tuner arm '{arm.id}' the arms lower {work.ir_nodes:,} IR "
                                 f"nodes and load {work.data_values:,} data values together, over the limits of "
                                 f"{MAX_TUNER_IR_NODES:,} and {MAX_TUNER_DATA_VALUES:,}; use fewer arms or arms that "
                                 "keep the model and the data")
    return prep, low


# IR ops whose integer input indexes an axis of another input: op -> (index input, indexed input, axis).
INDEXING_OPS = {
    "train.loss.cross_entropy": (1, 0, -1), "train.metric.accuracy": (1, 0, -1), "train.metric.f1": (1, 0, -1),
    "train.metric.perplexity": (1, 0, -1), "nn.embedding": (0, 1, 0),
}


def _check_index_ranges(prep: Prepared, low: Lowered) -> None:
    """Class labels and token IDs fed from the data fit the model: a run refuses a label >= the
    number of logits (or a token >= the embedding rows) at its first batch."""
    from caramba.data import TextDataset

    ds = prep.dataset
    if ds is None:
        return
    ranges: dict[str, tuple[int, int]] = {}  # topology input -> (min, max) of its data
    for inp, fld in prep.feed.items():
        if ds.fields[fld].dtype.kind not in "iu":
            continue
        if isinstance(ds, TextDataset):
            ranges[inp] = (0, len(ds.vocab) - 1)
        elif hasattr(ds, "arrays"):
            parts = [ds.arrays(s)[fld] for s in ds.splits]
            if any(p.size for p in parts):
                ranges[inp] = (min(int(p.min()) for p in parts if p.size), max(int(p.max()) for p in parts if p.size))
    g = low.graph
    for node in g.nodes:
        rule = INDEXING_OPS.get(node.op)
        if rule is None:
            continue
        idx, target, axis = rule
        src = g.node(node.inputs[idx].node)
        if src.op != "graph.input" or src.id not in ranges:
            continue
        size = g.type_of(node.inputs[target]).shape[axis]
        lo, hi = ranges[src.id]
        if lo < 0 or hi >= size:
            raise origin_error(prep.doc, node.origin, f"'{src.id}' (dataset '{prep.data_name}' field "
                               f"'{prep.feed[src.id]}') holds values in [{lo}, {hi}], but node '{node.id}' ({node.op}) "
                               f"indexes {size} entries with it; make the model's classes or vocabulary size at "
                               f"least {hi + 1}")


def _check_outputs(prep: Prepared, low: Lowered) -> None:
    """The trainer's loss is a float scalar, metrics are scalars, and there is something to train."""
    m, doc = prep.manifest, prep.doc
    if m.trainer is None:
        return
    if not low.params and m.trains:
        raise doc.error(("topology", "nodes"), "the model has no parameters to train",
                        hint="add a layer with parameters (e.g. projection.linear), or only evaluate: runs with "
                             "mode: eval, or trainer.steps: 0")
    from caramba.run import build_optimizer  # what a run builds: the same refusals (nesterov without momentum)

    for steps in sorted({r.steps if r.steps is not None else m.trainer.steps for t in m.targets for r in t.runs}
                        or {m.trainer.steps}):
        build_optimizer(prep, max(steps, 1))
    reserved = {"step", "lr", "grad_norm"}  # what a train step itself outputs
    for path, name in [(("trainer", "loss"), m.trainer.loss), *((("metrics", i), x) for i, x in enumerate(m.metrics))]:
        if name not in low.published:  # an alias in topology.outputs: a run reads node values
            raise doc.error(path, f"'{name}' is an output name; name the node that computes it "
                            f"('{m.topology.outputs.get(name, name)}')")
        t = low.graph.type_of(low.published[name])
        if t.shape != () or (path[0] == "trainer" and not t.dtype.is_float):
            what = "the loss must be a float scalar" if path[0] == "trainer" else "a metric must be a scalar"
            raise doc.error(path, f"{what}; '{name}' is {t}", hint="reduce it (e.g. reduce.mean) or name a loss/metric node")
        if path[0] == "metrics" and name in reserved and name != m.trainer.loss:
            raise doc.error(path, f"metric '{name}' has the name of a train step output ({', '.join(sorted(reserved))})")
    if m.trains:  # a loss only evaluated needs no gradient
        _check_differentiable(prep, low)


def _check_differentiable(prep: Prepared, low: Lowered) -> None:
    """The loss has a gradient with respect to the trained parameters: no non-differentiable
    op (argmax, a metric, a comparison) between them, refused here at its line, not when the
    first run builds its train step."""
    from caramba.autodiff.core import blocking_node

    m, g = prep.manifest, low.graph
    trained = set(low.params) - set(low.frozen)
    wrt = [n.outputs[0] for n in g.nodes if n.op == "state.read" and n.attrs["name"] in trained]
    node = blocking_node(g, [low.published[m.trainer.loss]], wrt)
    if node is not None:
        msg = (f"the loss '{m.trainer.loss}' has no gradient with respect to the parameters: it flows through node "
               f"'{node.id}' ({node.op}), which is not differentiable")
        if node.origin is None or node.origin.line is None:
            raise prep.doc.error(("trainer", "loss"), msg)
        raise origin_error(prep.doc, node.origin, msg)


__all__ = ["Prepared", "check", "load_document", "prepare", "resolve_optimizer"]
