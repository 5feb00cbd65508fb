"""Malformed manifests: each mistake gives one ManifestError at file:line:col with its dotted path,
and fuzzed manifests raise nothing but ManifestError."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caramba.manifest import ManifestError, load
from caramba.manifest.compile import check
from caramba.manifest.loader import dump_yaml, load_string

GOOD = """\
name: good
variables: {hidden: 8}
topology:
  inputs:
    x: {shape: [batch, 4]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: fc1, op: projection.linear, in: [x], config: {out_features: "${hidden}"}}
    - {id: act, op: activation.relu, in: [fc1]}
    - {id: fc2, op: projection.linear, in: [act], config: {out_features: 3}}
    - {id: loss, op: loss.cross_entropy, in: [fc2, label]}
datasets:
  blobs: {source: generated, kind: blobs, n: 60, features: 4, classes: 3, feed: {label: y}}
trainer: {loss: loss, batch_size: 8, steps: 2}
"""

CASES = [
    # (what, replace this, with that, line, path, message)
    ("bad YAML", "  nodes:\n", "  nodes: [\n", None, None, "invalid YAML"),
    ("unknown op", "op: activation.relu", "op: activation.rleu", 9, "topology.nodes[1].op", "unknown op 'activation.rleu'; did you mean 'activation.relu'"),
    ("unknown key", "trainer: {loss: loss,", "trainer: {los: loss,", 14, "trainer.los", "unknown key 'los'; did you mean 'loss'"),
    ("wrong port", "in: [fc2, label]", "in: [fc2]", 11, "topology.nodes[3].in", "loss.cross_entropy takes 2 inputs (logits, labels), got 1"),
    ("shape mismatch", "{out_features: 3}}", "{out_features: 3, in_features: 9}}", 10, "topology.nodes[2]", "in_features is 9 but the input"),
    ("undefined variable", '"${hidden}"', '"${hiden}"', 8, "topology.nodes[0].config.out_features", "undefined variable 'hiden'; did you mean 'hidden'"),
]


@pytest.mark.parametrize("what, old, new, line, path, message", CASES, ids=[c[0] for c in CASES])
def test_each_mistake_gives_one_located_error(what, old, new, line, path, message):
    text = GOOD.replace(old, new, 1)
    assert text != GOOD
    with pytest.raises(ManifestError) as e:
        check(text)
    err = e.value
    assert message in str(err), str(err)
    assert err.file == "<string>" and err.line is not None and err.col is not None
    if line is not None:
        assert (err.line, err.path) == (line, path), str(err)
    assert str(err).startswith(f"<string>:{err.line}:{err.col}: ")


def test_include_cycle_and_repeat_limit(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "a.yml").write_text("nodes: !include parts.b\n")
    (tmp_path / "parts" / "b.yml").write_text("more: !include parts.a\n")
    (tmp_path / "cycle.yml").write_text(GOOD.replace("datasets:", "extra: !include parts.a\ndatasets:"))
    with pytest.raises(ManifestError, match=r"include cycle: a.yml -> b.yml -> a.yml") as e:
        check(tmp_path / "cycle.yml")
    assert e.value.file.endswith("b.yml") and e.value.line == 1
    (tmp_path / "many.yml").write_text(GOOD.replace(
        "    - {id: act,", "    - repeat: 5000\n      template: [{id: 'r${i}', op: activation.relu, in: [fc1]}]\n    - {id: act,"))
    with pytest.raises(ManifestError, match="repeat 5000 is over the limit of 4096") as e:
        load(tmp_path / "many.yml")
    assert e.value.line == 9 and e.value.file.endswith("many.yml")


def test_the_good_manifest_is_good():
    prep, low = check(GOOD)
    assert prep.dims == {"batch": 8} and low.param_count() == 4 * 8 + 8 + 8 * 3 + 3


# ---- fuzzing: mutate the good manifest's tree and its text ---------------------------------

BASE = load_string(GOOD).data
BASE["variables"] = {"hidden": 8}
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["${hidden}", "${nope}", "x", "label", "fc1", "projection.linear",
                                           "block.mlp", "model.gpt_tiny", "int64", "batch", "sklearn", "text"]),
    st.lists(st.integers(-2, 70), max_size=4), st.dictionaries(st.sampled_from(["a", "id", "op", "in", "shape"]),
                                                               st.integers(0, 9), max_size=2),
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


ALL_PATHS = [p for p in _paths(BASE) if p]


def _mutate(data, path, value, mode):
    import copy

    doc = copy.deepcopy(data)
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if mode == "set":
        parent[last] = value
    elif mode == "delete":
        del parent[last]
    elif isinstance(parent, dict):
        parent[f"{last}_x" if mode == "rename" else str(value)[:8] or "k"] = parent.pop(last) if mode == "rename" else value
    return doc


def _only_manifest_errors(text):
    try:
        check(text)
    except ManifestError as exc:
        assert exc.line is not None or exc.file is None or "--set" in str(exc), str(exc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(ALL_PATHS), VALUES, st.sampled_from(["set", "delete", "rename", "add"])),
                min_size=1, max_size=3))
def test_fuzzed_trees_raise_only_manifest_errors(mutations):
    data = BASE
    for path, value, mode in mutations:
        try:
            data = _mutate(data, path, value, mode)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed the path
    _only_manifest_errors(dump_yaml(data))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(GOOD) - 1), st.integers(0, 8), st.text(max_size=6))
def test_fuzzed_text_raises_only_manifest_errors(at, cut, insert):
    _only_manifest_errors(GOOD[:at] + insert + GOOD[at + cut :])
