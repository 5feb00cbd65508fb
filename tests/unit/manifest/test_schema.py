"""The manifest schema: strict keys with suggestions, typed sections, located errors."""

import pytest

from caramba.manifest import ManifestError, load_string
from caramba.manifest.schema import validate

BASE = """\
name: t
topology:
  inputs: {x: {shape: [batch, 4]}}
  nodes:
    - {id: fc, op: projection.linear, in: x, config: {out_features: 3}}
datasets:
  d: {source: sklearn}
trainer: {optimizer: {op: optimizer.adam, beta1: 0.9}, lr: 1e-3, steps: 10, schedule: cosine}
targets: [{name: cpu, backend: cpu}]
"""


def test_a_valid_manifest_has_typed_sections_and_defaults():
    m = validate(load_string(BASE))
    assert m.trainer.optimizer.op == "optimizer.adam" and m.trainer.optimizer.config == {"beta1": 0.9}
    assert m.trainer.schedule.kind == "cosine" and m.trainer.lr == 1e-3
    assert m.targets[0].runs[0].id == "seed0" and m.topology.nodes[0].in_ == ["x"]
    assert m.datasets["d"].split.test == 0.2 and m.is_experiment


@pytest.mark.parametrize(
    "old, new, line, col, match",
    [
        ("steps: 10", "stepz: 10", 8, 66, r"trainer.stepz: unknown key 'stepz'; did you mean 'steps'"),
        ("name: t\n", "name: t\nbatch_size: 3\n", 2, 1, r"unknown key 'batch_size'"),
        ("{source: sklearn}", "{source: sklern}", 7, 15, r"unknown source .sklern."),
        ("{source: sklearn}", "{source: sklearn, splt: {}}", 7, 24, r"did you mean 'split'"),
        ("id: fc,", "id: 1fc,", 5, 12, r"'1fc' is not a valid name"),
        ("lr: 1e-3", "lr: -1", 8, 60, r"trainer.lr: Input should be greater than 0, got -1"),
        ("shape: [batch, 4]", "shape: [batch, -4]", 3, 23, r"dimension -4 is negative"),
        ("{source: sklearn}", "{source: sklearn, split: {train: 0.5, test: 0.1}}", 7, 31, r"add up to 1"),
        ("targets: [{name: cpu, backend: cpu}]", "targets: [{name: a}, {name: a}]", 9, 10, r"target names must be unique"),
    ],
)
def test_schema_errors_are_located(old, new, line, col, match):
    text = BASE.replace(old, new)
    assert text != BASE
    with pytest.raises(ManifestError, match=match) as e:
        validate(load_string(text, "m.yml"))
    assert (e.value.file, e.value.line, e.value.col) == ("m.yml", line, col), str(e.value)


def test_missing_topology():
    with pytest.raises(ManifestError, match="missing required key 'topology'"):
        validate(load_string("name: x\n"))
