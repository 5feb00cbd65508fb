"""The manifest's ``embeddings`` section: what it accepts and the located errors for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from caramba.manifest.errors import ManifestError
from caramba.manifest.loader import load_string
from caramba.manifest.schema import validate

BASE = """\
name: emb
topology:
  inputs:
    x: {shape: [batch, 64]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: fc1, op: projection.linear, in: [x], config: {out_features: 8}}
    - {id: fc2, op: projection.linear, in: [fc1], config: {out_features: 10}}
    - {id: loss, op: loss.cross_entropy, in: [fc2, label]}
    - {id: accuracy, op: metric.accuracy, in: [fc2, label]}
  outputs: {logits: fc2, loss: loss, accuracy: accuracy}
datasets:
  digits: {source: sklearn, name: digits, split: {train: 0.8, val: 0.0, test: 0.2}, feed: {label: y}}
trainer: {loss: loss, steps: 2}
metrics: [loss, accuracy]
"""
LINE = BASE.count("\n") + 1  # the line the embeddings section is appended at


def _validate(text: str):
    return validate(load_string(text, "m.yml", root=Path(".")))


def _error(section: str) -> ManifestError:
    with pytest.raises(ManifestError) as err:
        _validate(BASE + section + "\n")
    return err.value


def test_a_valid_section_and_its_defaults():
    m = _validate(BASE + "embeddings: {output: fc1, collection: digits}\n")
    e = m.embeddings
    assert (e.output, e.split, e.collection, e.distance, e.label, e.limit) == ("fc1", "test", "digits", "cosine", None,
                                                                               None)
    m = _validate(BASE + "embeddings: {output: logits, split: train, collection: d-1, distance: euclid, label: y, "
                         "limit: 50}\n")
    assert m.embeddings.output == "logits" and m.embeddings.distance == "euclid"
    assert _validate(BASE).embeddings is None


@pytest.mark.parametrize("section, where, message", [
    ("embeddings: {output: fc3, collection: d}", "embeddings.output", "'fc3' is not a topology output nor a node's "
                                                                      "value; did you mean"),
    ("embeddings: {output: fc1, split: tset, collection: d}", "embeddings.split", "'train', 'val' or 'test'"),
    ("embeddings: {output: fc1, split: val, collection: d}", "embeddings.split", "dataset 'digits' has no val examples"),
    ("embeddings: {output: loss, collection: d}", "embeddings.output", "is a loss or metric"),
    ("embeddings: {output: accuracy, collection: d}", "embeddings.output", "is a loss or metric"),
    ("embeddings: {output: fc1, collection: ../etc}", "embeddings.collection", "not a collection name"),
    ("embeddings: {output: fc1, collection: ''}", "embeddings.collection", "not a collection name"),
    ("embeddings: {output: fc1, collection: " + "x" * 64 + "}", "embeddings.collection", "not a collection name"),
    ("embeddings: {output: fc1}", "embeddings", "missing required key 'collection'"),
    ("embeddings: {output: fc1, collection: d, distance: l1}", "embeddings.distance", "'cosine', 'dot' or 'euclid'"),
    ("embeddings: {output: fc1, collection: d, limit: 0}", "embeddings.limit", "greater than or equal to 1"),
    ("embeddings: {output: fc1, collection: d, k: 3}", "embeddings.k", "unknown key 'k'"),
    ("embeddings: {output: 3, collection: d}", "embeddings.output", "valid string"),
    ("embeddings: [fc1]", "embeddings", "valid dictionary"),
])
def test_bad_sections_are_located(section, where, message):
    err = _error(section)
    assert err.line == LINE, str(err)
    assert where in str(err) and message in str(err), str(err)


def test_embeddings_need_a_trainer():
    text = BASE.replace("trainer: {loss: loss, steps: 2}\n", "") + "embeddings: {output: fc1, collection: d}\n"
    with pytest.raises(ManifestError, match="has no trainer") as err:
        _validate(text)
    assert err.value.line == text.count("\n")


def test_a_dataset_without_split_fractions_is_checked_when_it_is_read():
    """A deeplake dataset's splits come from a column: validation cannot see them, and does not fail."""
    text = BASE.replace("{source: sklearn, name: digits, split: {train: 0.8, val: 0.0, test: 0.2}, feed: {label: y}}",
                        "{source: deeplake, path: nowhere, feed: {label: y}}")
    m = _validate(text + "embeddings: {output: fc1, split: val, collection: d}\n")
    assert m.embeddings.split == "val"
