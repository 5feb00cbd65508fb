"""The program validator: every bad form is a ManifestError at the right line (a table of hostile
programs), all problems are reported at once, and random mutations of the shipped programs only
ever raise ManifestError."""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path

import pytest

from caramba.manifest.errors import ManifestError
from caramba.manifest.loader import load_string
from caramba.manifest.registry import registry
from caramba.programs import load_program, validate_program
from caramba.programs.steps import STEPS

DOCS = Path(__file__).resolve().parents[3] / "docs" / "programs.md"

HEAD = """\
name: t
state:
  n: {type: counter}
  buf: {type: token_buffer}
  cache: {type: kv_cache, graph: lm, capacity: 16}
samplers:
  main: {type: categorical, temperature: 0.5}
graphs:
  lm: {type: language_model, model: null}
  other: {type: language_model}
  den: {type: denoiser}
program:
"""  # the program's steps start on line 13


def check(body: str) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        validate_program(load_string(HEAD + body, "p.yml"))
    return info.value


# (steps written from line 13, the line of the error, a fragment of its message)
BAD = [
    ("  - {id: a, op: io.emit_txt, config: {text: hi}}\n", 13, "unknown step op 'io.emit_txt'; did you mean 'io.emit_text'"),
    ("  - id: a\n    op: io.emit_text\n    inputs: {text: nowhere}\n", 15, "unknown variable 'nowhere'"),
    ("  - id: a\n    op: io.emit_text\n    inputs: {text: later}\n"
     "  - id: b\n    op: value.assign\n    config: {value: 1}\n    outputs: {value: later}\n",
     15, "reads 'later' before it is assigned (step 'b' at line 16"),
    ("  - id: a\n    op: state.reset\n    inputs: {state: cahce}\n", 15, "unknown state 'cahce'; did you mean 'cache'"),
    ("  - id: a\n    op: state.append\n    inputs: {state: n, item: n}\n", 15, "takes a token_buffer state; 'n' is a counter"),
    ("  - id: a\n    op: tokenizer.special\n    config: {graph: lmm}\n", 15, "unknown graph 'lmm'"),
    ("  - id: a\n    op: tokenizer.special\n    config: {graph: den}\n", 15, "graph 'den' is a denoiser; this needs a language_model"),
    ("  - id: a\n    op: value.assign\n    config: {value: 1}\n    outputs: {value: x}\n"
     "  - id: b\n    op: sampler.next_token\n    inputs: {logits: x}\n    config: {sampler: mian}\n",
     20, "unknown sampler 'mian'"),
    ("  - id: a\n    op: control.loop_count\n    config: {cuont: 3}\n    body: [{id: b, op: io.emit_text, config: {text: x}}]\n",
     15, "unknown key 'cuont'"),
    ("  - id: a\n    op: control.loop_count\n    config: {count: three}\n    body: [{id: b, op: io.emit_text, config: {text: x}}]\n",
     15, "'count' must be an int, got 'three'"),
    ("  - id: a\n    op: control.loop_count\n    config: {count: -1}\n    body: [{id: b, op: io.emit_text, config: {text: x}}]\n",
     15, "'count' must be in [0, 1e+09]"),
    ("  - id: a\n    op: control.loop_count\n    config: {count: true}\n    body: [{id: b, op: io.emit_text, config: {text: x}}]\n",
     15, "must be an int, got True"),
    ("  - {id: a, op: value.assign, config: {value: true}, outputs: {value: c}}\n"
     "  - {id: b, op: control.break_if, inputs: {condition: c}}\n", 14, "control.break_if is outside a loop"),
    ("  - {id: a, op: value.assign, config: {value: true}, outputs: {value: c}}\n"
     "  - {id: b, op: control.continue_if, inputs: {condition: c}}\n", 14, "control.continue_if is outside a loop"),
    ("  - id: a\n    op: control.loop_until\n    body: [{id: b, op: io.emit_text, config: {text: x}}]\n",
     13, "missing required key 'max'"),
    ("  - id: a\n    op: control.loop_count\n    config: {count: 2}\n", 13, "needs a body"),
    ("  - id: a\n    op: io.emit_text\n    config: {text: x}\n    body: []\n", 16, "takes no body"),
    ("  - {id: a, op: io.emit_text, config: {text: x}}\n  - {id: a, op: io.emit_text, config: {text: y}}\n",
     14, "step id 'a' is used twice (first at line 13)"),
    ("  - {id: a, op: io.emit_text, config: {text: x}, input: {}}\n", 13, "unknown step key 'input'; did you mean 'inputs'"),
    ("  - {id: 1a, op: io.emit_text, config: {text: x}}\n", 13, "every step needs an id"),
    ("  - {id: a, op: io.emit_text}\n", 13, "from input 'text' or from config 'text', exactly one of them (neither"),
    ("  - id: a\n    op: io.read_line\n    outputs: {line: n}\n", 15, "writes 'n', which is a state"),
    ("  - id: a\n    op: value.append\n    inputs: {list: buf, item: n}\n", 15, "writes its list back to 'buf', which is a state"),
    ("  - id: a\n    op: io.emit_text\n    inputs: {text: cache}\n", 15, "'cache' is a kv_cache state"),
    ("  - id: a\n    op: graph.call\n    config: {graph: lm}\n    inputs: {tokens: n}\n    outputs: {prediction: p}\n",
     16, "graph.call of a language_model graph takes inputs ['cache', 'tokens']"),
    ("  - id: a\n    op: graph.call\n    config: {graph: lm}\n    inputs: {tokens: n, cache: cache, colour: n}\n",
     16, "graph.call has no input 'colour'"),
    ("  - id: a\n    op: io.emit_text\n    inputs: {text: [a, b]}\n", 15, "must name a variable or state"),
    ("  - id: a\n    op: graph.call\n    config: {graph: other}\n    inputs: {tokens: n, cache: cache}\n"
     "    outputs: {logits: l}\n", 16, "cache 'cache' holds the keys and values of graph 'lm', not of 'other'"),
    ("  - id: a\n    op: io.emit_text\n    inputs: [text]\n", 15, "inputs maps port names to variable names"),
    ("  - id: a\n    op: state.update\n", 13, "needs input 'state'"),
    ("  - 7\n", 13, "a step is a mapping"),
]


@pytest.mark.parametrize(("body", "line", "fragment"), BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_each_bad_step_is_a_manifest_error_at_its_line(body, line, fragment):
    err = check(body)
    assert err.line == line, (str(err), line)
    assert fragment in err.message, str(err)


SECTIONS = [
    ("name: t\nprogram: []\n", 2, "program must be a non-empty list"),
    ("name: t\n", 1, "missing section 'program'"),
    ("name: t\ntopology: {}\nprogram: [{id: a, op: io.emit_text, config: {text: x}}]\n", 2,
     "unknown section 'topology'"),
    ("name: t\nstate:\n  s: {type: ring_buffer}\nprogram: [{id: a, op: io.emit_text, config: {text: x}}]\n", 3,
     "state.s needs a type, one of token_buffer, kv_cache, counter, token_stream"),
    ("name: t\nstate:\n  s:\n    type: kv_cache\n    graph: lm\nprogram: [{id: a, op: io.emit_text, config: {text: x}}]\n",
     3, "missing required key 'capacity'"),
    ("name: t\nstate:\n  s: {type: kv_cache, graph: nope, capacity: 4}\nprogram: [{id: a, op: io.emit_text, config: {text: x}}]\n",
     3, "unknown graph 'nope'; the program declares no graphs"),
    ("name: t\nstate:\n  s: {type: counter, initial: 1.5}\nprogram: [{id: a, op: io.emit_text, config: {text: x}}]\n",
     3, "'initial' must be an int"),
    ("name: t\nsamplers:\n  s:\n    type: categorical\n    top_p: 0\nprogram: [{id: a, op: io.emit_text, config: {text: x}}]\n",
     5, "'top_p' must be in (0, 1]"),
    ("name: t\nsamplers:\n  s: {type: nucleus}\nprogram: [{id: a, op: io.emit_text, config: {text: x}}]\n",
     3, "samplers.s needs a type, one of greedy, categorical"),
    ("name: t\ngraphs:\n  g: {type: language_model, modle: x}\nprogram: [{id: a, op: io.emit_text, config: {text: x}}]\n",
     3, "unknown key 'modle'"),
    ("name: t\nmax_steps: 0\nprogram: [{id: a, op: io.emit_text, config: {text: x}}]\n", 2, "'max_steps' must be in"),
    ("- a\n- b\n", 1, "a manifest must be a mapping"),
    ("name: t\nprogram: [{id: a, op: io.emit_text, config: {text: x}\n", 3, "invalid YAML"),
]


@pytest.mark.parametrize(("text", "line", "fragment"), SECTIONS, ids=[f"{i}" for i in range(len(SECTIONS))])
def test_bad_sections_are_manifest_errors_at_their_line(text, line, fragment):
    with pytest.raises(ManifestError) as info:
        validate_program(load_string(text, "p.yml"))
    assert info.value.line == line, str(info.value)
    assert fragment in info.value.message, str(info.value)


def test_every_problem_is_reported_at_once():
    err = check("  - {id: a, op: io.emit_txt}\n"
                "  - {id: b, op: io.emit_text, inputs: {text: ghost}}\n"
                "  - {id: c, op: control.break_if, inputs: {condition: ghost}}\n")
    lines = sorted(e.line for e in err.problems)
    assert lines == [13, 14, 15, 15], [str(e) for e in err.problems]
    assert "(and 3 more problems:" in err.message and "p.yml:15:" in err.message


def test_the_shipped_programs_validate_and_are_runtime_assets():
    assert {a.op for a in registry().list("runtime")} >= {"runtime.chat", "runtime.diffusion"}
    chat = load_program("chat")
    assert {s.op for s in chat.walk()} >= {"io.read_line", "graph.call", "sampler.next_token", "tokenizer.stream_decode"}
    assert chat.state["cache"].type == "kv_cache" and chat.graphs["lm"].config["model"] is None
    diff = load_program("runtime.diffusion", {"variables.n": 4})
    assert [s.op for s in diff.walk()] == ["scheduler.timesteps", "control.loop_each", "graph.call", "scheduler.step",
                                           "io.write_image"]
    assert diff.walk()[0].config["n"] == 4


def test_overrides_are_checked_like_the_file():
    with pytest.raises(ManifestError, match="'top_p' must be in"):
        load_program("chat", ["variables.top_p=0"])
    with pytest.raises(ManifestError, match="'temperature' must be"):
        load_program("chat", {"variables.temperature": -1.0})


def test_every_step_op_has_a_docstring_and_a_row_in_the_docs():
    text = DOCS.read_text(encoding="utf-8")
    for op, spec in STEPS.items():
        assert spec.doc, op
        assert re.search(rf"^\| `{re.escape(op)}` \|", text, re.M), f"docs/programs.md has no row for {op}"


# ---- mutation fuzz ---------------------------------------------------------------------------------------

VALUES = [None, 0, -1, 1.5, 10**30, float("nan"), True, "", "x", "cache", "lm", "main", "io.emit_text",
          "control.break_if", "graph.call", [], [1, 2], {}, {"a": 1}, {"id": "z", "op": "value.length"}]


def _paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*path, i))


def _mutate(data, rng: random.Random):
    data = copy.deepcopy(data)
    paths = [p for p in _paths(data) if p]
    for _ in range(rng.randint(1, 3)):
        p = rng.choice(paths)
        parent = data
        try:
            for part in p[:-1]:
                parent = parent[part]
            key = p[-1]
            action = rng.random()
            if action < 0.3 and isinstance(parent, dict):
                del parent[key]
            elif action < 0.4 and isinstance(parent, list):
                parent.insert(key, copy.deepcopy(rng.choice(parent)))
            elif action < 0.5 and isinstance(parent, dict):
                parent[rng.choice(["bogus", "body", "max", "config", "inputs"])] = rng.choice(VALUES)
            elif action < 0.6 and key == "op":
                parent[key] = rng.choice(list(STEPS))
            else:
                parent[key] = rng.choice(VALUES)
        except (KeyError, IndexError, TypeError):
            continue
    return data


@pytest.mark.parametrize("name", ["chat", "diffusion"])
def test_mutated_programs_only_raise_manifest_errors(name):
    asset = registry().get(f"runtime.{name}")
    base = load_string(asset.text, asset.file).data
    rng = random.Random(19)
    failures = 0
    for _ in range(150):
        data = _mutate(base, rng)
        text = json.dumps(data, indent=1)  # JSON is YAML (and dumps faster than PyYAML)
        try:
            validate_program(load_string(text, "mutant.yml"))
        except ManifestError as exc:
            failures += 1
            assert exc.line is not None and str(exc)
    assert failures > 60  # most mutations are caught, not silently accepted
