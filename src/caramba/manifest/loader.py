"""Manifest loader: YAML with locations, variables, includes and repeat unrolling.

A manifest is read into a tree of located nodes (every mapping, list and scalar knows its
file, line and column), expanded, and then turned into plain Python data plus a table from
dotted path to location, so every later error (schema, unknown op, shape mismatch) can point
at the line that caused it.

Expansion rules:

- ``variables:`` at the top level binds names; ``${a.b}`` looks up a dotted path (a number
  segment indexes a list). A scalar that is exactly one placeholder keeps the value's type
  (int, float, list, mapping...); placeholders inside a longer string are formatted into it.
  ``${a * 4}`` and friends allow ``+ - * / // %`` on numbers. ``$${`` writes a literal ``${``.
- ``!include dot.path`` is replaced by the expanded file ``<root>/dot/path.yml``;
  ``{include: dot.path, variables: {...}}`` also binds ``${include.<name>}`` in that file.
  Includes never leave the manifest root and may not form a cycle. An include of a list that
  is an item of a list is spliced into it (``nodes: [a, !include more_nodes, b]`` is one flat
  list); values from an included file keep that file's lines.
- A mapping with ``repeat: N`` and ``template:`` (optional ``index:`` name, default ``i``, and
  ``offset:``) unrolls into N copies of the template spliced into the enclosing list, with
  ``i``, ``next_i`` (i + 1), ``offset_i`` (offset + i) and ``next_offset_i`` bound.
- Limits: repeat <= 4096, includes <= 128 per load, expanded nodes <= 65,536; an expression
  is at most 500 characters and 32 operators deep, each number in it (operands and results) an
  int64 or a finite float, and variables refer to each other at most 64 deep, so a small file
  cannot make loading slow.
"""

from __future__ import annotations

import ast
import datetime
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from caramba.errors import did_you_mean
from caramba.manifest.errors import Loc, ManifestError, format_path

MAX_REPEAT = 4096
MAX_INCLUDES = 128
MAX_EXPANSIONS = 65_536
MAX_DEPTH = 200  # nesting depth of a YAML file
MAX_EXPR_CHARS = 500  # length of one ${...} expression
MAX_EXPR_DEPTH = 32  # nesting of operators and parentheses in one expression
MAX_REFERENCE_DEPTH = 64  # variables that refer to variables that refer to ...
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # every number in an expression is an int64 or a finite float

_INCLUDE_TAGS = ("!include", "tag:yaml.org,2002:include")
_PLAIN_TAGS = {
    "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null", "tag:yaml.org,2002:timestamp",
}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*\Z")
_DOTPATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*\Z")
OVERRIDE_PATH = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")  # what --set PATH=VALUE addresses
_REPEAT_KEYS = ("repeat", "template", "index", "offset", "id", "op", "description")
_INCLUDE_KEYS = ("include", "variables")


# ---- located nodes ------------------------------------------------------------------------


class Y:
    """A located YAML node: ``kind`` is ``map`` (value: list of (key Y, value Y)), ``seq``
    (list of Y), ``scalar`` (a Python scalar) or ``include`` (value: the dot path)."""

    __slots__ = ("kind", "loc", "value")

    def __init__(self, kind: str, value: Any, loc: Loc) -> None:
        self.kind = kind
        self.value = value
        self.loc = loc

    def get(self, key: str) -> "Y | None":
        for k, v in self.value:
            if k.value == key:
                return v
        return None

    def keys(self) -> list[str]:
        return [k.value for k, _ in self.value]

    def __repr__(self) -> str:
        return f"Y({self.kind}, {self.value!r} @ {self.loc})"


def _mark_loc(mark: Any, file: str) -> Loc:
    if mark is None:
        return Loc(file, 1, 1)
    return Loc(file, mark.line + 1, mark.column + 1)


def _yaml_error(exc: yaml.YAMLError, file: str) -> ManifestError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    msg = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    return ManifestError(msg, loc=_mark_loc(mark, file) if mark is not None else Loc(file, 1, 1))


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML with YAML 1.2 floats: ``1e-3`` is a number, not the string "1e-3"."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _loader_class() -> type:
    return _Loader


_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_surrogates(text: str, loc: Callable[[int], Loc], what: str) -> None:
    """Text must be writable as UTF-8: a lone surrogate (from a bad decode or a "\\ud800" escape) is not."""
    m = _SURROGATE.search(text)
    if m is not None:
        raise ManifestError(f"{what} contains the lone surrogate \\u{ord(m.group()):04x}, which is not a character "
                            "(UTF-8 cannot encode it)", loc=loc(m.start()), hint="write the character itself, or a "
                            "surrogate pair as one \\U escape")


def _offset_loc(text: str, file: str) -> Callable[[int], Loc]:
    def loc(i: int) -> Loc:
        line = text.count("\n", 0, i)
        return Loc(file, line + 1, i - (text.rfind("\n", 0, i) + 1) + 1)

    return loc


def parse_yaml(text: str, file: str) -> Y:
    """Parse one YAML document into a located tree (no expansion)."""
    _no_surrogates(text, _offset_loc(text, file), "the text")
    loader = _loader_class()(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise _yaml_error(exc, file) from None
        except RecursionError:
            raise ManifestError("YAML is nested too deeply", loc=Loc(file, 1, 1)) from None
        if node is None:
            return Y("scalar", None, Loc(file, 1, 1))
        return _Converter(loader, file).convert(node, 0)
    finally:
        loader.dispose()


class _Converter:
    def __init__(self, loader: Any, file: str) -> None:
        self.loader = loader
        self.file = file
        self.active: set[int] = set()
        self.done: dict[int, Y] = {}  # aliases share one converted node; expansion copies

    def convert(self, node: Any, depth: int) -> Y:
        if id(node) in self.done:
            return self.done[id(node)]
        loc = _mark_loc(node.start_mark, self.file)
        if depth > MAX_DEPTH:
            raise ManifestError(f"YAML is nested more than {MAX_DEPTH} levels deep", loc=loc)
        if id(node) in self.active:
            raise ManifestError("an alias refers to a node that contains it (recursive YAML)", loc=loc)
        if isinstance(node, yaml.ScalarNode):
            y = self._scalar(node, loc)
        else:
            self.active.add(id(node))
            try:
                if isinstance(node, yaml.SequenceNode):
                    if node.tag != "tag:yaml.org,2002:seq":
                        raise ManifestError(f"unsupported YAML tag {node.tag} on a list", loc=loc)
                    y = Y("seq", [self.convert(c, depth + 1) for c in node.value], loc)
                elif node.tag != "tag:yaml.org,2002:map":
                    raise ManifestError(f"unsupported YAML tag {node.tag} on a mapping", loc=loc)
                else:
                    y = self._mapping(node, loc, depth)
            finally:
                self.active.discard(id(node))
        self.done[id(node)] = y
        return y

    def _scalar(self, node: Any, loc: Loc) -> Y:
        if node.tag in _INCLUDE_TAGS:
            return Y("include", node.value, loc)
        if node.tag not in _PLAIN_TAGS:
            raise ManifestError(f"unsupported YAML tag {node.tag!r} (only !include is understood)", loc=loc)
        try:
            value = self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            raise ManifestError(f"invalid scalar {node.value!r}: {exc}", loc=loc) from None
        if isinstance(value, (datetime.date, datetime.datetime)):
            value = node.value  # dates stay as written
        if isinstance(value, str):
            _no_surrogates(value, lambda i: loc, "this string")
        return Y("scalar", value, loc)

    def _mapping(self, node: Any, loc: Loc, depth: int) -> Y:
        seen: dict[Any, Loc] = {}
        for k, _ in node.value:
            if isinstance(k, yaml.ScalarNode) and k.tag == "tag:yaml.org,2002:merge":
                continue
            if isinstance(k, yaml.ScalarNode):
                kl = _mark_loc(k.start_mark, self.file)
                if k.value in seen:
                    raise ManifestError(f"duplicate key '{k.value}' (first at line {seen[k.value].line})", loc=kl)
                seen[k.value] = kl
        try:
            self.loader.flatten_mapping(node)
        except yaml.YAMLError as exc:
            raise _yaml_error(exc, self.file) from None
        pairs: dict[str, tuple[Y, Y]] = {}
        for k, v in node.value:
            kl = _mark_loc(k.start_mark, self.file)
            if not isinstance(k, yaml.ScalarNode) or k.tag not in _PLAIN_TAGS:
                raise ManifestError("mapping keys must be plain strings", loc=kl)
            _no_surrogates(k.value, lambda i, kl=kl: kl, "this key")
            ky = Y("scalar", k.value, kl)  # keys are text as written (`no:` is the key "no", not false)
            pairs[ky.value] = (ky, self.convert(v, depth + 1))  # later wins (after merge keys)
        return Y("map", list(pairs.values()), loc)


# ---- documents ----------------------------------------------------------------------------


@dataclass
class Document:
    """An expanded manifest: plain data plus the location of every value in it.

    ``locations`` maps a path tuple (``("topology", "nodes", 3, "id")``) to the location of the
    value; ``key_locations`` to the location of its key in the enclosing mapping.
    """

    data: Any
    source: str
    root: Path
    locations: dict[tuple, Loc] = field(default_factory=dict, repr=False)
    key_locations: dict[tuple, Loc] = field(default_factory=dict, repr=False)
    variables: dict[str, Any] = field(default_factory=dict, repr=False)
    overrides: tuple[str, ...] = ()
    text: str = field(default="", repr=False)  # the source text (to load again with more overrides)
    assets: str | None = None  # the assets/ folder beside the manifest ("" none; None: not loaded from text)

    @property
    def base_dir(self) -> Path:
        """The folder relative paths in the manifest (data files, checkpoints) start from: the
        file's folder, or the root for a manifest given as text."""
        return Path(self.source).parent if self.source not in ("<string>", "") else Path(self.root)

    def loc(self, path: Iterable[Any] = (), *, key: bool = False) -> Loc:
        """The location of ``path``, or of its nearest located ancestor."""
        p = tuple(path)
        while True:
            if key and p in self.key_locations:
                return self.key_locations[p]
            if p in self.locations:
                return self.locations[p]
            if not p:
                return Loc(self.source, 1, 1)
            p = p[:-1]

    def origin(self, path: Iterable[Any], note: str | None = None) -> Any:
        p = tuple(path)
        return self.loc(p).origin(p, note)

    def error(self, path: Iterable[Any], message: str, *, key: bool = False, **kw: Any) -> ManifestError:
        p = tuple(path)
        return ManifestError(message, loc=self.loc(p, key=key), path=format_path(p), **kw)

    def get(self, path: Iterable[Any], default: Any = None) -> Any:
        cur = self.data
        for part in path:
            try:
                cur = cur[part]
            except (KeyError, IndexError, TypeError):
                return default
        return cur

    def as_yaml(self) -> str:
        return dump_yaml(self.data)


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100, allow_unicode=True)


# ---- variables and scopes -----------------------------------------------------------------


class _Var:
    __slots__ = ("done", "node", "resolving", "scope", "value")

    def __init__(self, node: Y, scope: "_Scope | None", done: bool = False) -> None:
        self.node = node
        self.scope = scope
        self.done = done
        self.value: Y | None = node if done else None
        self.resolving = False


class _Scope:
    def __init__(self, parent: "_Scope | None" = None) -> None:
        self.parent = parent
        self.vars: dict[str, _Var] = {}

    def find(self, name: str) -> "_Var | None":
        s: _Scope | None = self
        while s is not None:
            if name in s.vars:
                return s.vars[name]
            s = s.parent
        return None

    def names(self) -> set[str]:
        out: set[str] = set()
        s: _Scope | None = self
        while s is not None:
            out |= set(s.vars)
            s = s.parent
        return out

    def bind_value(self, name: str, value: Any, loc: Loc) -> None:
        self.vars[name] = _Var(_to_y(value, loc), None, done=True)


def _to_y(value: Any, loc: Loc) -> Y:
    if isinstance(value, Y):
        return value
    if isinstance(value, Mapping):
        return Y("map", [(Y("scalar", str(k), loc), _to_y(v, loc)) for k, v in value.items()], loc)
    if isinstance(value, (list, tuple)):
        return Y("seq", [_to_y(v, loc) for v in value], loc)
    return Y("scalar", value, loc)


# ---- expansion ----------------------------------------------------------------------------


@dataclass
class _Ctx:
    root: Path
    includes: int = 0
    expansions: int = 0
    stack: tuple[Path, ...] = ()
    cache: dict[Path, Y] = field(default_factory=dict)
    display: Callable[[Path], str] = field(default=lambda p: _display(p))

    def count(self, loc: Loc, n: int = 1) -> None:
        self.expansions += n
        if self.expansions > MAX_EXPANSIONS:
            raise ManifestError(
                f"the manifest expands to more than {MAX_EXPANSIONS} nodes (limit); check repeat counts and includes",
                loc=loc,
            )

    def count_tree(self, y: Y, loc: Loc) -> None:
        """Count the nodes of an already expanded value inserted again (a variable used again)."""
        stack = [y]
        while stack:
            node = stack.pop()
            self.count(loc)
            if node.kind == "seq":
                stack.extend(node.value)
            elif node.kind == "map":
                stack.extend(v for _, v in node.value)


class _Splice(list):
    """A list produced by ``repeat``: spliced into the enclosing list."""


class _Expander:
    def __init__(self, ctx: _Ctx, path: tuple = ()) -> None:
        self.ctx = ctx
        self.path: list[Any] = list(path)  # where in the expanded document we are (for errors)
        self.references = 0  # variables being resolved, one inside the other

    def expand(self, y: Y, scope: _Scope, notes: tuple[str, ...]) -> "Y | _Splice":
        try:
            return self._expand(y, scope, notes)
        except RecursionError:  # the limits keep this far away; never a raw traceback all the same
            raise ManifestError("the manifest nests too deeply here (YAML nesting, includes, repeats and variables "
                                "together)", loc=y.loc.noted(notes)) from None
        except ManifestError as exc:
            if exc.path is None and self.path:
                exc.path = format_path(self.path)
                exc.args = (exc._render(),)
            raise

    def _expand(self, y: Y, scope: _Scope, notes: tuple[str, ...]) -> "Y | _Splice":
        self.ctx.count(y.loc)
        loc = y.loc.noted(notes)
        if y.kind == "scalar":
            if isinstance(y.value, str) and "$" in y.value:
                return self.substitute(y.value, loc, scope)
            return Y("scalar", y.value, loc)
        if y.kind == "include":
            return self.include(y.value, None, loc, scope, notes)
        if y.kind == "seq":
            items: list[Y] = []
            for item in y.value:
                self.path.append(len(items))
                try:
                    r = self.expand(item, scope, notes)
                finally:
                    self.path.pop()
                if isinstance(r, _Splice):
                    items.extend(r)
                else:
                    items.append(r)
            return Y("seq", items, loc)
        keys = y.keys()
        if "template" in keys or ("repeat" in keys and ("index" in keys or "offset" in keys)):
            return self.repeat(y, loc, scope, notes)
        if "include" in keys:
            return self.include_mapping(y, loc, scope, notes)
        pairs = []
        for k, v in y.value:
            key = self.expand(k, scope, notes)
            if key.kind != "scalar" or not isinstance(key.value, str):  # type: ignore[union-attr]
                raise ManifestError("a mapping key must expand to a string", loc=k.loc.noted(notes))
            self.path.append(key.value)  # type: ignore[union-attr]
            try:
                val = self.expand(v, scope, notes)
            finally:
                self.path.pop()
            if isinstance(val, _Splice):
                val = Y("seq", list(val), v.loc.noted(notes))
            pairs.append((key, val))
        names = [k.value for k, _ in pairs]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ManifestError(f"duplicate key '{dup}' after substitution", loc=loc)
        return Y("map", pairs, loc)

    # -- ${...} ------------------------------------------------------------------------------
    def substitute(self, text: str, loc: Loc, scope: _Scope) -> Y:
        parts: list[Any] = []  # str literals and Y values
        i, n = 0, len(text)
        buf = ""
        while i < n:
            if text.startswith("$${", i):
                buf += "${"
                i += 3
                continue
            if text.startswith("${", i):
                end = text.find("}", i + 2)
                if end < 0:
                    raise ManifestError(f"unterminated '${{' in {text!r}", loc=loc, hint="write $${ for a literal ${")
                if buf:
                    parts.append(buf)
                    buf = ""
                parts.append(self.evaluate(text[i + 2 : end].strip(), loc, scope))
                i = end + 1
                continue
            buf += text[i]
            i += 1
        if buf:
            parts.append(buf)
        if len(parts) == 1 and isinstance(parts[0], Y):
            v = parts[0]
            if v.kind != "scalar":  # each use of a list or mapping is that many more nodes in the document
                self.ctx.count_tree(v, loc)
            return Y(v.kind, v.value, loc)  # whole-scalar placeholder: keeps its type
        out = ""
        for p in parts:
            if isinstance(p, str):
                out += p
            elif p.kind != "scalar":
                raise ManifestError(
                    f"a {'list' if p.kind == 'seq' else 'mapping'} cannot be formatted into the string {text!r}",
                    loc=loc,
                    hint="use the placeholder as the whole value to insert a list or mapping",
                )
            else:
                out += _format_scalar(p.value)
        return Y("scalar", out, loc)

    def evaluate(self, expr: str, loc: Loc, scope: _Scope) -> Y:
        if not expr:
            raise ManifestError("empty placeholder '${}'", loc=loc)
        if len(expr) > MAX_EXPR_CHARS:
            raise ManifestError(f"the expression '${{{expr[:40]}...}}' is {len(expr)} characters long; the limit is "
                                f"{MAX_EXPR_CHARS}", loc=loc, hint="compute the value in a few named variables")
        if _DOTTED.match(expr):
            return self.lookup(expr, loc, scope)
        try:
            tree = ast.parse(expr, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise ManifestError(f"cannot parse placeholder '${{{expr}}}'", loc=loc) from None
        _check_depth(tree.body, expr, loc)
        return Y("scalar", self._eval(tree.body, expr, loc, scope), loc)

    _BINOPS = {
        ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    }

    def _eval(self, node: ast.AST, expr: str, loc: Loc, scope: _Scope) -> Any:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return _bounded(node.value, expr, loc)
        if isinstance(node, (ast.Name, ast.Attribute)):
            dotted = _dotted_name(node)
            if dotted is None:
                raise ManifestError(f"unsupported expression in '${{{expr}}}'", loc=loc)
            v = self.lookup(dotted, loc, scope)
            if v.kind != "scalar" or type(v.value) not in (int, float):
                raise ManifestError(f"'{dotted}' in '${{{expr}}}' is not a number", loc=loc)
            return _bounded(v.value, expr, loc, dotted)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            x = self._eval(node.operand, expr, loc, scope)
            return _bounded(-x if isinstance(node.op, ast.USub) else x, expr, loc)
        if isinstance(node, ast.BinOp) and type(node.op) in self._BINOPS:
            a = self._eval(node.left, expr, loc, scope)
            b = self._eval(node.right, expr, loc, scope)
            try:  # operands are int64 or finite floats, so no operation here is costly
                return _bounded(self._BINOPS[type(node.op)](a, b), expr, loc)
            except (ZeroDivisionError, OverflowError) as exc:
                raise ManifestError(f"'${{{expr}}}': {exc}", loc=loc) from None
        raise ManifestError(
            f"unsupported expression '${{{expr}}}': use names, numbers, + - * / // % and parentheses", loc=loc
        )

    def lookup(self, dotted: str, loc: Loc, scope: _Scope) -> Y:
        head, *rest = dotted.split(".")
        var = scope.find(head)
        if var is None:
            raise ManifestError(
                f"undefined variable '{dotted}'; {did_you_mean(head, scope.names()) if scope.names() else 'no variables are defined'}",
                loc=loc,
                hint="define it under the top-level `variables:`",
            )
        cur = self.resolve(head, var, loc)
        walked = head
        for part in rest:
            if cur.kind == "map":
                nxt = cur.get(part)
                if nxt is None:
                    keys = cur.keys()
                    raise ManifestError(
                        f"undefined variable '{dotted}': '{walked}' has no key '{part}'; "
                        + (did_you_mean(part, keys) if keys else "it is empty"),
                        loc=loc,
                    )
                cur = nxt
            elif cur.kind == "seq" and part.isdigit():
                idx = int(part)
                if idx >= len(cur.value):
                    raise ManifestError(f"'{dotted}': index {idx} is past the end of '{walked}' ({len(cur.value)} items)", loc=loc)
                cur = cur.value[idx]
            else:
                raise ManifestError(f"undefined variable '{dotted}': '{walked}' is not a mapping", loc=loc)
            walked += "." + part
        return cur

    def resolve(self, name: str, var: _Var, loc: Loc) -> Y:
        if var.done:
            return var.value  # type: ignore[return-value]
        if var.resolving:
            raise ManifestError(f"variable '{name}' refers to itself", loc=loc)
        if self.references >= MAX_REFERENCE_DEPTH:
            raise ManifestError(f"variable '{name}' is reached through more than {MAX_REFERENCE_DEPTH} variables "
                                "that refer to each other", loc=loc, hint="refer to the values more directly")
        var.resolving = True
        saved, self.path = self.path, ["variables", name]
        self.references += 1
        try:
            r = self.expand(var.node, var.scope, ())  # type: ignore[arg-type]
        finally:
            self.references -= 1
            var.resolving = False
            self.path = saved
        var.value = Y("seq", list(r), var.node.loc) if isinstance(r, _Splice) else r
        var.done = True
        return var.value

    # -- repeat ------------------------------------------------------------------------------
    def repeat(self, y: Y, loc: Loc, scope: _Scope, notes: tuple[str, ...]) -> _Splice:
        for k, _ in y.value:
            if k.value not in _REPEAT_KEYS:
                raise ManifestError(
                    f"unknown key '{k.value}' in a repeat block; {did_you_mean(k.value, _REPEAT_KEYS)}",
                    loc=k.loc.noted(notes),
                )
        if y.get("repeat") is None or y.get("template") is None:
            raise ManifestError("a repeat block needs both `repeat: N` and `template:`", loc=loc)
        op = y.get("op")
        if op is not None and self.scalar(op, scope, notes) != "control.repeat":
            raise ManifestError("a mapping with `template:` is a repeat block; its op must be control.repeat", loc=op.loc.noted(notes))
        count = self.scalar(y.get("repeat"), scope, notes)  # type: ignore[arg-type]
        rloc = y.get("repeat").loc.noted(notes)  # type: ignore[union-attr]
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ManifestError(f"repeat must be a non-negative int, got {count!r}", loc=rloc)
        if count > MAX_REPEAT:
            raise ManifestError(f"repeat {count} is over the limit of {MAX_REPEAT}", loc=rloc)
        index = "i" if y.get("index") is None else self.scalar(y.get("index"), scope, notes)  # type: ignore[arg-type]
        if not isinstance(index, str) or not _IDENT.match(index):
            raise ManifestError(f"index must be a name like `i` or `layer`, got {index!r}", loc=loc)
        offset = 0 if y.get("offset") is None else self.scalar(y.get("offset"), scope, notes)  # type: ignore[arg-type]
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise ManifestError(f"offset must be an int, got {offset!r}", loc=loc)
        label = y.get("id")
        name = f" '{self.scalar(label, scope, notes)}'" if label is not None else ""
        template = y.get("template")
        parts = template.value if template.kind == "seq" else [template]  # type: ignore[union-attr]
        in_list = bool(self.path) and isinstance(self.path[-1], int)
        start = self.path[-1] if in_list else 0
        out = _Splice()
        for i in range(count):
            inner = _Scope(scope)
            for key, val in ((index, i), (f"next_{index}", i + 1), (f"offset_{index}", offset + i), (f"next_offset_{index}", offset + i + 1)):
                inner.bind_value(key, val, loc)
            iteration = (f"in repeat{name} at {_bare(loc)} with {index}={i}", *notes)
            for part in parts:
                if in_list:
                    self.path[-1] = start + len(out)  # the index this copy gets in the enclosing list
                r = self.expand(part, inner, iteration)
                if isinstance(r, _Splice):
                    out.extend(r)
                elif r.kind == "seq" and template.kind != "seq":  # type: ignore[union-attr]
                    out.extend(r.value)  # e.g. a template that is an !include of a list
                else:
                    out.append(r)
        if in_list:
            self.path[-1] = start
        return out

    def scalar(self, y: Y, scope: _Scope, notes: tuple[str, ...]) -> Any:
        r = self.expand(y, scope, notes)
        if isinstance(r, _Splice) or r.kind != "scalar":
            raise ManifestError("expected a single value here", loc=y.loc.noted(notes))
        return r.value

    # -- include -----------------------------------------------------------------------------
    def include_mapping(self, y: Y, loc: Loc, scope: _Scope, notes: tuple[str, ...]) -> "Y | _Splice":
        for k, _ in y.value:
            if k.value not in _INCLUDE_KEYS:
                raise ManifestError(
                    f"unknown key '{k.value}' next to `include:`; an include mapping takes only include and variables",
                    loc=k.loc.noted(notes),
                )
        target = self.scalar(y.get("include"), scope, notes)  # type: ignore[arg-type]
        params = None
        if y.get("variables") is not None:
            params = self.expand(y.get("variables"), scope, notes)  # type: ignore[arg-type]
            if isinstance(params, _Splice) or params.kind != "map":
                raise ManifestError("include variables must be a mapping", loc=y.get("variables").loc.noted(notes))  # type: ignore[union-attr]
        return self.include(target, params, loc, scope, notes)

    def include(self, target: Any, params: Y | None, loc: Loc, scope: _Scope, notes: tuple[str, ...]) -> "Y | _Splice":
        if not isinstance(target, str) or not _DOTPATH.match(target):
            raise ManifestError(
                f"include takes a dot path like `blocks.mlp` (file blocks/mlp.yml under the manifest root), got {target!r}",
                loc=loc,
            )
        path = self.find_include(target, loc)
        if path in self.ctx.stack:
            chain = " -> ".join(p.name for p in (*self.ctx.stack, path))
            raise ManifestError(f"include cycle: {chain}", loc=loc)
        self.ctx.includes += 1
        if self.ctx.includes > MAX_INCLUDES:
            raise ManifestError(f"more than {MAX_INCLUDES} includes (limit)", loc=loc)
        tree = self.ctx.cache.get(path)
        if tree is None:
            try:
                tree = parse_yaml(_read(path, loc), self.ctx.display(path))
            except ManifestError as exc:  # a syntax error in the included file: say where it was included
                if exc.loc is not None:
                    exc.loc = exc.origin = exc.loc.noted((f"included from {_bare(loc)}", *notes))
                    exc.args = (exc._render(),)
                raise
            self.ctx.cache[path] = tree
        inner = _Scope(scope)
        if params is not None:
            inner.vars["include"] = _Var(params, None, done=True)
        if tree.kind == "map" and tree.get("variables") is not None:
            _bind_variables(inner, tree.get("variables"))  # type: ignore[arg-type]
            tree = Y("map", [(k, v) for k, v in tree.value if k.value != "variables"], tree.loc)
        saved = self.ctx.stack
        self.ctx.stack = (*saved, path)
        try:
            r = self.expand(tree, inner, (f"included from {_bare(loc)}", *notes))
        finally:
            self.ctx.stack = saved
        if isinstance(r, _Splice):
            return r
        return _Splice(r.value) if r.kind == "seq" else r  # a list: spliced into an enclosing list

    def find_include(self, target: str, loc: Loc) -> Path:
        *dirs, last = target.split(".")
        root = self.ctx.root.resolve()
        for ext in (".yml", ".yaml"):
            p = self.ctx.root.joinpath(*dirs, last + ext)
            if p.is_file():
                real = p.resolve()
                if not real.is_relative_to(root):
                    raise ManifestError(f"include '{target}' resolves to {real}, outside the manifest root {root}", loc=loc)
                return real
        raise ManifestError(
            f"include '{target}': no file {Path(*dirs, last)}.yml under the manifest root {self.ctx.root}",
            loc=loc,
        )


def _check_depth(tree: ast.AST, expr: str, loc: Loc) -> None:
    """Refuse expressions nested deeper than MAX_EXPR_DEPTH (walked without recursion)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPR_DEPTH:
            raise ManifestError(f"the expression '${{{expr[:40]}...}}' is nested more than {MAX_EXPR_DEPTH} levels "
                                "deep", loc=loc, hint="compute the value in a few named variables")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _bounded(value: Any, expr: str, loc: Loc, name: str | None = None) -> Any:
    """``value`` if it is an int64 or a finite float; expressions compute nothing bigger."""
    what = f"'{name}'" if name else "a value"
    if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
        raise ManifestError(f"'${{{expr}}}': {what} is outside the int64 range [-2**63, 2**63 - 1]", loc=loc)
    if isinstance(value, float) and not math.isfinite(value):
        raise ManifestError(f"'${{{expr}}}': {what} is {value}, not a finite number", loc=loc)
    return value


def _dotted_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _bare(loc: Loc) -> str:
    return f"{loc.file}:{loc.line}:{loc.col}"


def _format_scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _read(path: Path, loc: Loc | None = None) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}", loc=loc) from None


def _bind_variables(scope: _Scope, node: Y) -> None:
    if node.kind != "map":
        raise ManifestError("`variables` must be a mapping of names to values", loc=node.loc)
    for k, v in node.value:
        if not _IDENT.match(k.value):
            raise ManifestError(f"variable name {k.value!r} must be a plain name (letters, digits, _)", loc=k.loc)
        scope.vars[k.value] = _Var(v, scope)


# ---- plain data ---------------------------------------------------------------------------


def _plain(y: Y, path: tuple, locs: dict, key_locs: dict) -> Any:
    locs[path] = y.loc
    if y.kind == "scalar":
        return y.value
    if y.kind == "seq":
        return [_plain(v, (*path, i), locs, key_locs) for i, v in enumerate(y.value)]
    if y.kind == "map":
        out = {}
        for k, v in y.value:
            key_locs[(*path, k.value)] = k.loc
            out[k.value] = _plain(v, (*path, k.value), locs, key_locs)
        return out
    raise ManifestError("unexpanded include", loc=y.loc)  # pragma: no cover - expand() removes them


# ---- overrides (--set a.b=value) ----------------------------------------------------------


def parse_override(item: str) -> tuple[str, Any]:
    """``"trainer.steps=200"`` -> ``("trainer.steps", 200)``; the value is read as YAML."""
    key, eq, raw = item.partition("=")
    key = key.strip()
    loc = Loc("--set", 1, 1, (f"from --set {item[:80]}",))
    if not eq or not key:
        raise ManifestError(f"--set takes PATH=VALUE (e.g. trainer.steps=200), got {item[:80]!r}", loc=loc)
    if not OVERRIDE_PATH.fullmatch(key):
        raise ManifestError(f"--set path {key[:80]!r} must be dotted names or list indexes, like trainer.optimizer.lr",
                            loc=loc)
    _no_surrogates(item, lambda i: loc, f"--set {key}")
    try:
        value = yaml.load(raw, Loader=_Loader) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ManifestError(f"--set {key}: value {raw!r} is not valid YAML: {exc}", loc=loc) from None
    except RecursionError:
        raise ManifestError(f"--set {key}: the value is nested too deeply", loc=loc) from None
    if isinstance(value, (datetime.date, datetime.datetime)):
        value = raw
    return key, value


def _normalize_overrides(overrides: "Mapping[str, Any] | Iterable[str] | None") -> list[tuple[str, Any]]:
    if not overrides:
        return []
    if isinstance(overrides, Mapping):
        items = [(str(k), v) for k, v in overrides.items()]
    else:
        items = [parse_override(s) for s in overrides]
    for key, value in items:
        _check_override_size(key, value)
    return items


def _check_override_size(key: str, value: Any) -> None:
    """An override value, expanded (aliases repeat their target), has at most MAX_EXPANSIONS
    nodes and MAX_DEPTH levels; counted without recursion and stopping at the limit."""
    stack, count = [(value, 0)], 0
    while stack:
        v, depth = stack.pop()
        count += 1
        if count > MAX_EXPANSIONS or depth > MAX_DEPTH:
            what = f"more than {MAX_EXPANSIONS} nodes" if count > MAX_EXPANSIONS else f"nested more than {MAX_DEPTH} deep"
            raise ManifestError(f"--set {key}: the value is {what} (limit)", loc=_override_loc(key, "..."))
        if isinstance(v, Mapping):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend((x, depth + 1) for x in v)


def _set_path(root: Y, parts: list[str], value: Any, loc: Loc, label: str) -> None:
    cur = root
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if cur.kind == "map":
            for j, (k, v) in enumerate(cur.value):
                if k.value == part:
                    if last:
                        cur.value[j] = (k, _to_y(value, loc))
                        return
                    cur = v
                    break
            else:
                if last:
                    cur.value.append((Y("scalar", part, loc), _to_y(value, loc)))
                    return
                new = Y("map", [], loc)
                cur.value.append((Y("scalar", part, loc), new))
                cur = new
        elif cur.kind == "seq" and part.isdigit() and int(part) < len(cur.value):
            if last:
                cur.value[int(part)] = _to_y(value, loc)
                return
            cur = cur.value[int(part)]
        else:
            where = ".".join(parts[:i]) or "the document"
            raise ManifestError(f"--set {label}: {where} is not a mapping with '{part}'", loc=loc)


def _check_variable_override(tree: Y, key: str, value: Any) -> None:
    """``--set variables.<name>=...`` must name a variable the manifest defines: a typo would
    otherwise add a variable nothing reads, and the run would silently use the old value."""
    parts = key.split(".")
    if len(parts) < 2:
        return
    var_node = tree.get("variables")
    names = var_node.keys() if var_node is not None and var_node.kind == "map" else []
    if parts[1] not in names:
        raise ManifestError(
            f"--set {key}: the manifest has no variable '{parts[1]}'; "
            + (did_you_mean(parts[1], names) if names else "it defines no variables"),
            loc=_override_loc(key, value), hint="--set variables.<name> changes a variable defined under the "
            "top-level `variables:`")


def _override_loc(key: str, value: Any) -> Loc:
    return Loc("--set", 1, 1, (f"from --set {key}={_format_scalar(value)}",))


def _copy(y: Y, memo: dict[int, Y] | None = None) -> Y:
    """A copy of the tree that --set may change; a node that aliases share is copied once (an
    alias bomb stays small)."""
    memo = {} if memo is None else memo
    if id(y) in memo:
        return memo[id(y)]
    if y.kind == "map":
        out = Y("map", [(k, _copy(v, memo)) for k, v in y.value], y.loc)
    elif y.kind == "seq":
        out = Y("seq", [_copy(v, memo) for v in y.value], y.loc)
    else:
        out = y
    memo[id(y)] = out
    return out


# ---- entry points -------------------------------------------------------------------------


def load_string(
    text: str,
    source: str = "<string>",
    *,
    root: "str | Path | None" = None,
    overrides: "Mapping[str, Any] | Iterable[str] | None" = None,
    variables: Mapping[str, Any] | None = None,
) -> Document:
    """Load a manifest from text. ``root`` is where includes are looked up (default: cwd).

    ``overrides`` (``{"trainer.steps": 10}`` or ``["trainer.steps=10"]``) are applied before
    expansion; a path under ``variables.`` changes a variable everywhere it is used.
    ``variables`` binds extra names (e.g. a block's ``config``) around the document.
    """
    root_path = Path(root) if root is not None else Path.cwd()
    tree = parse_yaml(text, source)
    if tree.kind != "map":
        got = "an empty document" if tree.kind == "scalar" and tree.value is None else {"seq": "a list"}.get(tree.kind, "a single value")
        raise ManifestError(f"a manifest must be a mapping of sections, got {got}", loc=tree.loc)
    items = _normalize_overrides(overrides)
    early = [(k, v) for k, v in items if k == "variables" or k.startswith("variables.")]
    late = [(k, v) for k, v in items if (k, v) not in early]
    tree = _copy(tree) if early else tree
    for key, value in early:  # variables change before expansion, so every use sees them
        _check_variable_override(tree, key, value)
        _set_path(tree, key.split("."), value, _override_loc(key, value), key)
    ctx = _Ctx(root_path)
    scope = _Scope()
    for name, value in (variables or {}).items():
        scope.bind_value(name, value, Loc(source, 1, 1))
    var_node = tree.get("variables")
    if var_node is not None:
        _bind_variables(scope, var_node)
    body = Y("map", [(k, v) for k, v in tree.value if k.value != "variables"], tree.loc)
    expander = _Expander(ctx)
    expanded = expander.expand(body, scope, ())
    for key, value in late:  # other paths address the expanded document
        _set_path(expanded, key.split("."), value, _override_loc(key, value), key)  # type: ignore[arg-type]
    locs: dict[tuple, Loc] = {}
    key_locs: dict[tuple, Loc] = {}
    data = _plain(expanded, (), locs, key_locs)  # type: ignore[arg-type]
    resolved_vars: dict[str, Any] = {}
    if var_node is not None:
        for k, _ in var_node.value:
            resolved_vars[k.value] = _plain(expander.resolve(k.value, scope.vars[k.value], k.loc), (), {}, {})
    # the assets/ folder beside the manifest (for text: under the root it was given, not the working folder)
    beside = Path(source).parent if source not in ("<string>", "") else Path(root) if root is not None else None
    assets = beside / "assets" if beside is not None else None
    return Document(data, source, root_path, locs, key_locs, resolved_vars,
                    tuple(f"{k}={_flow(v)}" for k, v in items), text,
                    str(assets) if assets is not None and assets.is_dir() else "")


def _flow(value: Any) -> str:
    """``value`` as one line of YAML that reads back as the same value (JSON, which is YAML and
    quotes every string, so "1e-3" stays a string; YAML's .inf/.nan for non-finite floats)."""
    import json

    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return yaml.safe_dump(value, default_flow_style=True, width=1 << 30).removesuffix("\n...\n").strip()


def load(
    path: "str | Path",
    *,
    root: "str | Path | None" = None,
    overrides: "Mapping[str, Any] | Iterable[str] | None" = None,
) -> Document:
    """Load and expand a manifest file; includes resolve under ``root`` (default: its folder)."""
    p = Path(path)
    if not p.is_file():
        raise ManifestError(f"manifest {path} does not exist")
    return load_string(_read(p), str(path), root=root if root is not None else p.parent, overrides=overrides)


__all__ = [
    "MAX_EXPANSIONS", "MAX_INCLUDES", "MAX_REPEAT", "Document", "Loc", "ManifestError", "dump_yaml",
    "format_path", "load", "load_string", "parse_override", "parse_yaml",
]
