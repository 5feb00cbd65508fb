"""A manifest with several independent mistakes reports all of them, each at its own line."""

import pytest

from caramba.manifest import ManifestError
from caramba.manifest.compile import check
from caramba.manifest.loader import load_string

SCHEMA_MISTAKES = """\
name: x
topology:
  inputs:
    x: {shape: [batch, 4]}
  nodes:
    - {id: a, op: projection.linear, in: x, config: {out_features: 3}, bogus: 1}
    - {id: 1b, op: projection.linear, in: a}
trainer:
  lr: -1
  steps: true
  batch_size: 0
"""

REFERENCE_MISTAKES = """\
topology:
  inputs:
    x: {shape: [4, 4]}
  nodes:
    - {id: a, op: projection.linaer, in: x, config: {out_features: 3}}
    - {id: b, op: projection.linear, in: [ax], config: {out_featres: 3}}
    - {id: c, op: activation.relu, in: [b, b]}
    - {id: c, op: activation.relu, in: [b]}
  outputs: [c, zz]
"""


def _error(text: str) -> ManifestError:
    with pytest.raises(ManifestError) as e:
        check(load_string(text, "m.yml"))
    return e.value


def test_every_schema_mistake_is_reported_at_its_line():
    e = _error(SCHEMA_MISTAKES)
    got = [(s.line, s.path) for s in e.errors]
    assert got == [(6, "topology.nodes[0].bogus"), (7, "topology.nodes[1].id"), (9, "trainer.lr"),
                   (10, "trainer.steps"), (11, "trainer.batch_size")]
    assert (e.line, e.path) == (6, "topology.nodes[0].bogus")  # the first one, as before
    lines = str(e).splitlines()
    assert [ln.split(":")[1] for ln in lines] == ["6", "7", "9", "10", "11"]
    assert "unknown key 'bogus'" in lines[0] and "'1b' is not a valid name" in lines[1]
    assert "greater than 0" in lines[2] and "valid integer" in lines[3]


def test_every_unknown_op_config_and_reference_is_reported():
    e = _error(REFERENCE_MISTAKES)
    got = [(s.line, s.path) for s in e.errors]
    assert got == [(5, "topology.nodes[0].op"), (6, "topology.nodes[1].in[0]"), (6, "topology.nodes[1].config.out_featres"),
                   (7, "topology.nodes[2].in"), (8, "topology.nodes[3].id"), (9, "topology.outputs.zz")]
    text = str(e)
    for words in ("unknown op 'projection.linaer'; did you mean 'projection.linear'", "input 'ax' of node 'b'",
                  "unknown config key 'out_featres'", "takes 1 input (x), got 2", "duplicate node id 'c'",
                  "output 'zz' names 'zz'"):
        assert words in text
    assert e.errors[0].node == "a" and e.node == "a"


def test_one_mistake_is_one_plain_error():
    e = _error(REFERENCE_MISTAKES.split("    - {id: b")[0].replace("linaer", "linear") + "    - {id: b, op: nope.x, in: [a]}\n")
    assert e.errors == [] and e.line == 6 and str(e).count("\n") == 0
    assert str(e).startswith("m.yml:6:19: topology.nodes[1].op: unknown op 'nope.x'")


def test_an_error_in_an_unknown_op_is_not_followed_by_cascades():
    # the unknown op's node still publishes its ID: its users are not reported as well
    e = _error("topology:\n  inputs: {x: {shape: [2]}}\n  nodes:\n    - {id: a, op: no.such, in: [x]}\n"
               "    - {id: b, op: activation.relu, in: [a]}\n")
    assert e.errors == [] and "unknown op 'no.such'" in str(e)


def test_combine_flattens_and_keeps_the_first():
    from caramba.manifest.errors import Loc

    a, b, c = (ManifestError(m, loc=Loc("f.yml", i, 1), path=f"p{i}") for i, m in enumerate("abc", 1))
    both = ManifestError.combine([a, ManifestError.combine([b, c])])
    assert both.errors == [a, b, c] and (both.message, both.line, both.path) == ("a", 1, "p1")
    assert ManifestError.combine([a]) is a


def test_the_api_validate_endpoint_lists_every_problem(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from caramba.api import create_app
    from caramba.config import Settings

    app = create_app(Settings(store=str(tmp_path / "store"), api_token="t"), hosts=("testserver",))
    with TestClient(app, headers={"Authorization": "Bearer t"}) as client:
        r = client.post("/api/v1/manifests/validate", json={"manifest": REFERENCE_MISTAKES, "name": "mine.yml"})
    assert r.status_code == 422, r.text
    body = r.json()
    assert [(i["line"], i["path"]) for i in body["errors"]] == [
        (5, "topology.nodes[0].op"), (6, "topology.nodes[1].in[0]"), (6, "topology.nodes[1].config.out_featres"),
        (7, "topology.nodes[2].in"), (8, "topology.nodes[3].id"), (9, "topology.outputs.zz")]
    assert all(i["file"] == "mine.yml" for i in body["errors"])  # the server's staging folder is not shown
    assert "submissions" not in r.text
    assert [ln.split(":")[:2] for ln in body["detail"].splitlines()] == [
        ["mine.yml", "5"], ["mine.yml", "6"], ["mine.yml", "6"], ["mine.yml", "7"], ["mine.yml", "8"], ["mine.yml", "9"]]


def test_set_of_an_undefined_variable_is_an_error_with_a_suggestion():
    text = "variables: {hidden: 8}\ntopology:\n  inputs: {x: {shape: [2, 3]}}\n  nodes:\n" \
           "    - {id: a, op: projection.linear, in: [x], config: {out_features: '${hidden}'}}\n"
    assert load_string(text, overrides=["variables.hidden=4"]).get(("topology", "nodes", 0, "config", "out_features")) == 4
    with pytest.raises(ManifestError, match=r"--set variables.hiden: the manifest has no variable 'hiden'; did you "
                       r"mean 'hidden'\?"):
        load_string(text, overrides=["variables.hiden=4"])
    with pytest.raises(ManifestError, match="it defines no variables"):
        load_string(text.split("\n", 1)[1], overrides={"variables.hidden": 4})
    with pytest.raises(ManifestError, match="no variable 'hiden'"):  # a tuner arm's set: is an override too
        check(load_string(text + "tuner:\n  arms:\n    - {id: a, set: {variables.hiden: 2}}\n", "m.yml"))
