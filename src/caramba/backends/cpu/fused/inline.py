"""Inline the runtime helpers into generated kernel source, as text, before Numba sees it.

The generated kernels call ``runtime.py``'s and ``rows_runtime.py``'s helpers (``erfc_fast``,
``exp_fast``, ``row_sum``, ...), declared ``@njit(inline="always")`` so that LLVM sees one loop
body and vectorizes it. Numba inlines those at the level of its IR, and that is most of a cold
start: ``inline_closurecall`` deep-copies the callee's IR for every call, nested helpers are
inlined again inside each copy, and ``_poly`` loops over a constant tuple that LLVM must unroll
(a float64 GELU kernel: ~1.3 s of compile, a softmax row kernel ~3 s).

``expand(source)`` does the same inlining on the Python syntax tree instead: each call of an
``inline="always"`` helper in a statement is replaced by the helper's statements (its locals
renamed apart, its arguments assigned once, in order, before its body), nested helpers
recursively, ``_poly(z, CONSTANTS)`` by its unrolled Horner steps, constant tuples of the
helpers' modules by their values. Numba then compiles one flat function and runs no inline
pass. The arithmetic is the same operations in the same order on the same types (Numba's IR
inlining also types the callee's body in the caller's context), so results are bitwise those
of the uninlined kernels (tests/unit/backends/cpu/test_inline.py checks, special values
included).

Hoisting a call out of its expression evaluates it before the statement, also where it stood
in one branch of a conditional expression: the helpers are pure and raise nothing
(``error_model="numpy"``), so only time can differ, and LLVM turns such branches into selects
anyway. A call it cannot move (in a ``while`` test, or a helper whose returns are not at the
end of its branches) stays a call, and Numba inlines it as before.

``fused/jit.py`` expands each source before hashing it, so the content-addressed cache key is
the expanded text: a change to a helper's body gives new kernels by itself.
"""

from __future__ import annotations

import ast
import builtins
import copy
import inspect
import textwrap
import threading
import types as pytypes
from dataclasses import dataclass, field
from typing import Any

RUNTIME_MODULES = ("caramba.backends.cpu.fused.runtime", "caramba.backends.cpu.fused.rows_runtime")

_LOCK = threading.Lock()
_HELPERS: dict[int, _Helper] = {}  # id(dispatcher) -> parsed helper


class _NotFlat(Exception):
    """A helper whose control flow this inliner does not restructure (stays a call)."""


@dataclass
class _Helper:
    name: str
    module: str
    params: list[str]
    body: list[ast.stmt]
    globals: dict[str, Any]
    locals: set[str] = field(default_factory=set)
    stored: set[str] = field(default_factory=set)  # names it assigns (parameters among them)


def _inline_always(obj: Any) -> bool:
    opts = getattr(obj, "targetoptions", None)
    return isinstance(opts, dict) and opts.get("inline") == "always" and hasattr(obj, "py_func")


def _helper(obj: Any) -> _Helper | None:
    """The parsed helper for an ``inline="always"`` dispatcher (None for anything else)."""
    if not _inline_always(obj):
        return None
    with _LOCK:
        h = _HELPERS.get(id(obj))
        if h is not None:
            return h
    fn = obj.py_func
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):  # no source (a bytecode-only install): stays a call
        return None
    (fdef,) = tree.body
    assert isinstance(fdef, ast.FunctionDef)
    body = list(fdef.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # docstring
    params = [a.arg for a in fdef.args.args]
    stored = {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    h = _Helper(fn.__name__, fn.__module__, params, body, fn.__globals__, set(params) | stored, stored)
    with _LOCK:
        _HELPERS[id(obj)] = h
        _KEEP.append(obj)
    return h


_KEEP: list[Any] = []  # the dispatchers whose ids key _HELPERS


def _constant(value: Any) -> ast.expr | None:
    """A literal for a float / int / bool constant or a tuple of them (None otherwise)."""
    if isinstance(value, bool) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            return None
        return ast.Constant(value)
    if isinstance(value, tuple) and value and all(_constant(v) is not None for v in value):
        return ast.Tuple([ast.Constant(v) for v in value], ast.Load())
    return None


class _Expander:
    def __init__(self, names: dict[str, Any]) -> None:
        self.names = names  # kernel-level name -> object (the imported helpers)
        self.count = 0
        self.imports: dict[tuple[str, str, bool], None] = {}  # (module, name, is a module) kept as is

    # -- statements ------------------------------------------------------------------------------

    def block(self, stmts: list[ast.stmt], scope: dict[str, Any]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for st in stmts:
            out.extend(self.stmt(st, scope))
        return out

    def stmt(self, st: ast.stmt, scope: dict[str, Any]) -> list[ast.stmt]:
        pre: list[ast.stmt] = []
        if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)):
            if st.value is not None:
                st.value = self.expr(st.value, pre, scope)
        elif isinstance(st, ast.If):
            st.test = self.expr(st.test, pre, scope)
            st.body = self.block(st.body, scope)
            st.orelse = self.block(st.orelse, scope)
        elif isinstance(st, ast.For):
            st.iter = self.expr(st.iter, pre, scope)
            st.body = self.block(st.body, scope)
            st.orelse = self.block(st.orelse, scope)
        elif isinstance(st, ast.While):  # the test runs every iteration: its calls stay calls
            self.keep_calls(st.test, scope)
            st.body = self.block(st.body, scope)
            st.orelse = self.block(st.orelse, scope)
        elif isinstance(st, ast.FunctionDef):
            st.body = self.block(st.body, scope)
        else:
            for node in ast.walk(st):
                if isinstance(node, ast.expr):
                    self.keep_calls(node, scope)
        return pre + [st]

    def keep_calls(self, node: ast.AST, scope: dict[str, Any]) -> None:
        """Record the helpers called under ``node`` that stay calls (they must be importable)."""
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                obj = scope.get(n.func.id)
                if obj is not None and _inline_always(obj):
                    self.imports[(obj.py_func.__module__, n.func.id, False)] = None

    # -- expressions -----------------------------------------------------------------------------

    def expr(self, e: ast.expr, pre: list[ast.stmt], scope: dict[str, Any]) -> ast.expr:
        expander = self

        class T(ast.NodeTransformer):
            def visit_Call(self, node: ast.Call) -> ast.expr:
                self.generic_visit(node)  # arguments first, in order
                if not isinstance(node.func, ast.Name) or node.keywords:
                    return node
                obj = scope.get(node.func.id)
                h = _helper(obj) if obj is not None else None
                if h is None:
                    return node
                return expander.call(h, node, pre, scope)

            def visit_Lambda(self, node: ast.Lambda) -> ast.expr:
                return node

        return T().visit(e)

    def call(self, h: _Helper, node: ast.Call, pre: list[ast.stmt], scope: dict[str, Any]) -> ast.expr:
        if len(node.args) != len(h.params) or any(isinstance(a, ast.Starred) for a in node.args):
            self.keep_calls(node, scope)
            return node
        self.count += 1
        p = f"_h{self.count}_"
        if h.name in ("_poly", "_poly32"):
            return self.poly(p, node, pre, h)
        ret = ast.Name(p + "ret", ast.Store())
        # an argument that is a variable or a number, for a parameter the helper never assigns,
        # is used in place (fewer variables for Numba to type; a constant size lets its branch
        # pruning drop dead paths); others are evaluated once into the parameter's variable
        direct = {a: arg for a, arg in zip(h.params, node.args, strict=True)
                  if a not in h.stored and isinstance(arg, (ast.Name, ast.Constant))}
        try:
            body = [_Rename(p, h, self, direct).visit(s) for s in _flatten(copy.deepcopy(h.body), ret)]
        except _NotFlat:
            self.keep_calls(node, scope)
            return node
        stmts: list[ast.stmt] = [ast.Assign([ast.Name(p + a, ast.Store())], arg)
                                 for a, arg in zip(h.params, node.args, strict=True) if a not in direct]
        stmts += self.block(body, h.globals)
        pre.extend(stmts)
        return ast.Name(p + "ret", ast.Load())

    def poly(self, p: str, node: ast.Call, pre: list[ast.stmt], h: _Helper) -> ast.expr:
        """``_poly(z, c)``: r = c[-1]; r = _mad(r, z, c[i]) for i from len(c) - 2 down to 0."""
        z, c = node.args
        if not isinstance(c, ast.Tuple) or not c.elts or not all(isinstance(v, ast.Constant) for v in c.elts):
            self.keep_calls(node, {"_poly": _dispatcher(h)})
            return node
        values = tuple(v.value for v in c.elts)
        table = getattr(_runtime(), "HORNER32" if h.name == "_poly32" else "HORNER", {})
        horner = {cs: name for name, cs in table.items()}.get(values)
        if horner is not None and h.module == _runtime().__name__:  # one intrinsic for the whole chain
            self.imports[(h.module, horner, False)] = None
            return ast.Call(ast.Name(horner, ast.Load()), [z], [])
        if h.name == "_poly32":
            self.keep_calls(node, {"_poly32": _dispatcher(h)})
            return node
        if not isinstance(z, ast.Name):
            pre.append(ast.Assign([ast.Name(p + "z", ast.Store())], z))
            z = ast.Name(p + "z", ast.Load())
        pre.append(ast.Assign([ast.Name(p + "r", ast.Store())], ast.Constant(c.elts[-1].value)))
        for v in reversed(c.elts[:-1]):
            mad = ast.Call(ast.Name("_mad", ast.Load()),
                           [ast.Name(p + "r", ast.Load()), copy.deepcopy(z), ast.Constant(v.value)], [])
            pre.extend(self.stmt(ast.Assign([ast.Name(p + "r", ast.Store())], mad), h.globals))
        self.reference("_mad", h)
        return ast.Name(p + "r", ast.Load())

    def reference(self, name: str, h: _Helper) -> None:
        """A global of helper ``h`` used as is in the expanded text: import it in the kernel."""
        obj = h.globals.get(name)
        if obj is None or _inline_always(obj):
            return  # an inline helper is expanded (or recorded by keep_calls where it stays a call)
        if isinstance(obj, pytypes.ModuleType):
            self.imports[(obj.__name__, name, True)] = None
        else:
            self.imports[(h.module, name, False)] = None


def _runtime() -> Any:
    from . import runtime

    return runtime


def _dispatcher(h: _Helper) -> Any:
    return h.globals.get(h.name)


class _Rename(ast.NodeTransformer):
    """Rename a helper's locals apart; its constant globals become literals, the others are kept
    (and imported into the kernel's module)."""

    def __init__(self, prefix: str, h: _Helper, expander: _Expander, direct: dict[str, ast.expr]) -> None:
        self.p, self.h, self.x, self.direct = prefix, h, expander, direct

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id.startswith(self.p):  # the result variable
            return node
        if node.id in self.direct:
            return copy.deepcopy(self.direct[node.id])
        if node.id in self.h.locals:
            node.id = self.p + node.id
            return node
        if node.id in self.h.globals:
            lit = _constant(self.h.globals[node.id])
            if lit is not None:
                return lit
            self.x.reference(node.id, self.h)
            return node
        if hasattr(builtins, node.id):
            return node
        raise _NotFlat(f"unknown name {node.id} in {self.h.name}")

    def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
        self.generic_visit(node)
        if (isinstance(node.value, ast.Tuple) and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, int) and not isinstance(node.slice.value, bool)
                and all(isinstance(v, ast.Constant) for v in node.value.elts)):
            try:
                return ast.Constant(node.value.elts[node.slice.value].value)  # EXPF_P[0] -> its value
            except IndexError:
                return node
        return node


class _Selects(ast.NodeTransformer):
    """``a if a > b else b`` as ``max(b, a)`` and ``a if a < b else b`` as ``min(b, a)`` for
    variables and numbers ``a``, ``b``: Numba's ``max``/``min`` of two scalars are exactly that
    select (``v if v > acc else acc``, NaN and signed zeros included), without the branch, so
    the function has fewer blocks to put in SSA form and type (``row_max``'s 8-lane maxima)."""

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        self.generic_visit(node)
        t = node.test
        if (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], (ast.Gt, ast.Lt))
                and _same_simple(t.left, node.body) and _same_simple(t.comparators[0], node.orelse)):
            fn = "max" if isinstance(t.ops[0], ast.Gt) else "min"
            return ast.Call(ast.Name(fn, ast.Load()), [node.orelse, node.body], [])
        return node


def _same_simple(a: ast.expr, b: ast.expr) -> bool:
    if isinstance(a, ast.Name) and isinstance(b, ast.Name):
        return a.id == b.id
    return (isinstance(a, ast.Constant) and isinstance(b, ast.Constant) and type(a.value) is type(b.value)
            and isinstance(a.value, (int, float)) and repr(a.value) == repr(b.value))  # -0.0 is not 0.0


def _has_return(nodes: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Return) for s in nodes for n in ast.walk(s))


def _flatten(stmts: list[ast.stmt], target: ast.Name) -> list[ast.stmt]:
    """``stmts`` (a helper's body) with each ``return e`` as ``target = e``: early returns in an
    ``if`` become an ``if``/``else`` around the rest. Every path must end in a return."""
    out: list[ast.stmt] = []
    for i, st in enumerate(stmts):
        if isinstance(st, ast.Return):
            if st.value is None:
                raise _NotFlat("bare return")
            out.append(ast.Assign([ast.Name(target.id, ast.Store())], st.value))
            return out
        if isinstance(st, ast.If) and _has_return([st]):
            body = _flatten(st.body, target) if _ends(st.body) else None
            if body is None:
                raise _NotFlat("return inside an if that does not end in one")
            rest = stmts[i + 1:] if not st.orelse else st.orelse
            if st.orelse and stmts[i + 1:]:
                raise _NotFlat("statements after an if/else that returns")
            out.append(ast.If(st.test, body, _flatten(rest, target)))
            return out
        if _has_return([st]):
            raise _NotFlat("return inside a loop")
        out.append(st)
    raise _NotFlat("a path without a return")


def _ends(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and (isinstance(stmts[-1], ast.Return) or isinstance(stmts[-1], ast.If))


def _imported_helpers(tree: ast.Module) -> dict[str, Any]:
    """Names the kernel imports from the runtime modules -> the objects."""
    import importlib

    names: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in RUNTIME_MODULES and node.level == 0:
            mod = importlib.import_module(node.module)
            for alias in node.names:
                obj = getattr(mod, alias.name, None)
                if obj is not None:
                    names[alias.asname or alias.name] = obj
    return names


def expand(source: str) -> str:
    """``source`` with the runtime helpers its functions call inlined as text (unchanged when
    it calls none)."""
    tree = ast.parse(source)
    names = _imported_helpers(tree)
    if not any(_inline_always(o) for o in names.values()):
        return source
    x = _Expander(names)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    first_def = None
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
        first_def = start if first_def is None else min(first_def, start)
        before = x.count
        new = x.stmt(copy.deepcopy(node), names)
        if x.count == before:
            continue
        (fdef,) = new
        if "max" not in names and "min" not in names:  # the builtins, not shadowed in the module
            fdef = _Selects().visit(fdef)
        text = ast.unparse(ast.fix_missing_locations(fdef)) + "\n"
        edits.append((start, node.end_lineno, text))
    if not edits:
        return source
    for start, end, text in reversed(edits):
        lines[start:end] = [text]
    imports = _import_lines(x.imports, tree)
    if imports and first_def is not None:
        lines.insert(first_def, imports)
    return "".join(lines)


def _import_lines(refs: dict[tuple[str, str, bool], None], tree: ast.Module) -> str:
    """Import statements for the globals the expanded text uses that ``tree`` does not import."""
    have = {(n.module, a.asname or a.name) for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    have |= {(a.name, a.asname or a.name) for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    out = set()
    for module, name, is_module in refs:
        if (module, name) in have:
            continue
        if is_module:
            out.add(f"import {module}" + (f" as {name}" if module != name else "") + "\n")
        else:
            out.add(f"from {module} import {name}\n")
    return "".join(sorted(out)) + ("\n" if out else "")
