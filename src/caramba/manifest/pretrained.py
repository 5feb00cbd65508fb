"""``topology: {from_safetensors: ...}``: a Hugging Face checkpoint as a manifest model node.

An architecture entry (``caramba/assets/architecture/*.yml``, kind ``architecture``) maps a
Hugging Face class (``config.json``'s ``architectures[0]``) onto a model asset: ``variables``
compute the model node's config from ``config.json`` with a small expression language, and
``tensors`` bind each model parameter to a checkpoint tensor. ``resolve`` turns the manifest
section into the model node (lowered like any node, at the section's line); ``bind`` checks
every parameter of the lowered model against the checkpoint's headers, before any data is read:
a parameter without a tensor, a missing or mis-shaped tensor, or a tensor nobody reads is an
error naming both, never a silent random init.

Expressions (docs/pretrained.md): a literal; ``{config: KEY | [KEY...], default: EXPR, if_null: EXPR}``
(the first present key; dotted keys walk nested objects; a JSON null counts as absent unless
``if_null`` says what it means);
``{product|sum: [...]}``, ``{quotient: [a, b]}`` (exact), ``{not: X}``, ``{equals: [a, b]}``,
``{select: [COND, THEN, ELSE]}``, ``{lookup: [X, {key: value}], default: EXPR}``.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caramba.errors import CarambaError, did_you_mean
from caramba.manifest.errors import Loc, ManifestError
from caramba.manifest.loader import Document
from caramba.manifest.registry import Asset, Registry, registry
from caramba.pretrained.checkpoint import Binding, CheckpointFormatError, HFCheckpoint, check_cast, slice_index

MAX_EXPR_DEPTH = 32
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_MISSING = object()


# ---- the registry's architecture entries ---------------------------------------------------


def architectures(reg: Registry | None = None) -> list[Asset]:
    return (reg or registry()).list("architecture")


def find_architecture(name: str, reg: Registry | None = None) -> Asset:
    """An entry by asset ID (``architecture.llama``), short name (``llama``) or Hugging Face
    class (``LlamaForCausalLM``)."""
    entries = architectures(reg)
    for a in entries:
        if name in (a.op, a.op.split(".", 1)[1]) or name in a.spec["architectures"]:
            return a
    known = [a.op.split(".", 1)[1] for a in entries] + [c for a in entries for c in a.spec["architectures"]]
    raise KeyError(f"unknown architecture '{name}'; {did_you_mean(name, known)}")


# ---- variables: config.json -> the model node's config ---------------------------------------


class _Evaluator:
    def __init__(self, arch: Asset, config: Mapping[str, Any], where: str) -> None:
        self.arch, self.config, self.where = arch, config, where

    def error(self, path: tuple, msg: str) -> ManifestError:
        loc = self.arch.spec["locs"].get(path) or Loc(self.arch.file, 1, 1)
        return ManifestError(f"{self.arch.op}: {msg}", loc=loc.noted((self.where,)))

    def lookup(self, key: str) -> Any:
        """The value at dotted ``key`` (``None`` for a JSON null), ``_MISSING`` when absent."""
        cur: Any = self.config
        for part in key.split("."):
            if not isinstance(cur, Mapping) or part not in cur:
                return _MISSING
            cur = cur[part]
        return cur

    def value(self, expr: Any, path: tuple, depth: int = 0) -> Any:
        if depth > MAX_EXPR_DEPTH:
            raise self.error(path, f"expression nests more than {MAX_EXPR_DEPTH} deep")
        if isinstance(expr, list):
            return [self.value(e, (*path, i), depth + 1) for i, e in enumerate(expr)]
        if not isinstance(expr, dict):
            return expr
        ops = set(expr) - {"default", "if_null"}
        if len(ops) != 1:
            raise self.error(path, f"an expression has one of config, product, sum, quotient, not, equals, select, "
                             f"lookup (and maybe default); got {sorted(expr)}")
        (op,) = ops
        arg = expr[op]

        def sub(i: int | None = None) -> Any:
            return self.value(arg if i is None else arg[i], (*path, op) if i is None else (*path, op, i), depth + 1)

        def args(n: int | None = None) -> list[Any]:
            if not isinstance(arg, list) or (n is not None and len(arg) != n):
                raise self.error((*path, op), f"{op} takes a list of {n if n is not None else 'some'} expressions")
            return [sub(i) for i in range(len(arg))]

        def number(v: Any) -> Any:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise self.error((*path, op), f"{op} needs numbers, got {v!r}")
            return v

        if op == "config":
            keys = arg if isinstance(arg, list) else [arg]
            for key in keys:
                v = self.lookup(str(key))
                if v is None and "if_null" in expr:  # an explicit null that means something (e.g. "no capping")
                    return self.value(expr["if_null"], (*path, "if_null"), depth + 1)
                if v is not _MISSING and v is not None:
                    return v
            if "default" in expr:
                return self.value(expr["default"], (*path, "default"), depth + 1)
            raise self.error((*path, op), f"config.json has no {' or '.join(repr(k) for k in keys)} and the entry gives "
                             "no default")
        if op == "product":
            return math.prod(number(v) for v in args())
        if op == "sum":
            return sum(number(v) for v in args())
        if op == "quotient":
            a, b = (number(v) for v in args(2))
            if not isinstance(a, int) or not isinstance(b, int) or b == 0 or a % b:
                raise self.error((*path, op), f"{a} is not an exact multiple of {b}")
            return a // b
        if op == "not":
            return not sub()
        if op == "equals":
            a, b = args(2)
            return a == b
        if op == "select":
            if not isinstance(arg, list) or len(arg) != 3:
                raise self.error((*path, op), "select takes [condition, then, else]")
            return sub(1) if sub(0) else sub(2)
        if op == "lookup":
            if not isinstance(arg, list) or len(arg) != 2 or not isinstance(arg[1], dict):
                raise self.error((*path, op), "lookup takes [expression, {key: value, ...}]")
            key = sub(0)
            if isinstance(key, (str, int, bool)) and str(key) in arg[1]:
                return arg[1][str(key)]
            if "default" in expr:
                return self.value(expr["default"], (*path, "default"), depth + 1)
            raise self.error((*path, op), f"{key!r} is not supported here; supported: {', '.join(map(str, arg[1]))}")
        raise self.error(path, f"unknown expression '{op}'; {did_you_mean(op, ('config', 'product', 'sum', 'quotient', 'not', 'equals', 'select', 'lookup'))}")


def compute_variables(arch: Asset, config: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    ev = _Evaluator(arch, config, where)
    return {str(k): ev.value(v, ("variables", k)) for k, v in arch.spec["variables"].items()}


# ---- tensor bindings ------------------------------------------------------------------------


def _pattern(key: str) -> re.Pattern[str]:
    out, pos = [], 0
    for m in _PLACEHOLDER.finditer(key):
        out.append(re.escape(key[pos:m.start()]))
        out.append(f"(?P<{m.group(1)}>[0-9]+)")
        pos = m.end()
    out.append(re.escape(key[pos:]))
    return re.compile("".join(out) + r"\Z")


@dataclass(frozen=True)
class _Rule:
    key: str
    pattern: re.Pattern[str]
    template: Binding


def _rules(arch: Asset) -> list[_Rule]:
    rules = []
    for key, v in arch.spec["tensors"].items():
        loc = arch.spec["locs"].get(("tensors", key)) or Loc(arch.file, 1, 1)
        if isinstance(v, str):
            b = Binding(v)
        elif isinstance(v, dict) and isinstance(v.get("tensor"), str) and set(v) <= {"tensor", "transpose", "slice_axis", "slice_start"}:
            b = Binding(v["tensor"], bool(v.get("transpose", False)), v.get("slice_axis"), int(v.get("slice_start", 0)))
        else:
            raise ManifestError(f"{arch.op}: tensor binding '{key}' is a tensor name or {{tensor, transpose, slice_axis, "
                                f"slice_start}}, got {v!r}", loc=loc)
        rules.append(_Rule(str(key), _pattern(str(key)), b))
    return rules


def _fill(template: str, groups: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: groups.get(m.group(1), m.group(0)), template)


# ---- the manifest section -----------------------------------------------------------------


@dataclass
class Resolved:
    """What a ``from_safetensors`` section turns into: the checkpoint (headers read), its
    architecture entry, and the model node with its inputs and outputs."""

    checkpoint: HFCheckpoint
    arch: Asset
    node: Any  # schema.NodeSpec
    inputs: dict[str, Any]  # name -> schema.InputSpec
    outputs: list[str]
    dtype: str
    allow_narrowing: bool
    path: tuple = ("topology", "from_safetensors")
    variables: dict[str, Any] = field(default_factory=dict)

    @property
    def node_id(self) -> str:
        return self.node.id


def _source_path(doc: Document, path: tuple, raw: str, what: str) -> Path:
    from caramba.data.sources import outside_roots

    base = doc.base_dir
    if outside_roots(base, raw):
        raise doc.error(path, f"the {what} is outside the folders this server reads data from")
    p = Path(raw).expanduser()
    return p if p.is_absolute() else base / p


def resolve(section: Any, doc: Document, topology_dtype: str, reg: Registry | None = None) -> Resolved:
    """Read the checkpoint's headers and config, pick the architecture, compute the variables."""
    from caramba.manifest.schema import InputSpec, NodeSpec

    path = ("topology", "from_safetensors")
    src = _source_path(doc, (*path, "source"), section.source, "checkpoint")
    cfg = _source_path(doc, (*path, "config"), section.config, "config") if section.config is not None else None
    try:
        ckpt = HFCheckpoint.open(src, cfg)
    except CheckpointFormatError as exc:
        raise doc.error((*path, "source"), exc.message) from None
    config = ckpt.config or {}
    name = section.architecture
    if name is None:
        classes = config.get("architectures")
        if not isinstance(classes, list) or not classes or not isinstance(classes[0], str):
            where = "config.json" if ckpt.config is not None else "no config.json"
            raise doc.error(path, f"the checkpoint's {where} names no architecture; say which with "
                            f"from_safetensors.architecture ({', '.join(a.op.split('.', 1)[1] for a in architectures(reg))})")
        name = classes[0]
    try:
        arch = find_architecture(name, reg)
    except KeyError as exc:
        p = (*path, "architecture") if section.architecture is not None else path
        raise doc.error(p, exc.args[0] + " (caramba asset list architecture shows what is supported)") from None
    if ckpt.config is None and any(_uses_config(v) for v in arch.spec["variables"].values()):
        raise doc.error(path, f"{src} has no config.json; give its path with from_safetensors.config")
    where = f"for the checkpoint of {doc.loc(path)}"
    variables = compute_variables(arch, config, where)
    variables.update(section.variables)
    try:
        inputs = {str(k): InputSpec.model_validate(v) for k, v in arch.spec["inputs"].items()}
    except Exception as exc:  # an entry's own mistake: point at it
        raise ManifestError(f"{arch.op}: inputs: {exc}", loc=arch.spec["locs"].get(("inputs",))) from None
    model = (reg or registry()).get(arch.spec["model"], ("model", "block"))
    outputs = [str(o) for o in (arch.spec.get("outputs") or [p.name for p in model.outputs])]
    node = NodeSpec.model_validate({"id": section.id, "op": model.op, "in": list(inputs), "config": variables,
                                    "out": outputs if len(outputs) > 1 else []})  # out[j] names output j
    return Resolved(ckpt, arch, node, inputs, outputs, section.dtype or topology_dtype, section.allow_narrowing,
                    variables=variables)


def _uses_config(expr: Any) -> bool:
    if isinstance(expr, dict):
        return "config" in expr or any(_uses_config(v) for v in expr.values())
    if isinstance(expr, list):
        return any(_uses_config(v) for v in expr)
    return False


def _tensor_name(name: str, tensors: Mapping[str, Any], base: str | None) -> str:
    """``name`` as this checkpoint spells it. A model's weights are saved with or without the
    base model's prefix (``transformer.h.0...`` from GPT2LMHeadModel, ``h.0...`` from GPT2Model;
    ``bert.`` in BertForMaskedLM): with ``base_prefix`` the entry's name matches either form."""
    if name in tensors or not base:
        return name
    head = base + "."
    alt = name[len(head):] if name.startswith(head) else head + name
    return alt if alt in tensors else name


def _spellings(name: str, base: str | None) -> str:
    if not base:
        return f"'{name}'"
    head = base + "."
    return f"'{name}' (or '{name[len(head):] if name.startswith(head) else head + name}')"


def _nearest(name: str, tensors: Mapping[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(tensors), n=3, cutoff=0.6)
    if close:
        return "nearest: " + ", ".join(close)
    return f"it has {len(tensors)} tensors, e.g. " + ", ".join(sorted(tensors)[:3])


@dataclass
class Match:
    """Parameters matched to checkpoint tensors: the bindings, what does not fit (message,
    hint), and the checkpoint tensors nothing reads (``ignored``: those the entry ignores)."""

    bindings: dict[str, Binding]
    problems: list[tuple[str, str | None]]
    unused: list[str]
    ignored: list[str]


def match(res: Resolved, params: Mapping[str, Any]) -> Match:
    """Every parameter of the model node -> its checkpoint tensor, checked against the headers
    (shapes, dtypes, slices), collecting what does not fit instead of raising."""
    prefix = res.node_id + "."
    rules = _rules(res.arch)
    ckpt = res.checkpoint
    base = res.arch.spec.get("base_prefix")
    out: dict[str, Binding] = {}
    problems: list[tuple[str, str | None]] = []
    for name, spec in params.items():
        if not name.startswith(prefix):
            continue  # a parameter of another node of the topology (initialized as usual)
        rel = name[len(prefix):]
        rule = next(((r, m) for r in rules if (m := r.pattern.match(rel))), None)
        if rule is None:
            if rel.endswith((".lora_a", ".lora_b")):
                continue  # LoRA adapters start from their own init (model.lora)
            problems.append((f"parameter '{name}' of {res.node.op} has no tensor in {res.arch.op}'s bindings; it "
                             "would be left at a random init", f"add it to tensors: in {res.arch.file}"))
            continue
        r, m = rule
        b = Binding(_tensor_name(_fill(r.template.tensor, m.groupdict()), ckpt.tensors, base),
                    r.template.transpose, r.template.slice_axis, r.template.slice_start)
        info = ckpt.tensors.get(b.tensor)
        if info is None:
            problems.append((f"the checkpoint has no tensor {_spellings(b.tensor, base)} for parameter '{name}'; "
                             f"{_nearest(b.tensor, ckpt.tensors)}", None))
            continue
        label = f"tensor '{b.tensor}' (for parameter '{name}')"
        try:
            slice_index(b, info.shape, b.source_shape(tuple(spec.shape)), label)
            check_cast(info.dtype, spec.dtype, res.allow_narrowing, label)
        except CarambaError as exc:
            problems.append((exc.message, exc.hint))
            continue
        out[name] = b
    used = {b.tensor for b in out.values()}
    patterns = [str(p) for p in res.arch.spec.get("ignore") or []]
    rest = sorted(t for t in ckpt.tensors if t not in used)
    head = f"{base}." if base else None
    ignored = [t for t in rest if any(fnmatch.fnmatchcase(t, p) or (head is not None and t.startswith(head)
                                                                     and fnmatch.fnmatchcase(t[len(head):], p))
                                      for p in patterns)]
    unused = [t for t in rest if t not in set(ignored)]
    return Match(out, problems, unused, ignored)


def bind(res: Resolved, params: Mapping[str, Any], doc: Document) -> dict[str, Binding]:
    """``match``, where anything that does not fit is an error at the from_safetensors line:
    never a parameter left at a random init, never a tensor silently dropped."""
    m = match(res, params)
    if m.problems:
        msg, hint = m.problems[0]
        n = len(m.problems) - 1
        more = f" ({n} more such problem{'s' if n > 1 else ''}: caramba model inspect lists them)" if n else ""
        raise doc.error(res.path, msg + more, hint=hint)
    if m.unused:
        raise doc.error(res.path, f"the checkpoint's tensor '{m.unused[0]}' is read by no parameter of {res.node.op} "
                        f"({len(m.unused)} such); the checkpoint does not fit the model {res.arch.op} builds",
                        hint="check the config (layers, sizes, tied embeddings) or the architecture")
    return m.bindings


def param_specs(prep: Any) -> dict[str, Any]:
    """The parameters of a prepared manifest's model (they do not depend on input sizes, so
    symbolic dims nobody bound are taken as 1)."""
    dims = dict(prep.dims)
    for spec in prep.manifest.topology.inputs.values():
        for d in spec.shape:
            if isinstance(d, str):
                dims.setdefault(d, 1)
    dims.setdefault("batch", 1)
    from caramba.manifest.lower import lower_topology

    return lower_topology(prep.manifest.topology, prep.doc, dims=dims, name=prep.manifest.name,
                          model_spec=prep.manifest.model).params


__all__ = ["Match", "Resolved", "match", "param_specs", "architectures", "bind", "compute_variables", "find_architecture", "resolve"]
