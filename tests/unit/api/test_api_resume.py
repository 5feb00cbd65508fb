"""An interrupted run (its process died) is resumed through the API like `caramba research
resume`: the same run ID, from its newest checkpoint, to the same end as an uninterrupted run."""

from __future__ import annotations

import time

import pytest

from caramba.run import Progress, run_experiment
from caramba.store import RunStore
from caramba.train import read_checkpoint

MANIFEST = """\
name: api-resume
topology:
  inputs:
    x: {shape: [batch, 2]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: fc, op: projection.linear, in: [x], config: {out_features: 2}}
    - {id: loss, op: loss.cross_entropy, in: [fc, label]}
  outputs: {logits: fc, loss: loss}
datasets:
  blobs: {source: generated, kind: blobs, n: 200, features: 2, classes: 2, feed: {label: y}}
trainer: {loss: loss, lr: 0.05, batch_size: 16, steps: 60, log_every: 4, checkpoint_every: 20}
targets:
  - name: cpu
    backend: cpu
    runs: [{id: s0, seed: 0}]
"""


class _Dies(Progress):
    def step(self, step, total, values, samples_per_s):
        if step == 47:
            raise KeyboardInterrupt  # the process stops here, after the checkpoint at step 40


def _final(store: RunStore, run_id: str) -> bytes:
    a = store.artifacts(run_id, "checkpoint")[-1]
    tensors, _ = read_checkpoint(a.path, a.sha256)
    return b"".join(tensors[k].tobytes() for k in sorted(tensors))


def test_an_interrupted_run_is_resumed_through_the_api(client, store, tmp_path):
    runs = RunStore(store)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(MANIFEST, store=runs, progress=_Dies())
    rec = runs.list(1)[0]
    assert client.get(f"/api/v1/runs/{rec.id}").json()["status"] == "interrupted"

    r = client.post(f"/api/v1/runs/{rec.id}/resume")
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 120
    while (view := client.get(f"/api/v1/runs/{rec.id}").json())["status"] not in ("finished", "failed"):
        assert time.monotonic() < deadline, view
        time.sleep(0.05)
    assert view["status"] == "finished" and view["step"] == 60 and view["summary"]["verdict"] == "verified"
    pts = client.get(f"/api/v1/runs/{rec.id}/metrics?name=loss&split=train").json()["points"]
    assert [p["step"] for p in pts] == list(range(1, 61))

    whole = RunStore(tmp_path / "whole")
    ref = run_experiment(MANIFEST, store=whole).runs[0]
    assert _final(runs, rec.id) == _final(whole, ref.run_id)
    again = client.post(f"/api/v1/runs/{rec.id}/resume")
    assert again.status_code == 409  # finished: nothing to resume
