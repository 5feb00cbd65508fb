"""The asset registry: operation, optimizer, block, model and manifest schemas from packaged YAML.

Every asset file under ``caramba/assets/<kind>/`` declares ``kind``, ``op`` (its ID), a
description, typed ports (``inputs``/``outputs``) and typed ``config`` fields with defaults.
Operations say how they lower (``ir: <op id>`` for a direct IR op, ``lowering: <name>`` for a
layer in ``caramba.manifest.layers``); blocks and models carry a ``topology`` that is expanded
with ``${config.<field>}`` bound to the node's resolved config; manifest templates carry a
whole manifest. Files under ``assets/fragment/`` are include targets, not assets.

Config values are checked strictly: ``true`` is not a number, floats are finite, ints lie within
+-MAX_CONFIG_INT, and a field may declare the interval it accepts (``range: "[0, 1)"``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from caramba.errors import did_you_mean
from caramba.ir.attrs import REQUIRED
from caramba.manifest.errors import Loc, ManifestError, format_path, short
from caramba.manifest.loader import Y, _plain, parse_yaml

KINDS = ("operation", "optimizer", "block", "model", "manifest", "architecture")
CONFIG_TYPES = ("int", "float", "bool", "str", "ints", "floats", "dtype", "any", "mapping", "int?", "float?", "str?", "ints?")
MAX_CONFIG_INT = 2**31 - 1  # sizes, axes and counts in op configs
MAX_CONFIG_LIST = 64  # items of an ints/floats config value
_RANGE = re.compile(r"\s*([\[(])\s*([^,\s]+)\s*,\s*([^,\s]+)\s*([\])])\s*\Z")
_META_KEYS = {
    "kind", "op", "label", "category", "description", "inputs", "outputs", "config", "ir", "lowering",
    "params", "topology", "manifest", "example", "ir_attrs",
}
# an architecture entry maps a Hugging Face checkpoint onto a model asset (caramba.manifest.pretrained)
_ARCH_KEYS = {"kind", "op", "label", "category", "description", "architectures", "model", "inputs", "outputs",
              "variables", "tensors", "ignore", "base_prefix"}


@dataclass(frozen=True)
class Port:
    name: str
    type: str = "tensor"
    description: str = ""
    optional: bool = False


@dataclass(frozen=True)
class ConfigField:
    name: str
    type: str
    default: Any = REQUIRED
    description: str = ""
    choices: tuple[Any, ...] | None = None
    range: "Interval | None" = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Interval:
    """The values a number field accepts, written like ``[0, 1)`` (``inf`` for no bound)."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    @classmethod
    def parse(cls, text: Any) -> "Interval":
        m = _RANGE.match(str(text))
        try:
            lo, hi = float(m.group(2)), float(m.group(3))  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            raise ValueError(f"range must be an interval like \"[0, 1)\" or \"(0, inf)\", got {text!r}") from None
        return cls(lo, hi, m.group(1) == "(", m.group(4) == ")")  # type: ignore[union-attr]

    def __contains__(self, v: float) -> bool:
        return (self.lo < v if self.lo_open else self.lo <= v) and (v < self.hi if self.hi_open else v <= self.hi)

    def __str__(self) -> str:
        return f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"


@dataclass(frozen=True)
class Asset:
    """One registry entry. ``topology``/``manifest`` hold the unexpanded YAML tree."""

    kind: str
    op: str
    description: str
    file: str
    label: str = ""
    category: str = ""
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = (Port("out"),)
    config: tuple[ConfigField, ...] = ()
    ir: str | None = None
    ir_attrs: dict[str, Any] = field(default_factory=dict, compare=False)
    lowering: str | None = None
    params: tuple[str, ...] = ()
    topology: Y | None = field(default=None, repr=False, compare=False)
    manifest: Y | None = field(default=None, repr=False, compare=False)
    example: Any = field(default=None, repr=False, compare=False)
    text: str = field(default="", repr=False, compare=False)
    spec: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # an architecture's mapping

    @property
    def config_index(self) -> dict[str, ConfigField]:
        return {c.name: c for c in self.config}

    def arity(self) -> tuple[int, int]:
        return sum(1 for p in self.inputs if not p.optional), len(self.inputs)

    def resolve_config(self, given: Mapping[str, Any], error: Any) -> dict[str, Any]:
        """Check ``given`` against the config schema; fill defaults. ``error(key, msg)`` raises."""
        index = self.config_index
        for key in given:
            if key not in index:
                error(key, f"unknown config key '{key}' for {self.op}; "
                      + (did_you_mean(key, index) if index else "it takes no config"))
        out: dict[str, Any] = {}
        for f in self.config:
            if f.name in given:
                out[f.name] = coerce(f, given[f.name], lambda msg, f=f: error(f.name, msg))
            elif f.required:
                error(None, f"missing required config '{f.name}' ({f.type}) for {self.op}"
                      + (f": {f.description}" if f.description else ""))
            else:
                out[f.name] = f.default
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "op": self.op,
            "label": self.label or self.op,
            "category": self.category,
            "description": self.description,
            "inputs": [p.__dict__ for p in self.inputs],
            "outputs": [p.__dict__ for p in self.outputs],
            "config": [
                {"name": c.name, "type": c.type, "default": None if c.required else c.default,
                 "required": c.required, "description": c.description,
                 **({"choices": list(c.choices)} if c.choices else {}),
                 **({"range": str(c.range)} if c.range else {})}
                for c in self.config
            ],
            "file": self.file,
        }


def coerce(f: ConfigField, value: Any, fail: Any) -> Any:
    """Check/convert one config value to the field's type (ints widen to floats)."""
    kind = f.type
    if value is None and (kind.endswith("?") or kind == "any"):
        return None
    base = kind.rstrip("?")
    ok = True
    if base == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = _float(value, f, fail) if ok else value
    elif base == "bool":
        ok = isinstance(value, bool)
    elif base in ("str", "dtype"):
        ok = isinstance(value, str)
        if ok and base == "dtype":
            from caramba.ir.dtypes import DType

            ok = value in {d.value for d in DType}
    elif base == "ints":
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        ok = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    elif base == "floats":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]
        ok = isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        value = [_float(v, f, fail) for v in value] if ok else value
    elif base == "mapping":
        ok = isinstance(value, dict)
    if not ok:
        fail(f"config '{f.name}' must be {_type_words(kind)}, got {short(value)}")
    if base in ("int", "float", "ints", "floats"):
        for v in value if isinstance(value, list) else [value]:
            _check_number(f, v, fail)
        if isinstance(value, list) and len(value) > MAX_CONFIG_LIST:
            fail(f"config '{f.name}' has {len(value)} items; at most {MAX_CONFIG_LIST}")
    if f.choices is not None and value not in f.choices:
        fail(f"config '{f.name}' must be one of {', '.join(map(repr, f.choices))}, got {short(value)}")
    return value


def _float(v: float, f: ConfigField, fail: Any) -> float:
    try:
        return float(v)
    except OverflowError:
        fail(f"config '{f.name}' is {short(v)}, too large for a float")
        raise  # pragma: no cover - fail raises


def _check_number(f: ConfigField, v: float, fail: Any) -> None:
    if isinstance(v, int) and not -MAX_CONFIG_INT <= v <= MAX_CONFIG_INT:
        fail(f"config '{f.name}' is {short(v)}, outside [-{MAX_CONFIG_INT}, {MAX_CONFIG_INT}]")
    if isinstance(v, float) and not math.isfinite(v):
        fail(f"config '{f.name}' must be a finite number, got {v}")
    if f.range is not None and v not in f.range:
        fail(f"config '{f.name}' must be in {f.range}, got {short(v)}")


def _type_words(kind: str) -> str:
    words = {
        "int": "an int", "float": "a number", "bool": "true or false", "str": "a string",
        "dtype": "a dtype name (float64, float32, int64, ...)", "ints": "a list of ints",
        "floats": "a list of numbers", "mapping": "a mapping", "any": "any value",
    }
    w = words[kind.rstrip("?")]
    return w + " or null" if kind.endswith("?") else w


class Registry:
    """All assets by ID. ``get(op)`` raises a ManifestError-ready message for unknown IDs."""

    def __init__(self, assets: Mapping[str, Asset], root: Path | None = None) -> None:
        self.assets = dict(assets)
        self.root = root

    def __contains__(self, op: str) -> bool:
        return op in self.assets

    def __iter__(self):
        return iter(sorted(self.assets))

    def __len__(self) -> int:
        return len(self.assets)

    def get(self, op: str, kinds: tuple[str, ...] | None = None) -> Asset:
        a = self.assets.get(op)
        if a is None or (kinds is not None and a.kind not in kinds):
            valid = [k for k, v in self.assets.items() if kinds is None or v.kind in kinds]
            what = "op" if kinds == ("operation", "block", "model") else "/".join(kinds) if kinds else "asset"
            raise KeyError(f"unknown {what} '{op}'; {did_you_mean(op, valid)}")
        return a

    def list(self, kind: str | None = None) -> list[Asset]:
        if kind is not None and kind not in KINDS:
            raise ManifestError(f"unknown asset kind '{kind}'; {did_you_mean(kind, KINDS)}")
        return [self.assets[k] for k in sorted(self.assets) if kind is None or self.assets[k].kind == kind]


def template_text(asset: Asset) -> str:
    """The body of a manifest template as written (comments and placeholders kept)."""
    lines = asset.text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip() == "manifest:")
    except StopIteration:
        return ""
    body = []
    for line in lines[start + 1 :]:
        if line and not line.startswith((" ", "#")):
            break
        body.append(line[2:] if line.startswith("  ") else line.lstrip("#") and line)
    return "\n".join(body).strip("\n") + "\n"


def asset_root() -> Path:
    return Path(str(resources.files("caramba") / "assets"))


@cache
def registry() -> Registry:
    """The packaged registry (loaded once per process)."""
    return load_registry(asset_root())


def load_registry(root: Path, extra: Mapping[str, Asset] | None = None) -> Registry:
    assets: dict[str, Asset] = {}
    for path in sorted(root.rglob("*.y*ml")):
        rel = path.relative_to(root)
        if rel.parts[0] == "fragment" or path.suffix not in (".yml", ".yaml"):
            continue
        a = load_asset(path, asset_display(path, root))
        if a.op in assets:
            raise ManifestError(f"asset '{a.op}' defined twice ({assets[a.op].file} and {a.file})", loc=Loc(a.file, 1, 1))
        if a.kind != rel.parts[0]:
            raise ManifestError(f"asset '{a.op}' of kind {a.kind} lives under {rel.parts[0]}/", loc=Loc(a.file, 1, 1))
        assets[a.op] = a
    assets.update(extra or {})
    return Registry(assets, root)


def asset_display(path: Path, root: Path) -> str:
    """How an asset file is named in messages: ``caramba/assets/<kind>/<file>``."""
    try:
        return str(Path("caramba/assets") / path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def load_asset(path: Path, display: str) -> Asset:
    text = path.read_text(encoding="utf-8")
    tree = parse_yaml(text, display)
    if tree.kind != "map":
        raise ManifestError("an asset file is a mapping", loc=tree.loc)
    meta: dict[str, Any] = {}
    locs: dict[tuple, Loc] = {}
    kind_node = tree.get("kind")
    if kind_node is not None and kind_node.value == "architecture":
        return _load_architecture(tree, display, text)
    for k, v in tree.value:
        if k.value not in _META_KEYS:
            raise ManifestError(f"unknown asset key '{k.value}'; {did_you_mean(k.value, _META_KEYS)}", loc=k.loc)
        if k.value not in ("topology", "manifest"):
            meta[k.value] = _plain(v, (k.value,), locs, {})

    def bad(p: tuple, msg: str) -> ManifestError:
        return ManifestError(msg, loc=locs.get(p, tree.loc), path=format_path(p))

    kind = meta.get("kind")
    if kind not in KINDS:
        raise bad(("kind",), f"asset kind must be one of {', '.join(KINDS)}, got {kind!r}")
    op = meta.get("op")
    if not isinstance(op, str) or "." not in op:
        raise bad(("op",), f"asset op must be an ID like family.name, got {op!r}")
    if not isinstance(meta.get("description"), str) or not meta["description"].strip():
        raise bad(("description",), f"asset {op} needs a description")
    ports = {}
    for side in ("inputs", "outputs"):
        items = meta.get(side, [] if side == "inputs" else [{"name": "out"}])
        if not isinstance(items, list):
            raise bad((side,), f"{side} must be a list of ports")
        out = []
        for i, p in enumerate(items):
            if isinstance(p, str):
                p = {"name": p}
            if not isinstance(p, dict) or set(p) - {"name", "type", "description", "optional"} or "name" not in p:
                raise bad((side, i), "a port is {name, type, description, optional}")
            out.append(Port(str(p["name"]), str(p.get("type", "tensor")), str(p.get("description", "")), bool(p.get("optional", False))))
        ports[side] = tuple(out)
    config = []
    for i, c in enumerate(meta.get("config", []) or []):
        if not isinstance(c, dict) or set(c) - {"name", "type", "default", "description", "choices", "range"} or "name" not in c:
            raise bad(("config", i), "a config field is {name, type, default, description, choices, range}")
        if c.get("type") not in CONFIG_TYPES:
            raise bad(("config", i, "type"), f"config type must be one of {', '.join(CONFIG_TYPES)}, got {c.get('type')!r}")
        choices = tuple(c["choices"]) if c.get("choices") is not None else None
        try:
            interval = Interval.parse(c["range"]) if c.get("range") is not None else None
        except ValueError as exc:
            raise bad(("config", i, "range"), str(exc)) from None
        config.append(ConfigField(c["name"], c["type"], c.get("default", REQUIRED), str(c.get("description", "")),
                                  choices, interval))
    topo = tree.get("topology")
    manifest = tree.get("manifest")
    if kind in ("block", "model") and topo is None:
        raise bad(("kind",), f"{kind} asset {op} needs a topology")
    if kind == "operation" and not (meta.get("ir") or meta.get("lowering")):
        raise bad(("kind",), f"operation {op} needs `ir:` (an IR op ID) or `lowering:` (a layer name)")
    if kind == "optimizer" and not meta.get("ir"):
        raise bad(("kind",), f"optimizer {op} needs `ir:` (its train.optimizer.* update op)")
    if kind == "manifest" and manifest is None:
        raise bad(("kind",), f"manifest template {op} needs a `manifest:` body")
    return Asset(
        kind=kind, op=op, description=meta["description"].strip(), file=display,
        label=str(meta.get("label", "")), category=str(meta.get("category", "")),
        inputs=ports["inputs"], outputs=ports["outputs"], config=tuple(config),
        ir=meta.get("ir"), ir_attrs=dict(meta.get("ir_attrs") or {}), lowering=meta.get("lowering"), params=tuple(meta.get("params", []) or ()),
        topology=topo, manifest=manifest, example=meta.get("example"), text=text,
    )


def _load_architecture(tree: Y, display: str, text: str) -> Asset:
    """An architecture entry: checked for shape here, for meaning when a checkpoint uses it."""
    locs: dict[tuple, Loc] = {}
    spec: dict[str, Any] = {}
    for k, v in tree.value:
        if k.value not in _ARCH_KEYS:
            raise ManifestError(f"unknown architecture key '{k.value}'; {did_you_mean(k.value, _ARCH_KEYS)}", loc=k.loc)
        spec[k.value] = _plain(v, (k.value,), locs, {})

    def bad(p: tuple, msg: str) -> ManifestError:
        return ManifestError(msg, loc=locs.get(p, tree.loc), path=format_path(p))

    op = spec.get("op")
    if not isinstance(op, str) or not op.startswith("architecture."):
        raise bad(("op",), f"an architecture's op is architecture.<name>, got {op!r}")
    if not isinstance(spec.get("description"), str) or not spec["description"].strip():
        raise bad(("description",), f"asset {op} needs a description")
    classes = spec.get("architectures")
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise bad(("architectures",), "architectures is a list of Hugging Face class names")
    if not isinstance(spec.get("model"), str):
        raise bad(("model",), "model names the model asset a checkpoint maps onto")
    inputs = spec.get("inputs")
    if not isinstance(inputs, dict) or not inputs:
        raise bad(("inputs",), "inputs maps each input of the model to {shape, dtype}")
    for key in ("variables", "tensors"):
        if not isinstance(spec.get(key), dict):
            raise bad((key,), f"{key} is a mapping")
    if not isinstance(spec.get("ignore", []), list):
        raise bad(("ignore",), "ignore is a list of checkpoint tensor patterns")
    spec["locs"] = locs
    return Asset(kind="architecture", op=op, description=spec["description"].strip(), file=display,
                 label=str(spec.get("label", "")), category=str(spec.get("category", "architecture")),
                 inputs=tuple(Port(str(n)) for n in inputs), outputs=tuple(Port(str(n)) for n in spec.get("outputs") or ()),
                 text=text, spec=spec)


__all__ = ["KINDS", "MAX_CONFIG_INT", "Asset", "ConfigField", "Interval", "Port", "Registry", "asset_display", "asset_root", "template_text", "coerce", "load_registry", "registry"]
