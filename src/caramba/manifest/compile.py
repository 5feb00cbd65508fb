"""From a manifest file to a checked plan: document, typed manifest, datasets, bound dims, IR.

``prepare(path)`` is what ``caramba manifest validate`` runs and what every experiment starts
with; it raises one located ManifestError for the first problem it finds.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caramba.errors import CarambaError, did_you_mean
from caramba.manifest.errors import ManifestError
from caramba.manifest.loader import Document, load, load_string
from caramba.manifest.lower import Lowered, lower_topology
from caramba.manifest.schema import Manifest, validate


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
                              name=name or self.manifest.name)


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


def prepare(source: str | Path | Document, overrides: Mapping[str, Any] | Iterable[str] | None = None, *,
            load_data: bool = True) -> Prepared:
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
        _bind_data(prep)
    prep.seconds = time.perf_counter() - t0
    return prep


def _check_references(prep: Prepared) -> None:
    m, doc = prep.manifest, prep.doc
    published = {n.id for n in m.topology.nodes} | {o for n in m.topology.nodes for o in n.out} | set(m.topology.inputs)
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
            if key.split(".")[0] not in {"variables", *Manifest.model_fields}:
                raise doc.error(("tuner", "arms", i, "set", key), f"tuner arm '{arm.id}' sets '{key}', which is not a "
                                "manifest path (use variables.<name> or a section such as trainer.lr)", key=True)


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


def _bind_data(prep: Prepared) -> None:
    from caramba.data import DataError, load_dataset, unify_dims

    m, doc = prep.manifest, prep.doc
    base = Path(doc.source).parent if doc.source not in ("<string>", "") else doc.root
    for name, spec in m.datasets.items():
        try:
            prep.datasets[name] = load_dataset(name, spec, base)
        except DataError as exc:
            raise doc.error(("datasets", name), exc.message, hint=exc.hint) from None
    if prep.data_name is None:
        return
    ds = prep.datasets[prep.data_name]
    spec = m.datasets[prep.data_name]
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


def check(source: str | Path | Document, overrides: Mapping[str, Any] | Iterable[str] | None = None) -> tuple[Prepared, Lowered]:
    """Everything ``manifest validate`` checks: load, schema, data binding and lowering to IR."""
    prep = prepare(source, overrides)
    low = prep.lower(training=prep.manifest.trainer is not None)
    try:
        from caramba.ir import verify

        verify(low.graph)
    except CarambaError as exc:  # pragma: no cover - the builder already checked every node
        raise ManifestError(f"the lowered graph does not verify: {exc}") from None
    return prep, low


__all__ = ["Prepared", "check", "load_document", "prepare", "resolve_optimizer"]
