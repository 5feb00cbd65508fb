"""``!include`` of a list inside a list splices its items in; errors point into the included file."""

from pathlib import Path

import pytest

from caramba.manifest import ManifestError
from caramba.manifest.compile import check
from caramba.manifest.loader import load

BODY = """\
- {id: h1, op: projection.linear, in: [x], config: {out_features: 4}}
- {id: a1, op: activation.relu, in: [h1]}
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "m.yml"


def _manifest(nodes: str) -> str:
    return "topology:\n  inputs: {x: {shape: [2, 3]}}\n  nodes:\n" + nodes


def test_an_included_list_splices_into_the_node_list(tmp_path):
    m = _write(tmp_path, {"parts/body.yml": BODY, "m.yml": _manifest(
        "    - {id: first, op: activation.tanh, in: [x]}\n"
        "    - !include parts.body\n"
        "    - {id: out, op: projection.linear, in: [a1], config: {out_features: 2}}\n")})
    doc = load(m)
    assert [n["id"] for n in doc.data["topology"]["nodes"]] == ["first", "h1", "a1", "out"]
    assert doc.loc(("topology", "nodes", 2, "id")).file.endswith("body.yml")  # a1 keeps its file and line
    assert doc.loc(("topology", "nodes", 2, "id")).line == 2
    assert doc.loc(("topology", "nodes", 3, "id")).file == str(m)
    _, low = check(m)
    assert low.graph.type_of(low.graph.outputs["out"]).shape == (2, 2)


def test_the_mapping_form_and_two_includes_splice_too(tmp_path):
    m = _write(tmp_path, {"parts/body.yml": BODY, "parts/more.yml": "- {id: t, op: activation.tanh, in: ['${include.src}']}\n",
                          "m.yml": _manifest("    - !include parts.body\n"
                                             "    - {include: parts.more, variables: {src: a1}}\n")})
    assert [n["id"] for n in load(m).data["topology"]["nodes"]] == ["h1", "a1", "t"]


def test_an_included_list_as_a_value_stays_a_list_and_a_mapping_stays_one_item(tmp_path):
    m = _write(tmp_path, {"parts/body.yml": BODY, "parts/one.yml": "{id: t, op: activation.tanh, in: [a1]}\n",
                          "m.yml": "topology:\n  inputs: {x: {shape: [2, 3]}}\n  nodes: !include parts.body\n"})
    assert [n["id"] for n in load(m).data["topology"]["nodes"]] == ["h1", "a1"]
    m.write_text(_manifest("    - !include parts.body\n    - !include parts.one\n"))
    assert [n["id"] for n in load(m).data["topology"]["nodes"]] == ["h1", "a1", "t"]


def test_a_repeat_of_an_included_list_still_splices(tmp_path):
    part = "- {id: 'l${i}', op: activation.tanh, in: [x]}\n- {id: 'm${i}', op: activation.relu, in: ['l${i}']}\n"
    m = _write(tmp_path, {"parts/pair.yml": part,
                          "m.yml": _manifest("    - {repeat: 2, template: !include parts.pair}\n")})
    assert [n["id"] for n in load(m).data["topology"]["nodes"]] == ["l0", "m0", "l1", "m1"]


@pytest.mark.parametrize("bad, line, col, message", [
    ("- {id: a1, op: activation.relu, in: [h1], bogus: 2}", 2, 43, "unknown key 'bogus'"),  # schema
    ("- {id: a1, op: activation.relux, in: [h1]}", 2, 16, "unknown op 'activation.relux'"),  # registry
    ("- {id: a1, op: activation.relu, in: [h2]}", 2, 38, "input 'h2' of node 'a1'"),  # reference
    ("- {id: a1, op: activation.relu, in: [h1]\n", 4, 1, "invalid YAML"),  # syntax (seen at the end)
])
def test_errors_inside_the_included_file_name_that_file_and_line(tmp_path, bad, line, col, message):
    body = BODY.splitlines()[0] + "\n" + bad + "\n"
    m = _write(tmp_path, {"parts/body.yml": body, "m.yml": _manifest("    - !include parts.body\n")})
    with pytest.raises(ManifestError, match=message) as e:
        check(m)
    assert e.value.file.endswith("parts/body.yml"), str(e.value)
    assert (e.value.line, e.value.col) == (line, col), str(e.value)
    assert any(f"included from {m}:4:7" in n for n in e.value.loc.notes)
