"""The asset registry: operation, optimizer, block, model and manifest schemas from packaged YAML.

Every asset file under ``caramba/assets/<kind>/`` declares ``kind``, ``op`` (its ID), a
description, typed ports (``inputs``/``outputs``) and typed ``config`` fields with defaults.
Operations say how they lower (``ir: <op id>`` for a direct IR op, ``lowering: <name>`` for a
layer in ``caramba.manifest.layers``); blocks and models carry a ``topology`` that is expanded
with ``${config.<field>}`` bound to the node's resolved config; manifest templates carry a
whole manifest. Files under ``assets/fragment/`` are include targets, not assets.

The asset search path adds a user's own assets (of every kind) to the packaged ones: the folders
of the ``assets:`` setting (caramba.yml), of ``CARAMBA_ASSET_PATH`` (os.pathsep-separated) and the
``assets/`` folder beside the manifest being compiled. A user folder has the packaged layout
(``<kind>/<name>.yml``; include targets under ``fragment/``). IDs are unique across the whole
path: a user asset with the ID of a packaged one, or of one in another folder, is an error that
names both files. Asset files are untrusted: one is read only if its real path lies inside its
folder and it is at most MAX_ASSET_BYTES of UTF-8 YAML, of a known kind, in the matching folder.

Config values are checked strictly: ``true`` is not a number, floats are finite, ints lie within
+-MAX_CONFIG_INT, and a field may declare the interval it accepts (``range: "[0, 1)"``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from caramba.errors import did_you_mean
from caramba.ir.attrs import REQUIRED
from caramba.manifest.errors import Loc, ManifestError, format_path, short
from caramba.manifest.loader import MAX_EXPANSIONS, Y, _plain, parse_yaml

KINDS = ("operation", "optimizer", "block", "model", "manifest", "architecture", "runtime")
CONFIG_TYPES = ("int", "float", "bool", "str", "ints", "floats", "dtype", "any", "mapping", "int?", "float?", "str?", "ints?")
MAX_CONFIG_INT = 2**31 - 1  # sizes, axes and counts in op configs
MAX_CONFIG_LIST = 64  # items of an ints/floats config value
MAX_ASSET_BYTES = 1 << 20  # one user asset file
MAX_ASSET_FILES = 2000  # files and folders in one folder of the search path
MAX_ASSET_DEPTH = 16  # nested folders in one folder of the search path
ASSET_PATH_ENV = "CARAMBA_ASSET_PATH"
BUILTIN = "builtin"
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
    source: str = BUILTIN  # where it comes from: builtin, or the search-path folder that holds it
    root: Path | None = field(default=None, repr=False, compare=False)  # that folder (for its includes)

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
            "location": self.source,  # builtin, or the folder of the asset search path
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
        self.assets = assets if isinstance(assets, LazyAssets) else dict(assets)
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
def builtin_registry() -> Registry:
    """The packaged assets only (loaded once per process)."""
    return load_registry(asset_root())


# the assets/ folder of the manifest being compiled (schema.validate sets it for each manifest)
_MANIFEST_ASSETS: ContextVar[tuple[str, ...]] = ContextVar("caramba_manifest_assets", default=())
_USER_CACHE: dict[tuple, dict[str, Asset]] = {}  # a search-path folder's assets, by its fingerprint
_COMBINED: dict[tuple, Registry] = {}
_CACHE_SIZE = 64


def registry() -> Registry:
    """The registry in force: the packaged assets plus those on the search path (the ``assets``
    setting, ``CARAMBA_ASSET_PATH`` and the current manifest's ``assets/`` folder)."""
    dirs = search_path()
    return registry_for(dirs) if dirs else builtin_registry()


def set_manifest_assets(folders: "tuple[str, ...] | list[str]") -> None:
    """Make ``folders`` (a manifest's ``assets/``) the manifest part of the search path in this
    context (until the next manifest is validated)."""
    _MANIFEST_ASSETS.set(tuple(str(f) for f in folders))


@contextmanager
def manifest_assets(folders: "tuple[str, ...] | list[str]") -> Iterator[None]:
    """Within the block, ``folders`` are the manifest part of the search path."""
    token = _MANIFEST_ASSETS.set(tuple(str(f) for f in folders))
    try:
        yield
    finally:
        _MANIFEST_ASSETS.reset(token)


def search_path() -> list[tuple[Path, str]]:
    """The user asset folders in force, each with where it was named: the ``assets`` setting
    (caramba.yml), ``CARAMBA_ASSET_PATH``, then the current manifest's ``assets/`` folder."""
    from caramba.config import settings

    out: list[tuple[Path, str]] = []
    s = settings()
    for d in split_path(s.assets):
        out.append((Path(d).expanduser(), f"the assets setting ({s.sources.get('assets', 'config')})"))
    for d in split_path(os.environ.get(ASSET_PATH_ENV, "")):
        out.append((Path(d).expanduser(), ASSET_PATH_ENV))
    for d in _MANIFEST_ASSETS.get():
        out.append((Path(d), "the manifest's assets/ folder"))
    seen: set[str] = set()
    unique = []
    for d, why in out:
        key = os.path.realpath(d)
        if key not in seen:
            seen.add(key)
            unique.append((d, why))
    return unique


def split_path(value: str) -> list[str]:
    """``a:b`` (os.pathsep-separated) as a list of folders."""
    return [p.strip() for p in (value or "").split(os.pathsep) if p.strip()]


def registry_for(dirs: "list[tuple[Path, str]] | list[Path]") -> Registry:
    """The packaged assets plus those in ``dirs`` (paths, or (path, where it was named) pairs),
    checked for clashes; cached per folder contents, so an edited asset is read again."""
    base = builtin_registry()
    loaded: list[tuple[tuple, dict[str, Asset]]] = []
    for d in dirs:
        folder, why = (Path(d[0]), d[1]) if isinstance(d, tuple) else (Path(d), "the asset path")
        if not folder.is_dir():
            raise ManifestError(f"asset folder {folder} (from {why}) does not exist or is not a folder",
                                hint=f"create it, or remove it from {why}")
        files = _scan(folder)
        key = (os.path.realpath(folder), str(folder), tuple(files))
        assets = _USER_CACHE.get(key)
        if assets is None:
            assets = _load_user_folder(folder, [f for f, _, _ in files])
            if len(_USER_CACHE) >= _CACHE_SIZE:
                _USER_CACHE.clear()
            _USER_CACHE[key] = assets
        loaded.append((key, assets))
    ckey = tuple(k for k, _ in loaded)
    reg = _COMBINED.get(ckey)
    if reg is not None:
        return reg
    combined = base.assets.extended() if isinstance(base.assets, LazyAssets) else dict(base.assets)
    for _, assets in loaded:
        for op, a in assets.items():
            other = combined.get(op)
            if other is not None:
                what = "the builtin asset" if other.source == BUILTIN else "the asset"
                raise ManifestError(
                    f"asset '{op}' in {a.file} has the same ID as {what} in {other.file}", loc=_line_of(a, "op:"),
                    hint="asset IDs are unique across the search path: rename one of them (e.g. my.<name>); a "
                    "user asset cannot replace a builtin one")
            combined[op] = a
    reg = Registry(combined, base.root)
    if len(_COMBINED) >= _CACHE_SIZE:
        _COMBINED.clear()
    _COMBINED[ckey] = reg
    return reg


def _line_of(a: Asset, prefix: str) -> Loc:
    """Where an asset file writes a top-level key (the line an error about it points at)."""
    for i, line in enumerate(a.text.splitlines(), 1):
        if line.startswith(prefix):
            return Loc(a.file, i, 1)
    return Loc(a.file, 1, 1)


def _scan(folder: Path) -> list[tuple[str, int, int]]:
    """The YAML files of a search-path folder as (path, mtime, size). Every entry's real path
    must lie inside the folder (a symlink may not lead out, or back up into a loop); bounded
    in count and depth."""
    root = os.path.realpath(folder)
    out: list[tuple[str, int, int]] = []
    seen_dirs = {root}
    stack: list[tuple[str, int]] = [(str(folder), 0)]
    count = 0
    while stack:
        here, depth = stack.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise ManifestError(f"cannot read asset folder {here}: {exc.strerror or exc}") from None
        for e in entries:
            count += 1
            if count > MAX_ASSET_FILES:
                raise ManifestError(f"asset folder {folder} holds more than {MAX_ASSET_FILES} files and folders "
                                    "(limit)", hint="point the asset path at a folder of assets only")
            if e.name.startswith("."):
                continue
            full = os.path.join(here, e.name)
            try:
                real = os.path.realpath(full, strict=True)
            except (OSError, RuntimeError):
                raise ManifestError(f"asset path {full} is a broken symlink or a symlink loop",
                                    loc=Loc(full, 1, 1)) from None
            if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
                raise ManifestError(f"asset path {full} leads outside its asset folder {folder}",
                                    loc=Loc(full, 1, 1), hint="copy the file into the folder instead of linking it")
            if os.path.isdir(real):
                if real in seen_dirs:
                    raise ManifestError(f"asset folder {full} is a symlink loop (it leads back into the folder)",
                                        loc=Loc(full, 1, 1))
                if depth + 1 > MAX_ASSET_DEPTH:
                    raise ManifestError(f"asset folder {folder} nests more than {MAX_ASSET_DEPTH} folders deep",
                                        loc=Loc(full, 1, 1))
                seen_dirs.add(real)
                stack.append((full, depth + 1))
            elif e.name.endswith((".yml", ".yaml")):
                if not os.path.isfile(real):  # a FIFO or device would block or never end
                    raise ManifestError(f"asset path {full} is not a regular file", loc=Loc(full, 1, 1))
                st = os.stat(real)
                out.append((full, st.st_mtime_ns, st.st_size))
    return sorted(out)


def _load_user_folder(folder: Path, files: list[str]) -> dict[str, Asset]:
    assets: dict[str, Asset] = {}
    for f in files:
        path = Path(f)
        rel = path.relative_to(folder)
        display = _user_display(path)
        if rel.parts[0] == "fragment":
            continue  # include targets of this folder's assets
        if len(rel.parts) < 2 or rel.parts[0] not in KINDS:
            where = f"{rel.parts[0]}/" if len(rel.parts) > 1 else "the top of its asset folder"
            raise ManifestError(
                f"asset file {display} is in {where}; an asset folder holds <kind>/<name>.yml, with kind one of "
                f"{', '.join(KINDS)}" + (f" ({did_you_mean(rel.parts[0], KINDS)})" if len(rel.parts) > 1 else ""),
                loc=Loc(display, 1, 1))
        size = path.stat().st_size
        if size > MAX_ASSET_BYTES:
            raise ManifestError(f"asset file {display} is {size:,} bytes; the limit is {MAX_ASSET_BYTES:,}",
                                loc=Loc(display, 1, 1))
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError(f"asset file {display} is not UTF-8 text (byte {exc.start})",
                                loc=Loc(display, 1, 1)) from None
        except OSError as exc:
            raise ManifestError(f"cannot read asset file {display}: {exc.strerror or exc}",
                                loc=Loc(display, 1, 1)) from None
        a = replace(load_asset(path, display, text=text), source=str(folder), root=folder)
        if a.kind != rel.parts[0]:
            raise ManifestError(f"asset '{a.op}' of kind {a.kind} lives under {rel.parts[0]}/; move it to "
                                f"{a.kind}/ (or fix its kind)", loc=_line_of(a, "kind:"))
        if a.op in assets:
            raise ManifestError(f"asset '{a.op}' in {a.file} has the same ID as the asset in {assets[a.op].file}",
                                loc=_line_of(a, "op:"), hint="asset IDs are unique across the search path: rename "
                                "one of them")
        assets[a.op] = a
    return assets


def _user_display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class LazyAssets(Mapping[str, Asset]):
    """Packaged assets by ID, each parsed when first asked for.

    A run uses a handful of the ~170 packaged assets, and parsing one into located nodes costs
    ~3 ms (the whole set was ~0.5 s of every process's start). The IDs come from each file's
    top-level ``op:`` line; a file whose line does not say it plainly is parsed at once. A parsed
    asset must have the ID and the kind (its folder) it was indexed under, so the index cannot
    say something the file does not."""

    def __init__(self, entries: dict[str, "Asset | tuple[Path, str, str]"], parent: "LazyAssets | None" = None) -> None:
        self._entries = entries  # op -> Asset, or (path, display, kind) not parsed yet
        self._parent = parent  # a registry extended from this one parses through it (one cache)

    def __getitem__(self, op: str) -> Asset:
        e = self._entries[op]
        if isinstance(e, Asset):
            return e
        if self._parent is not None and op in self._parent:
            a = self._parent[op]
        else:
            path, display, kind = e
            a = _checked(load_asset(path, display), kind, op)
        self._entries[op] = a
        return a

    def __setitem__(self, op: str, asset: Asset) -> None:
        self._entries[op] = asset

    def __delitem__(self, op: str) -> None:
        del self._entries[op]

    def __contains__(self, op: object) -> bool:
        return op in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def extended(self) -> "LazyAssets":
        """A copy to add assets to; what it parses of these is parsed (and kept) here too."""
        return LazyAssets(dict(self._entries), self)


_OP_LINE = re.compile(r"^op:[ \t]*([A-Za-z0-9_.\-]+)[ \t]*(?:#.*)?$", re.M)


def _checked(a: Asset, kind: str, op: str | None = None) -> Asset:
    if op is not None and a.op != op:
        raise ManifestError(f"asset file {a.file} was indexed as '{op}' but its op is '{a.op}'", loc=Loc(a.file, 1, 1),
                            hint="write the ID on one top-level line: op: family.name")
    if a.kind != kind:
        raise ManifestError(f"asset '{a.op}' of kind {a.kind} lives under {kind}/", loc=Loc(a.file, 1, 1))
    return a


def load_registry(root: Path, extra: Mapping[str, Asset] | None = None) -> Registry:
    """The assets under ``root`` (``<kind>/<name>.yml``), parsed as they are used (LazyAssets)."""
    entries: dict[str, Asset | tuple[Path, str, str]] = {}
    files: dict[str, str] = {}
    for path in sorted(root.rglob("*.y*ml")):
        rel = path.relative_to(root)
        if rel.parts[0] == "fragment" or path.suffix not in (".yml", ".yaml"):
            continue
        display = asset_display(path, root)
        text = path.read_text(encoding="utf-8")
        ids = _OP_LINE.findall(text)
        if len(ids) == 1:
            op, entry = ids[0], (path, display, rel.parts[0])
        else:  # not plainly on one line: parse it now
            a = _checked(load_asset(path, display, text=text), rel.parts[0])
            op, entry = a.op, a
        if op in files:
            raise ManifestError(f"asset '{op}' defined twice ({files[op]} and {display})", loc=Loc(display, 1, 1))
        files[op] = display
        entries[op] = entry
    entries.update(extra or {})
    return Registry(LazyAssets(entries), root)


def asset_display(path: Path, root: Path) -> str:
    """How an asset file is named in messages: ``caramba/assets/<kind>/<file>``."""
    try:
        return str(Path("caramba/assets") / path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def load_asset(path: Path, display: str, *, text: str | None = None) -> Asset:
    text = path.read_text(encoding="utf-8") if text is None else text
    tree = parse_yaml(text, display)
    _check_size(tree)
    if tree.kind != "map":
        raise ManifestError("an asset file is a mapping", loc=tree.loc)
    meta: dict[str, Any] = {}
    locs: dict[tuple, Loc] = {}
    kind_node = tree.get("kind")
    if kind_node is not None and kind_node.value == "architecture":
        return _load_architecture(tree, display, text)
    if kind_node is not None and kind_node.value == "runtime":
        return _load_runtime(tree, display, text)
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


def _load_runtime(tree: Y, display: str, text: str) -> Asset:
    """A runtime program (caramba.programs): its ID and description here; the whole file is a
    program document, validated by ``caramba.programs`` when it is loaded to run."""
    op, desc = tree.get("op"), tree.get("description")
    if op is None or not isinstance(op.value, str) or not op.value.startswith("runtime."):
        raise ManifestError(f"a runtime program's op is runtime.<name>, got {op.value if op else None!r}",
                            loc=op.loc if op else tree.loc)
    if desc is None or not isinstance(desc.value, str) or not desc.value.strip():
        raise ManifestError(f"asset {op.value} needs a description", loc=tree.loc)
    return Asset(kind="runtime", op=op.value, description=desc.value.strip(), file=display, category="runtime",
                 outputs=(), text=text)


def _check_size(tree: Y) -> None:
    """An asset file, with its YAML aliases written out, has at most MAX_EXPANSIONS nodes (an
    alias bomb of a few lines would otherwise take for ever to read); counted without recursion."""
    stack, count = [tree], 0
    while stack:
        y = stack.pop()
        count += 1
        if count > MAX_EXPANSIONS:
            raise ManifestError(f"the asset file expands to more than {MAX_EXPANSIONS} values (YAML aliases "
                                "repeating values); write it out plainly", loc=y.loc)
        if y.kind == "seq":
            stack.extend(y.value)
        elif y.kind == "map":
            stack.extend(v for _, v in y.value)


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


__all__ = ["ASSET_PATH_ENV", "BUILTIN", "KINDS", "MAX_ASSET_BYTES", "MAX_CONFIG_INT", "Asset", "ConfigField", "Interval", "Port", "Registry", "asset_display", "asset_root", "LazyAssets", "template_text", "coerce", "builtin_registry", "load_registry", "manifest_assets", "registry", "registry_for", "search_path",
           "set_manifest_assets"]
