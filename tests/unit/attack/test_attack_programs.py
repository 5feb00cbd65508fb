"""Hostile runtime programs: every bad document is a ManifestError with a line, and every program
that tries to exhaust memory or time at run time stops with a ProgramError at its step."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from caramba.manifest.errors import ManifestError
from caramba.programs import ProgramError, load_program, run_program
from caramba.programs.runtime import value_too_large


def _load(tmp_path: Path, text: str, name: str = "p.yml"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return load_program(p)


def _run(tmp_path: Path, text: str):
    return run_program(_load(tmp_path, text), input=io.StringIO(""), output=io.StringIO())


def _nest(n: int) -> str:
    s, ind = "name: t\nprogram:\n", "  "
    for i in range(n):
        s += f"{ind}- id: l{i}\n{ind}  op: control.loop_count\n{ind}  config: {{count: 1}}\n{ind}  body:\n"
        ind += "    "
    return s + f"{ind}- {{id: e, op: io.emit_text, config: {{text: x}}}}\n"


BAD_DOCS = [
    ("deep_bodies", _nest(400), "nested more than"),
    ("deep_flow", "name: t\nprogram:\n  - {id: a, op: value.assign, config: {value: " + "[" * 5000 + "]" * 5000
     + "}, outputs: {value: x}}\n", "nested more than|nesting depth"),  # PyYAML >= 6.0.4 stops it first
    ("self_include", "name: t\nprogram: !include p\n", "include cycle"),
    ("negative_capacity", "name: t\nstate:\n  cache: {type: kv_cache, graph: lm, capacity: -5}\ngraphs:\n"
     "  lm: {type: language_model, model: null}\nprogram:\n  - {id: e, op: io.emit_text, config: {text: x}}\n",
     "capacity"),
    ("huge_capacity", "name: t\nstate:\n  cache: {type: kv_cache, graph: lm, capacity: 100000000000000}\ngraphs:\n"
     "  lm: {type: language_model, model: null}\nprogram:\n  - {id: e, op: io.emit_text, config: {text: x}}\n",
     "capacity"),
    ("huge_token", "name: t\nstate:\n  buf: {type: token_buffer, initial: [99999999999999999999999]}\nprogram:\n"
     "  - {id: e, op: io.emit_text, config: {text: x}}\n", "initial"),
    ("non_int_tokens", "name: t\nstate:\n  buf: {type: token_buffer, initial: [1.5, true, a]}\nprogram:\n"
     "  - {id: e, op: io.emit_text, config: {text: x}}\n", "list of ints"),
    ("huge_loop", "name: t\nprogram:\n  - id: l\n    op: control.loop_count\n    config: {count: 100000000000}\n"
     "    body: [{id: e, op: io.emit_text, config: {text: x}}]\n", "count"),
    ("huge_max_steps", "name: t\nmax_steps: 1000000000000\nprogram:\n  - {id: e, op: io.emit_text, config: {text: x}}\n",
     "max_steps"),
    ("wrong_port_type", "name: t\nstate:\n  n: {type: counter}\nprogram:\n"
     "  - {id: a, op: state.append, inputs: {state: n, item: n}}\n", "token_buffer"),
    ("nul_byte", "name: t\nprogram:\n  - {id: \"a\x00b\", op: io.emit_text, config: {text: x}}\n", "YAML"),
    ("lone_surrogate", "name: t\nprogram:\n  - {id: a, op: value.assign, config: {value: 1}, "
     "outputs: {value: \"\\ud800\"}}\n", "YAML"),
    ("loop_without_max", "name: t\nprogram:\n  - id: l\n    op: control.loop_until\n"
     "    body: [{id: e, op: io.emit_text, config: {text: x}}]\n", "max"),
    ("program_not_a_list", "name: t\nprogram: {a: 1}\n", "program"),
    ("steps_are_strings", "name: t\nprogram: [a, b]\n", "program"),
]


@pytest.mark.parametrize("name,text,fragment", BAD_DOCS, ids=[b[0] for b in BAD_DOCS])
def test_a_hostile_program_is_a_manifest_error_with_a_line(tmp_path, name, text, fragment):
    with pytest.raises(ManifestError) as info:
        _load(tmp_path, text)
    assert re.search(fragment, str(info.value)), str(info.value)
    assert "p.yml:" in str(info.value)  # file and line


def test_unicode_step_ids_and_variables_are_refused_together_with_lines(tmp_path):
    with pytest.raises(ManifestError) as info:
        _load(tmp_path, "name: t\nprogram:\n  - {id: \"é\u202eü\", op: value.assign, config: {value: \"ж😀\"}, "
              "outputs: {value: \"변수\"}}\n")
    msg = str(info.value)
    assert "p.yml:3:" in msg and "every step needs an id" in msg and "'변수'" in msg
    assert len(info.value.problems) == 2


DOUBLING = """\
name: t
program:
  - {id: a, op: value.assign, config: {value: VALUE}, outputs: {value: x}}
  - id: l
    op: control.loop_count
    config: {count: 60}
    body:
      - {id: b, op: value.append, inputs: {list: x, item: x}, config: {extend: true}}
"""


@pytest.mark.parametrize("value", ["[1]", "xx"])
def test_a_list_doubled_in_a_loop_stops_at_the_value_limit(tmp_path, value):
    with pytest.raises(ProgramError, match=r"step 'b' \(value.append\).*too large") as info:
        _run(tmp_path, DOUBLING.replace("VALUE", value))
    assert "p.yml:8:" in str(info.value)


def test_a_list_nested_in_itself_stops_before_a_copy_or_compare_hangs(tmp_path):
    text = ("name: t\nprogram:\n  - {id: a, op: value.assign, config: {value: [1]}, outputs: {value: x}}\n"
            "  - id: l\n    op: control.loop_count\n    config: {count: 5000}\n    body:\n"
            "      - {id: b, op: value.append, inputs: {list: x, item: x}}\n"
            "  - {id: c, op: value.assign, inputs: {value: x}, outputs: {value: y}}\n"
            "  - {id: d, op: value.equals, inputs: {a: x, b: y}, outputs: {result: r}}\n")
    with pytest.raises(ProgramError, match="nests lists more than"):
        _run(tmp_path, text)


def test_a_token_buffer_doubled_in_a_loop_stops_at_its_limit(tmp_path):
    text = ("name: t\nstate:\n  buf: {type: token_buffer, initial: [1]}\nprogram:\n  - id: l\n"
            "    op: control.loop_count\n    config: {count: 60}\n    body:\n"
            "      - {id: i, op: state.inspect, inputs: {state: buf}, outputs: {value: v}}\n"
            "      - {id: b, op: state.append, inputs: {state: buf, item: v}}\n")
    with pytest.raises(ProgramError, match="token buffer would hold") as info:
        _run(tmp_path, text)
    assert "p.yml:10:" in str(info.value)


def test_an_endless_input_line_is_refused(tmp_path, monkeypatch):
    import caramba.programs.runtime as rt

    monkeypatch.setattr(rt, "MAX_VALUE_ITEMS", 1000)
    prog = _load(tmp_path, "name: t\nprogram:\n  - {id: r, op: io.read_line, outputs: {line: l}}\n")
    with pytest.raises(ProgramError, match="longer than 1,000 characters"):
        run_program(prog, input=io.StringIO("x" * 5000 + "\n"), output=io.StringIO())


def test_value_too_large_is_bounded_on_an_exponential_dag():
    x: list = [1]
    for _ in range(40):
        x = [x, x]  # 2**40 leaves, 40 deep
    assert "deep" in value_too_large(x)
    y: list = [1]
    for _ in range(12):
        y = [y] * 64  # 64**12 leaves, 12 deep
    assert "elements" in value_too_large(y)
    assert value_too_large([{"role": "user", "content": "hi"}] * 10) is None
    assert value_too_large(list(range(1000))) is None


def test_a_loop_bounded_only_by_max_steps_stops_quickly(tmp_path):
    text = ("name: t\nmax_steps: 20000\nprogram:\n  - id: l\n    op: control.loop_until\n"
            "    config: {max: 1000000000}\n    body: [{id: e, op: io.emit_text, config: {text: x}}]\n")
    with pytest.raises(ProgramError, match="ran 20000 steps"):
        _run(tmp_path, text)
