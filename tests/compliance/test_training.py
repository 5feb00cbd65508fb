"""Training on every available backend: the same seed gives bit-identical runs on one backend,
and every float64 backend follows the cpu backend's trajectory (1e-8 relative after 100 steps).

Two spellings of the same step: ``fused`` uses the train.* ops (loss, metric, optimizer
update), ``decomposed`` only primitive ops (log_softmax loss, ``fused=False`` optimizer), so a
backend that does not implement train.* yet still shows that its gradients train identically.
"""

from __future__ import annotations

import numpy as np
import pytest

from caramba import compute, ops
from caramba.train import MLP, Adam, Trainer, TrainStep, accuracy, cosine, cross_entropy, linear_warmup

from .harness import node_problems

STEPS = 100
BATCH, D, C = 32, 8, 3


def data():
    rng = np.random.default_rng(42)
    centers = rng.standard_normal((C, D)) * 1.5
    y = rng.integers(0, C, 256)
    x = centers[y] + rng.standard_normal((256, D))
    return x, y.astype(np.int64)


SMOOTHING = 0.05


def decomposed_loss(logits, y):
    classes = logits.graph.call("shape.iota", (), {"shape": logits.shape, "axis": 1, "dtype": "int64"})
    target = ops.cast(ops.equal(classes, ops.expand_dims(y, axes=(1,))), dtype=logits.dtype)
    target = target * (1.0 - SMOOTHING) + SMOOTHING / C
    loss = -ops.mean(ops.sum(target * ops.log_softmax(logits), axes=(1,)))
    acc = ops.mean(ops.cast(ops.equal(ops.argmax(logits, axis=1), y), dtype=logits.dtype))
    return loss, {"accuracy": acc}


def default_schedule(mode: str):
    # the two modes use different schedules so that a backend lacking float64 cos (ONNX
    # Runtime) still runs one of them
    return linear_warmup(0.05, 5) if mode == "fused" else cosine(0.05, decay_steps=STEPS, warmup_steps=5)


def make_step(mode: str, schedule=None):
    model = MLP([D, 16, 16, C], activation=lambda h: ops.gelu(h, approximate="tanh"))

    def loss_fn(m, x, y):
        logits = m(x)
        if mode == "decomposed":
            return decomposed_loss(logits, y)
        return cross_entropy(logits, y, label_smoothing=SMOOTHING), {"accuracy": accuracy(logits, y)}

    opt = Adam(schedule or default_schedule(mode), weight_decay=1e-3, clip_norm=2.0, fused=mode == "fused")
    return TrainStep(model, loss_fn, opt, {"x": ((BATCH, D), "float64"), "y": ((BATCH,), "int64")})


def trajectory(spec: str, mode: str, seed: int = 0, schedule=None):
    x, y = data()
    with compute.new(spec) as r:
        step = make_step(mode, schedule)
        unsupported, precision = node_problems(step.graph, r.capabilities)
        if unsupported or precision:
            ops_ = sorted({step.graph.node(n).op for n in unsupported + precision})
            pytest.skip(f"{r.location} does not claim {ops_} (float64) needed by a train step")
        t = Trainer(step, r)
        t.init(seed)
        losses = []
        for i in range(STEPS):
            j = (i * BATCH) % len(x)
            losses.append(t.step({"x": x[j : j + BATCH], "y": y[j : j + BATCH]})["loss"])
        return np.array(losses), t.parameters()


_CPU: dict[str, tuple] = {}
MODES = pytest.mark.parametrize("mode", ["fused", "decomposed"])


def cpu_reference(mode: str):
    if mode not in _CPU:
        _CPU[mode] = trajectory("cpu", mode)
    return _CPU[mode]


@MODES
def test_same_seed_is_bit_identical(backend, mode):
    l1, p1 = trajectory(backend, mode)
    l2, p2 = trajectory(backend, mode)
    np.testing.assert_array_equal(l1, l2)
    for n in p1:
        np.testing.assert_array_equal(p1[n], p2[n], err_msg=n)


@MODES
def test_trajectory_matches_the_cpu_backend(backend, mode):
    losses, params = trajectory(backend, mode)
    ref_losses, ref_params = cpu_reference(mode)
    assert losses[-1] < 0.5 * losses[0], "the run did not learn"
    rel = np.max(np.abs(losses - ref_losses) / np.abs(ref_losses))
    assert rel < 1e-8, f"losses differ from cpu by {rel:.3g} (relative)"
    for n, want in ref_params.items():
        err = np.max(np.abs(params[n] - want)) / np.max(np.abs(want))
        assert err < 1e-8, f"parameter {n} differs from cpu by {err:.3g} after {STEPS} steps"


def test_fused_and_decomposed_steps_agree_on_cpu():
    fused, fp = cpu_reference("fused")
    dec, dp = trajectory("cpu", "decomposed", schedule=default_schedule("fused"))
    assert np.max(np.abs(fused - dec) / np.abs(fused)) < 1e-10
    for n in fp:
        assert np.max(np.abs(fp[n] - dp[n])) / np.max(np.abs(fp[n])) < 1e-10, n
