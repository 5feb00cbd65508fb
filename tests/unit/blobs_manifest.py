"""The small experiment the run-store, index and cluster tests record: a 3-class MLP (hidden 8)
on generated blobs (60/20/20 split), loss and accuracy as metrics, two seeded runs on cpu."""

from __future__ import annotations

TWO_SEEDS = "{id: s0, seed: 0}, {id: s1, seed: 1}"


def blobs_manifest(name: str, *, n: int, trainer: str, runs: str = TWO_SEEDS, extra: str = "",
                   backend: str = "cpu") -> str:
    """The manifest text: ``trainer`` is the trainer section as YAML flow text, ``runs`` the
    target's runs (flow items), ``extra`` more top-level YAML lines after the trainer,
    ``backend`` the target's backend spec."""
    return f"""\
name: {name}
topology:
  inputs:
    x: {{shape: [batch, 2]}}
    label: {{shape: [batch], dtype: int64}}
  nodes:
    - {{id: mlp, op: model.mlp_classifier, in: [x], config: {{classes: 3, hidden: 8}}}}
    - {{id: loss, op: loss.cross_entropy, in: [mlp, label]}}
    - {{id: accuracy, op: metric.accuracy, in: [mlp, label]}}
datasets:
  blobs: {{source: generated, kind: blobs, n: {n}, classes: 3, split: {{train: 0.6, val: 0.2, test: 0.2}}, feed: {{label: y}}}}
trainer: {trainer}
{extra}metrics: [loss, accuracy]
targets:
  - name: cpu
    backend: {backend}
    runs: [{runs}]
"""
