"""The small generated-data experiment the run-engine tests train (one place for its text)."""

import pytest

HEAD = """\
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
metrics: [loss, accuracy]
targets:
  - name: cpu
    backend: cpu
    runs: [{runs}]
"""


@pytest.fixture
def blobs():
    """``blobs(name, trainer, runs, n=200)``: a 3-class MLP on generated blobs; ``trainer`` and
    ``runs`` are YAML flow text."""

    def make(name: str, trainer: str, runs: str, *, n: int = 200) -> str:
        return HEAD.format(name=name, trainer=trainer, runs=runs, n=n)

    return make
