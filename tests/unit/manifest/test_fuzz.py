"""Fuzzed manifests raise nothing but located ManifestErrors, fast; what validates, runs.

Two fuzzers. The first feeds the loader arbitrary text and YAML fragment soups (hypothesis).
The second mutates the project's own manifests (``examples/*.yml``, the manifest templates in
``caramba/assets/manifest/`` and the manifests written in these tests): it deletes, duplicates
and swaps keys and values, puts extreme values in (0, -1, 2**64, 1e308, nan, inf, true, "",
long strings, lists, mappings, null), changes types, truncates the text, plants YAML alias
bombs, deep nesting, unicode and lone surrogates, costly ``${...}`` expressions, tuner arms,
backend specs and ``--set`` overrides. Each mutant is checked the way ``caramba manifest
validate`` checks a file (``compile.check``) in a worker process with a watchdog, so a hang
fails the test instead of hanging it. It asserts:

- no traceback: every refusal is a ManifestError (a CarambaError) with a line or dotted path;
- no hang and no validation slower than ``MAX_CHECK_S`` (CPU seconds of the worker, so other
  load on the machine does not count);
- what validates, runs: a seeded sample of the mutants that validate runs one training step on
  the cpu backend and every run finishes. Size rule for that sample (documented, so a run stays
  a few seconds): experiments only, at most ``RUN_MAX_PARAMS`` parameters and ``RUN_MAX_RUNS``
  planned runs, no run that starts from a checkpoint (found in the run store only when it
  runs); mutants of a seed manifest that does not itself run here (a backend bug) are left out
  and counted. A run that ran and diverged (the loss or a metric became nan under a finite but
  huge learning rate) is counted apart: validation checks values, not the arithmetic they cause.
  So is a run refused with a ResourceError (its compiled step needs more working memory than
  this host has: a 65,536 batch): validation bounds each value, not the machine a run lands on;
  the run must fail at once with that error, not crash or retry.

The quick tests check ``FAST_MUTANTS`` mutants and run ``FAST_RUNS``; the slow ones check
``SLOW_MUTANTS`` with a fixed seed (about 70 s on one core) and run ``SLOW_RUNS`` (about 2
minutes): ``pytest -m slow tests/unit/manifest/test_fuzz.py``, or ``-m 'not slow'`` to skip them.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import os
import random
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caramba.manifest import ManifestError, load_string

REPO = Path(__file__).resolve().parents[3]
WORKER = Path(__file__).with_name("_fuzz_worker.py")

FAST_MUTANTS = 300
SLOW_MUTANTS = 10_000
FAST_RUNS = 4
SLOW_RUNS = 200
MAX_CHECK_S = 2.0  # CPU seconds one validation may take
HANG_S = 30.0  # wall seconds before a request counts as hung and the worker is killed
RUN_HANG_S = 300.0
RUN_MAX_PARAMS = 2_000_000
RUN_MAX_RUNS = 4
# A run whose numbers overflow (a finite but huge lr or weight decay) fails after it ran: the
# values were valid, the arithmetic diverged. Counted and reported, not a validation miss.
DIVERGED = re.compile(r"the loss became|invariant finite_metrics: metric '[\w.]+' is (nan|-?inf)")
TOO_BIG_HERE = re.compile(r"^ResourceError: the compiled graph needs [\d.]+ GiB of working memory")
# A statistical estimator whose mutated data admit no unique solution (a collinear design): like a
# diverged loss, a property of the numbers that only running finds, reported by the run as such.
NO_ESTIMATE = re.compile(r"^EstimationError: causal\.\w+ \(node \w+\): Singular matrix")

# ---- text fuzzers of the loader ------------------------------------------------------------

FRAGMENTS = [
    "variables:", "  n: 4", "  d: [1, 2]", "a: ${n}", "b: '${n * 2}'", "c: ${d.1}", "x: ${", "y: '${nope}'",
    "nodes:", "  - repeat: 3", "    template:", "      - {id: 'l${i}'}", "    index: j", "    offset: ${n}",
    "  - !include missing", "  - {include: a.b, variables: {k: 1}}", "k: &a [1, *a]", "m: {<<: {a: 1}, b: 2}",
    "z: !!binary aGk=", "'q': [", "]", "- 1", "  - {", "t: 2020-02-31", "f: 1e309", "e: $${x}", "w: ${n // 0}",
    "r: {repeat: 99999, template: [1]}", "o: {repeat: '${d}', template: [1]}", "\t", "  ", ":", "? [1]\n: 2",
    "u: ${a.b.c.d}", "v: '${n}${n}'", "s: ${n.0}", "g: !include ../x", "  sq: ${n * n * n * n}",
    "  big: ${99999999999999999999 * 99999999999999999999}", "h: ${((((((((n))))))))}", "p: ${-n - -n}",
]


def _check_text(text: str) -> None:
    try:
        load_string(text, "fuzz.yml")
    except ManifestError as exc:
        assert exc.file is not None and exc.line is not None, f"error without a location: {exc}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_arbitrary_text(text):
    _check_text(text)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=14))
def test_fragment_soup(lines):
    _check_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("depth", [50, 300, 5000])
def test_deep_nesting(depth):
    _check_text("a: " + "[" * depth + "]" * depth + "\n")


def test_alias_bomb():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    with pytest.raises(ManifestError, match="more than 65536 nodes"):
        load_string("\n".join(lines) + "\n")


# ---- the seed manifests ---------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """A manifest the project ships or tests, as text, with where it is loaded from."""

    name: str
    text: str
    source: str
    root: str


def seed_manifests() -> list[Seed]:
    from caramba.manifest.registry import asset_root, registry, template_text

    out = []
    examples = REPO / "examples"  # examples/*.yml and examples/<name>/manifest.yml (with its assets/ folder)
    for path in sorted(examples.glob("*.yml")) + sorted(examples.glob("*/manifest.yml")):
        out.append(Seed(str(path.relative_to(examples)), path.read_text(encoding="utf-8"), str(path), str(path.parent)))
    for asset in registry().list("manifest"):
        out.append(Seed(asset.op, template_text(asset), asset.file, str(asset_root())))
    here = Path(__file__).parent
    for path in sorted(here.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                    and "topology:" in node.value.value):
                out.append(Seed(f"{path.name}:{node.lineno}:{node.targets[0].id}", node.value.value, "<string>", str(here)))
    return out


# ---- mutations ------------------------------------------------------------------------------


class _Tagged(str):
    """An ``!include`` scalar kept through a parse/dump round trip."""


class _TagLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


class _TagDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    pass


_TagLoader.add_constructor("!include", lambda loader, node: _Tagged(loader.construct_scalar(node)))
_TagDumper.add_representer(_Tagged, lambda dumper, data: dumper.represent_scalar("!include", str(data)))

LONG = "x" * 100_000
TREE_LIMIT = 200_000  # a mutant tree larger than this, expanded, is only edited as text
EXTREMES: list[Any] = [
    0, -1, 1, 2, 3, 7, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**100, 1e308, -1e308, 5e-324,
    1e-12, 0.5, -0.5, 1.5, math.nan, math.inf, -math.inf, True, False, None, "", "0", "1e3", "nan", "yes", "null",
    LONG, "\U0001f986", "a b", "x.y", "cpu", "${hidden}", "$${x}", [], [0], [1, 2, 3], [[]], [None], {}, {"a": 1},
    {"op": "x"}, [2**64], [math.nan], ["a", "b"], 1 << 40, 100_000, 65_536, 4097,
]
BACKENDS = [
    "cpu", "cpu:threads=2", "cpu:threads=0", "cpu:threads=-1", "cpu:threads=99999999999999999999999", "cpu:debug",
    "cpu:debug=1", "cpu:nope", "cpu:threads", "cpu:threads=2,threads=3", "gpu", "", " ", "xla", "xla:cpu",
    "xla:sync,donate", "onnx:opt=all", "onnx:opt=max", "onnx:threads=1.5", "webgpu:precision=float32",
    "cuda:device=0", "cuda:compile_only", "tpu:cores=8", ":", "cpu:", "cpu:,,,", "cpu:threads=2:3", LONG[:5000],
    "cpu:threads=nan", "\U0001f986", "cpu:threads=1e3",
]
EXPRESSIONS = [
    "${2 ** 64}", "${1 << 64}", "${" + "9" * 5000 + "}", "${" + "(" * 120 + "1" + ")" * 120 + "}",
    "${" + "(" * 5000 + "1" + ")" * 5000 + "}", "${" + "-" * 5000 + "1}", "${1" + " * 2" * 3000 + "}",
    "${1" + " + 1" * 30000 + "}", "${1e308 * 10}", "${1 / 0}", "${1 // 0}", "${1 % 0}", "${0.0 / 0.0}",
    "${10 ** 10}", "${x.y.z}", "${__import__}", "${a if b else c}", "${[1] * 10}", "${'s' * 10}", "${v0 * 1e308}",
    "${v0 - v0}", "${v0 / 3}", "${v0 // 0.0}", "${-v0}", "${v0 * v0 * v0 * v0 * v0 * v0 * v0 * v0}",
    "${99999999999999999999 * 99999999999999999999}", "${9223372036854775807 + 1}", "${lambda: 0}", "${}", "${ }",
    "${v0}${v0}", "${v0 * 2}x", "${v0.0}",
]
UNICODE = ["\ud800", "\udfff", "\ufeff", "\u202e", "\u0000", "\x85", "\u2028", "e\u0301", "\U0001f986", "\uffff"]
PLAUSIBLE = [  # names a manifest may well hold instead of the one it has
    "optimizer.sgd", "optimizer.adam", "optimizer.lion", "optimizer.lamb", "optimizer.rmsprop", "optimizer.adagrad",
    "optimizer.adamax", "cosine", "constant", "float32", "float64", "int64", "eval", "train", "latest", "min", "max",
    "val.loss", "test.accuracy", "activation.relu", "activation.tanh", "norm.layer", "nn.dropout", "spirals", "xor",
    "regression", "iris", "wine", "breast_cancer", "tanh", "none", "normal", "zeros",
]
KEY_POOL = [
    "tuner", "targets", "checkpoints", "limit", "eval_batches", "precision", "disable_passes", "seed", "steps",
    "batch_size", "lr", "split", "feed", "delimiter", "context", "max_chars", "vocab_size", "n", "features",
    "classes", "length", "noise", "kind", "mode", "checkpoint", "backend", "runs", "dims", "dtype", "outputs",
    "version", "repeat", "template", "include", "variables", "config", "in", "out", "op", "id", "unknown_key",
]


def _paths(data: Any, limit: int = 5000) -> list[tuple]:
    """Paths of the values in ``data`` (each shared object once: alias bombs stay small)."""
    out: list[tuple] = []
    seen: set[int] = set()
    stack: list[tuple[tuple, Any]] = [((), data)]
    while stack and len(out) < limit:
        path, v = stack.pop()
        out.append(path)
        if isinstance(v, (dict, list)):
            if id(v) in seen:
                continue
            seen.add(id(v))
            items = v.items() if isinstance(v, dict) else enumerate(v)
            stack.extend(((*path, k), x) for k, x in reversed(list(items)))
    return out


def _expanded_size(data: Any, limit: int) -> int:
    """Values in ``data`` with aliases counted again at each use, up to ``limit`` + 1."""
    stack, count = [data], 0
    while stack and count <= limit:
        v = stack.pop()
        count += 1
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return count


def _get(data: Any, path: tuple) -> Any:
    for p in path:
        data = data[p]
    return data


def _set(data: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    _get(data, path[:-1])[path[-1]] = value
    return data


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 30).removesuffix("\n...\n").strip()


@dataclass
class Mutant:
    seed: Seed
    ops: list[str]
    text: str
    overrides: list[str] = field(default_factory=list)

    def request(self, op: str = "check") -> dict:
        return {"op": op, "text": self.text, "source": self.seed.source, "root": self.seed.root,
                "overrides": self.overrides}


class Mutator:
    """Seeded mutations of manifest text (tree edits through a YAML round trip, and raw text edits)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def value(self) -> Any:
        r = self.rng
        v = r.choice(EXTREMES)
        if r.random() < 0.15:
            v = r.choice([r.randint(-5, 5000), r.uniform(-2, 2), r.choice(["digits", "x", "loss", "y", "float32"])])
        return copy.deepcopy(v)

    def mutant(self, seed: Seed) -> Mutant:
        m = Mutant(seed, [], seed.text)
        for _ in range(self.rng.choice((1, 1, 1, 2, 2, 3))):
            op = self.rng.choice(self.OPS)
            m.ops.append(op.__name__)
            op(self, m)
        return m

    # -- tree edits ------------------------------------------------------------------------
    def _tree(self, m: Mutant) -> Any:
        try:
            data = yaml.load(m.text, Loader=_TagLoader)
        except (yaml.YAMLError, RecursionError, ValueError):  # a lone surrogate does not encode
            return None
        if not isinstance(data, dict) or _expanded_size(data, TREE_LIMIT) > TREE_LIMIT:
            return None  # an alias bomb: edit its text only (str() or a copy of it would explode)
        return data

    def _dump(self, m: Mutant, data: Any) -> None:
        try:
            m.text = yaml.dump(data, Dumper=_TagDumper, sort_keys=False, allow_unicode=True, width=120)
        except (yaml.YAMLError, RecursionError, ValueError):
            pass

    def _edit(self, m: Mutant, fn) -> None:
        data = self._tree(m)
        if data is None:
            return self.text_char(m)
        data = fn(data, _paths(data)[1:] or [()])
        self._dump(m, data)

    def replace_scalar(self, m: Mutant) -> None:
        def fn(data, paths):
            leaves = [p for p in paths if not isinstance(_get(data, p), (dict, list))] or paths
            return _set(data, self.rng.choice(leaves), self.value())
        self._edit(m, fn)

    def nudge(self, m: Mutant) -> None:
        """A plausible edit: a number halved, doubled or set small, a name swapped for a valid one."""
        def fn(data, paths):
            leaves = [p for p in paths if not isinstance(_get(data, p), (dict, list))] or paths
            p = self.rng.choice(leaves)
            v = _get(data, p)
            if isinstance(v, bool):
                new: Any = not v
            elif isinstance(v, int):
                new = self.rng.choice([v // 2, v * 2, v + 1, max(v - 1, 0), 1, 2, 0])
            elif isinstance(v, float):
                new = self.rng.choice([v / 2, v * 2, v * 10, 0.0, 0.5, 1.0])
            else:
                new = self.rng.choice(PLAUSIBLE)
            return _set(data, p, new)
        self._edit(m, fn)

    def replace_any(self, m: Mutant) -> None:
        self._edit(m, lambda data, paths: _set(data, self.rng.choice(paths), self.value()))

    def delete_key(self, m: Mutant) -> None:
        def fn(data, paths):
            p = self.rng.choice(paths)
            if p:
                parent = _get(data, p[:-1])
                del parent[p[-1]]
            return data
        self._edit(m, fn)

    def swap_values(self, m: Mutant) -> None:
        def fn(data, paths):
            a, b = self.rng.choice(paths), self.rng.choice(paths)
            if not a or not b or a[: len(b)] == b or b[: len(a)] == a:
                return data
            va, vb = copy.deepcopy(_get(data, a)), copy.deepcopy(_get(data, b))
            _set(data, a, vb)
            _set(data, b, va)
            return data
        self._edit(m, fn)

    def change_type(self, m: Mutant) -> None:
        def fn(data, paths):
            p = self.rng.choice(paths)
            v = _get(data, p)
            if isinstance(v, bool):
                new: Any = int(v)
            elif isinstance(v, int):
                new = self.rng.choice([str(v), float(v), [v], bool(v), {"value": v}])
            elif isinstance(v, float):
                new = self.rng.choice([str(v), int(v) if math.isfinite(v) else 0, [v], True])
            elif isinstance(v, str):
                new = self.rng.choice([[v], {v: v}, len(v), v.upper(), v + "_", v[:-1]])
            elif isinstance(v, list):
                new = self.rng.choice([{str(i): x for i, x in enumerate(v)}, v[:1] if v else 0, v * 2, v[::-1]])
            elif isinstance(v, dict):
                new = self.rng.choice([list(v.values()), list(v), str(v), {}])
            else:
                new = self.value()
            return _set(data, p, new)
        self._edit(m, fn)

    def add_key(self, m: Mutant) -> None:
        def fn(data, paths):
            maps = [p for p in [(), *paths] if isinstance(_get(data, p), dict)]
            _get(data, self.rng.choice(maps))[self.rng.choice(KEY_POOL)] = self.value()
            return data
        self._edit(m, fn)

    def deep_nest(self, m: Mutant) -> None:
        def fn(data, paths):
            depth = self.rng.choice((40, 150, 199, 201, 1000, 5000))
            v: Any = self.value()
            for _ in range(depth):
                v = [v] if self.rng.random() < 0.5 else {"a": v}
            return _set(data, self.rng.choice(paths), v)
        self._edit(m, fn)

    def backend(self, m: Mutant) -> None:
        def fn(data, paths):
            spec = self.rng.choice(BACKENDS)
            targets = data.get("targets")
            if isinstance(targets, list) and targets and isinstance(targets[0], dict):
                targets[0]["backend"] = spec
            else:
                data["targets"] = [{"name": "t", "backend": spec, "runs": [{"id": "r", "seed": self.rng.choice((0, 1))}]}]
            return data
        self._edit(m, fn)

    def seed_value(self, m: Mutant) -> None:
        def fn(data, paths):
            seeds = [p for p in paths if p and p[-1] == "seed"]
            v = self.rng.choice([-1, 0, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63), True, 1.5, math.nan, "0"])
            return _set(data, self.rng.choice(seeds), v) if seeds else data
        self._edit(m, fn)

    def tuner(self, m: Mutant) -> None:
        def fn(data, paths):
            scalars = [_dotted(p) for p in paths if p and not isinstance(_get(data, p), (dict, list))]
            keys = [*scalars, "variables.hidden", "trainer.lr", "nope.x", "trainer", "variables", "trainer.steps",
                    "topology.nodes.0.config.out_features", "targets.0.runs.0.seed", "tuner.arms", ""]
            arms = []
            for i in range(self.rng.choice((1, 2, 3, 40))):
                k = self.rng.choice(keys)
                arms.append({"id": self.rng.choice((f"a{i}", "a0", "x y")), "set": {k: self.value()}})
            data["tuner"] = {"metric": self.rng.choice(("val.loss", "loss", "")), "arms": arms}
            return data
        self._edit(m, fn)

    def dataset_option(self, m: Mutant) -> None:
        def fn(data, paths):
            ds = data.get("datasets")
            if not isinstance(ds, dict) or not ds:
                return data
            spec = next(iter(ds.values()))
            if not isinstance(spec, dict):
                return data
            key = self.rng.choice(["n", "features", "classes", "length", "noise", "limit", "seed", "delimiter",
                                   "split", "context", "max_chars", "vocab_size", "kind", "name", "path", "header"])
            choices = [0, 1, 2, -1, 10**7, 10**9, 2**63, math.nan, "", ",,", "\t", None, True, 1e308, 0.5,
                       {"train": math.nan, "val": 0.0, "test": 0.0}, {"train": 1.0, "val": 0.0, "test": 0.0},
                       {"train": 0.5, "val": 0.5, "test": 0.5}, {"train": 1e-9, "val": 0.0, "test": 1 - 1e-9},
                       {"train": 0.999, "val": 0.0005, "test": 0.0005}, "data/python_reference.txt", "/dev/zero",
                       "../../etc/passwd", "data", "x" * 5000]
            spec[key] = copy.deepcopy(self.rng.choice(choices))
            return data
        self._edit(m, fn)

    def override(self, m: Mutant) -> None:
        data = self._tree(m) or {}
        paths = [_dotted(p) for p in _paths(data)[1:] if not isinstance(_get(data, p), (dict, list))]
        path = self.rng.choice([*paths, "trainer.steps", "variables.hidden", "x", "trainer..lr", "a=b"] if paths else ["x"])
        m.overrides.append(f"{path}={self.rng.choice([_flow(self.value()), '', '[', '{a: ', '!!python/none', '.nan'])}")

    def expression(self, m: Mutant) -> None:
        def fn(data, paths):
            variables = data.get("variables") if isinstance(data.get("variables"), dict) else {}
            data["variables"] = variables
            kind = self.rng.random()
            if kind < 0.3:  # a chain that squares a number again and again
                n = self.rng.choice((5, 29, 64))
                variables["v0"] = self.rng.choice((10, 2, 3.5, 2**62))
                for i in range(1, n + 1):
                    variables[f"v{i}"] = f"${{v{i - 1} * v{i - 1}}}"
                name = f"v{n}"
            elif kind < 0.4:  # a big value used again and again
                variables["v0"] = list(range(self.rng.choice((100, 5000, 30000))))
                variables["e"] = ["${v0}"] * self.rng.choice((2, 50, 500))
                name = "e"
            elif kind < 0.5:  # a long chain of references (deep resolution)
                n = self.rng.choice((100, 1000, 5000))
                variables["v0"] = 1
                for i in range(1, n + 1):
                    variables[f"v{i}"] = f"${{v{i - 1} + 1}}"
                name = f"v{n}"
            else:
                variables["v0"] = self.rng.choice((3, 2**62, 1e300, -7))
                variables["e"] = self.rng.choice(EXPRESSIONS)
                name = "e"
            leaves = [p for p in paths if p and p[0] != "variables" and not isinstance(_get(data, p), (dict, list))]
            if leaves:
                _set(data, self.rng.choice(leaves), f"${{{name}}}")
            return data
        self._edit(m, fn)

    # -- text edits ------------------------------------------------------------------------
    def truncate(self, m: Mutant) -> None:
        m.text = m.text[: self.rng.randrange(len(m.text) + 1)]

    def _lines(self, m: Mutant) -> list[str]:
        return m.text.split("\n")

    def line_edit(self, m: Mutant) -> None:
        lines = self._lines(m)
        i = self.rng.randrange(len(lines))
        what = self.rng.randrange(5)
        if what == 0:
            del lines[i]
        elif what == 1:
            lines.insert(i, lines[i])  # a duplicated key or list item
        elif what == 2:
            j = self.rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif what == 3:
            lines[i] = " " * self.rng.choice((1, 2, 3, 8)) + lines[i]
        else:
            lines[i] = lines[i].replace("  ", "\t", 1)
        m.text = "\n".join(lines)

    def text_char(self, m: Mutant) -> None:
        i = self.rng.randrange(len(m.text) + 1)
        c = self.rng.choice(list(":-[]{}&*!|>'\"%@`#,?$\\\n ") + UNICODE)
        m.text = m.text[:i] + c + m.text[i + self.rng.choice((0, 1)):]

    def unicode(self, m: Mutant) -> None:
        def fn(data, paths):
            strs = [p for p in paths if isinstance(_get(data, p), str)] or paths
            c = self.rng.choice(UNICODE)
            p = self.rng.choice(strs)
            v = _get(data, p)
            return _set(data, p, (v if isinstance(v, str) else "") + c)
        if self.rng.random() < 0.5:
            self._edit(m, fn)
        else:  # escaped in a double-quoted scalar: YAML allows \ud800, which reads as a lone surrogate
            esc = self.rng.choice(['"\\ud800"', '"\\udfff x"', '"\\U0001F986"', '"\\0"', '"\\x85"', '"\\uFEFF"'])
            lines = self._lines(m)
            cand = [i for i, line in enumerate(lines) if ": " in line and not line.rstrip().endswith(":")]
            if cand:
                i = self.rng.choice(cand)
                lines[i] = lines[i][: lines[i].index(": ") + 2] + esc
            m.text = "\n".join(lines)

    def alias_bomb(self, m: Mutant) -> None:
        width, depth = self.rng.choice(((10, 9), (2, 40), (100, 4), (3, 3)))
        bomb = [f"  b0: &b0 [{', '.join(['x'] * width)}]"]
        for i in range(1, depth):
            bomb.append(f"  b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * width)}]")
        where = self.rng.random()
        if where < 0.4:
            m.text = "variables:\n" + "\n".join(bomb) + f"\n  boom: ${{b{depth - 1}}}\n" + m.text.replace("variables:", "zvariables:", 1)
            lines = self._lines(m)
            cand = [i for i, line in enumerate(lines) if ": " in line and i > depth + 1]
            if cand:
                i = self.rng.choice(cand)
                lines[i] = lines[i][: lines[i].index(": ") + 2] + "${boom}"
            m.text = "\n".join(lines)
        else:
            m.text = "bombs:\n" + "\n".join(bomb) + f"\ndescription: *b{depth - 1}\n" + m.text

    def anchors(self, m: Mutant) -> None:
        lines = self._lines(m)
        cand = [i for i, line in enumerate(lines) if ": " in line]
        if len(cand) >= 2:
            a, b = self.rng.sample(cand, 2)
            la, lb = lines[a], lines[b]
            lines[a] = la[: la.index(": ") + 2] + "&anc " + la[la.index(": ") + 2 :]
            lines[b] = lb[: lb.index(": ") + 2] + self.rng.choice(("*anc", "*nope", "&anc *anc", "!!merge *anc"))
        m.text = "\n".join(lines)

    OPS = [nudge, nudge, nudge, nudge, replace_scalar, replace_scalar, replace_scalar, replace_any, delete_key, delete_key, swap_values,
           change_type, change_type, add_key, deep_nest, backend, seed_value, tuner, dataset_option, dataset_option,
           override, expression, expression, truncate, line_edit, line_edit, text_char, unicode, alias_bomb, anchors]


def mutants(seed: int) -> Iterator[Mutant]:
    """An endless, seeded stream of mutants of the seed manifests."""
    rng = random.Random(seed)
    seeds = seed_manifests()
    mut = Mutator(rng.randrange(1 << 30))
    while True:
        yield mut.mutant(rng.choice(seeds))


# ---- the worker with a watchdog -------------------------------------------------------------


class Worker:
    """A ``_fuzz_worker.py`` process; a request that takes longer than its limit kills it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.buf = b""
        self.restarts = 0

    def _start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
            env.setdefault(var, "1")
        self.proc = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=str(REPO))
        self.buf = b""
        if self._line(120.0) is None:
            raise RuntimeError("the fuzz worker did not start")

    def _line(self, timeout: float) -> dict | None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None  # the worker died (e.g. a crash in C code)
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def ask(self, req: dict, timeout: float = HANG_S) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
            answer = self._line(timeout)
        except BrokenPipeError:
            answer = None
        if answer is None:
            crashed = self.proc.poll() is not None
            self.close()
            self.restarts += 1
            return {"status": "crash" if crashed else "hang", "wall": time.perf_counter() - t0, "cpu": 0.0}
        return answer

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@dataclass
class Report:
    mutants: int = 0
    ok: int = 0
    errors: int = 0
    bad: list[tuple[Mutant, dict]] = field(default_factory=list)  # tracebacks, hangs, crashes, slow, unlocated
    max_cpu: float = 0.0
    max_wall: float = 0.0
    valid: list[tuple[Mutant, dict]] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, m: Mutant, a: dict) -> None:
        self.mutants += 1
        self.max_cpu = max(self.max_cpu, a.get("cpu", 0.0))
        self.max_wall = max(self.max_wall, a.get("wall", 0.0))
        st_ = a["status"]
        if st_ == "ok":
            self.ok += 1
            self.valid.append((m, a))
        elif st_ == "error" and a.get("located") and a.get("type") == "ManifestError":
            self.errors += 1
        else:
            self.bad.append((m, a))
            return
        if a["cpu"] > MAX_CHECK_S:
            self.bad.append((m, dict(a, status="slow")))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, a in self.bad:
            key = a["status"] if a["status"] != "error" else f"unlocated {a.get('type')}"
            out[key] = out.get(key, 0) + 1
        return out

    def describe(self, limit: int = 8) -> str:
        lines = [f"{self.mutants} mutants in {self.seconds:.0f} s: {self.ok} validate, {self.errors} located "
                 f"ManifestErrors, problems {self.counts()}; max validation {self.max_cpu:.2f} s CPU, "
                 f"{self.max_wall:.2f} s wall"]
        for m, a in self.bad[:limit]:
            lines.append(f"- {a['status']} {a.get('type', '')} on {m.seed.name} after {m.ops} "
                         f"{m.overrides}: {a.get('message', '')[:300]}")
            if a.get("traceback"):
                lines.append("  " + a["traceback"].strip().splitlines()[-3].strip()[:200])
        return "\n".join(lines)


def fuzz(count: int, seed: int, until: Callable[[Report], bool] | None = None) -> Report:
    """Check ``count`` mutants (fewer if ``until(report)`` says stop) in a watched worker."""
    rep = Report()
    worker = Worker()
    t0 = time.perf_counter()
    try:
        for m in mutants(seed):
            if rep.mutants >= count or (until is not None and until(rep)):
                break
            rep.add(m, worker.ask(m.request()))
    finally:
        worker.close()
    rep.seconds = time.perf_counter() - t0
    return rep


def _why_not_run(a: dict) -> str:
    """The size rule for the run check ('' when the mutant is run)."""
    if not a["experiment"]:
        return "model only"
    if a["params"] > RUN_MAX_PARAMS:
        return f"> {RUN_MAX_PARAMS} parameters"
    if a["checkpoints"]:
        return "starts from a checkpoint (looked up in the run store when it runs)"
    return f"> {RUN_MAX_RUNS} runs" if a["runs"] > RUN_MAX_RUNS else ""


def run_sample(rep: Report, count: int, seed: int) -> tuple[int, list[str], dict[str, int]]:
    """Run one step of up to ``count`` validated mutants (seeded choice); returns (ran, failures, left out)."""
    rng = random.Random(seed)
    left_out: dict[str, int] = {}
    candidates = []
    for m, a in rep.valid:
        why = _why_not_run(a)
        if why:
            left_out[why] = left_out.get(why, 0) + 1
        else:
            candidates.append(m)
    rng.shuffle(candidates)
    worker = Worker()
    seeds_run: dict[str, bool] = {}
    ran, failures = 0, []
    try:
        for m in candidates:
            if ran >= count:
                break
            if m.seed.name not in seeds_run:
                a = worker.ask(Mutant(m.seed, [], m.seed.text).request("run"), RUN_HANG_S)
                seeds_run[m.seed.name] = a["status"] == "ok" and all(r["status"] == "finished" for r in a["runs"])
            if not seeds_run[m.seed.name]:
                left_out["seed does not run here"] = left_out.get("seed does not run here", 0) + 1
                continue
            a = worker.ask(m.request("run"), RUN_HANG_S)
            ran += 1
            bad = [r["error"] for r in a.get("runs", []) if r["status"] != "finished"]
            if a["status"] == "ok" and bad and all(DIVERGED.search(e) for e in bad):
                left_out["ran and diverged"] = left_out.get("ran and diverged", 0) + 1
            elif a["status"] == "ok" and bad and all(TOO_BIG_HERE.search(e) for e in bad):
                left_out["too big for this host"] = left_out.get("too big for this host", 0) + 1
            elif a["status"] == "ok" and bad and all(NO_ESTIMATE.search(e) for e in bad):
                left_out["the data admit no estimate"] = left_out.get("the data admit no estimate", 0) + 1
            elif a["status"] != "ok" or bad:
                errs = a.get("message") or "; ".join(bad)
                failures.append(f"{m.seed.name} after {m.ops} {m.overrides}: {a['status']}: {errs[:400]}")
    finally:
        worker.close()
    return ran, failures, left_out


# ---- the tests ------------------------------------------------------------------------------


def test_seed_manifests_are_found():
    names = [s.name for s in seed_manifests()]
    assert "digits_mlp.yml" in names and "manifest.train" in names and any(n.startswith("test_experiment.py:") for n in names)
    assert "own_block/manifest.yml" in names  # an example in a folder of its own (with its assets/)


def _assert_clean(rep: Report) -> None:
    print(rep.describe())
    assert not rep.bad, rep.describe()
    assert rep.ok and rep.errors


def test_mutants_of_the_project_manifests():
    _assert_clean(fuzz(FAST_MUTANTS, seed=1))


@pytest.mark.slow
def test_ten_thousand_mutants():
    _assert_clean(fuzz(SLOW_MUTANTS, seed=20261201))


def _assert_runs(count: int, seed: int) -> None:
    def enough(rep: Report) -> bool:  # twice the candidates needed: some seeds may not run here
        return sum(1 for _, a in rep.valid if not _why_not_run(a)) >= 2 * count

    rep = fuzz(count * 60, seed, until=enough)
    ran, failures, left_out = run_sample(rep, count, seed)
    print(f"{ran} validated mutants ran one step; left out {left_out}")
    assert not failures, "\n".join(failures[:10])
    assert ran >= min(count, 3)


def test_what_validates_runs():
    _assert_runs(FAST_RUNS, seed=2)


@pytest.mark.slow
def test_what_validates_runs_200():
    _assert_runs(SLOW_RUNS, seed=20261202)
