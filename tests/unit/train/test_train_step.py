"""The train step: one graph, resident state, learning, determinism, checkpoints, dropout."""

from __future__ import annotations

import numpy as np
import pytest

from caramba import compute, ir, ops
from caramba.errors import ConfigError, GraphError
from caramba.train import (
    MLP,
    SGD,
    AdamW,
    CheckpointError,
    Dropout,
    Linear,
    Module,
    Sequential,
    Trainer,
    TrainStep,
    accuracy,
    cosine,
    cross_entropy,
    read_checkpoint,
)

from .conftest import batches, blobs

D, C, B = 16, 4, 64


def classifier(x, y):
    return x, y


def loss_fn(model, x, y):
    logits = model(x)
    return cross_entropy(logits, y), {"accuracy": accuracy(logits, y)}


def make(optimizer=None, model=None, batch=B):
    model = model or MLP([D, 32, 32, C])
    optimizer = optimizer or AdamW(cosine(0.02, decay_steps=300, warmup_steps=10), clip_norm=5.0)
    return TrainStep(model, loss_fn, optimizer, {"x": ((batch, D), "float64"), "y": ((batch,), "int64")})


def test_one_graph_holds_forward_backward_and_update():
    step = make()
    g = step.graph
    ir.verify(g)
    ops_ = {n.op for n in g.nodes}
    assert {"linalg.matmul", "train.loss.cross_entropy", "train.optimizer.adam", "state.write"} <= ops_
    writes = {n.attrs["name"] for n in g.nodes if n.op == "state.write"}
    params = set(step.model.parameters())
    assert params == {"layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias", "layers.4.weight", "layers.4.bias"}
    assert writes == params | {f"opt.adam.{s}.{p}" for s in "mv" for p in params} | {"opt.step"}
    assert set(g.outputs) == {"loss", "accuracy", "lr", "grad_norm", "step"}


def test_mlp_reaches_97_percent_train_accuracy(cpu):
    x, y = blobs()
    trainer = Trainer(make(), cpu)
    trainer.init(seed=0)
    trainer.run(batches(x, y, B, 300))
    eval_g = trainer.train_step.eval_graph(lambda m, x, y: accuracy(m(x), y), {"x": (x.shape, "float64"), "y": (y.shape, "int64")})
    acc = float(cpu.execute(eval_g, inputs={"x": cpu.upload(x), "y": cpu.upload(y)})["out"].download())
    assert acc >= 0.97, f"train accuracy {acc:.4f}"
    assert trainer.step_count == 300


def test_same_seed_is_bit_identical_and_another_seed_differs():
    x, y = blobs(seed=1)
    runs = []
    for seed in (3, 3, 4):
        with compute.new("cpu") as r:
            t = Trainer(make(), r)
            t.init(seed)
            losses = [o["loss"] for o in t.run(batches(x, y, B, 25))]
            runs.append((losses, t.parameters()))
    (l1, p1), (l2, p2), (l3, _) = runs
    assert l1 == l2
    for n in p1:
        np.testing.assert_array_equal(p1[n], p2[n])
    assert l1[0] != l3[0]


def test_only_requested_outputs_come_back_and_compile_happens_once(cpu):
    x, y = blobs()
    trainer = Trainer(make(), cpu)
    trainer.init(0)
    data = list(batches(x, y, B, 3))
    assert set(trainer.step(data[0])) == {"loss"}
    exe = trainer.executable(("loss",))
    assert set(exe.output_names) == {"loss"}
    # metrics that are not fetched are not even computed
    assert not any(n.op == "train.metric.accuracy" for n in exe.graph.nodes)
    trainer.step(data[1])
    assert trainer.executable(("loss",)) is exe
    out = trainer.step(data[2], fetch=("accuracy", "lr", "step"))
    assert set(out) == {"accuracy", "lr", "step"} and out["step"] == 3.0
    with pytest.raises(ConfigError, match="cannot fetch"):
        trainer.step(data[0], fetch=("los",))


def test_parameters_are_shared_with_an_eval_graph(cpu):
    step = make()
    trainer = Trainer(step, cpu)
    trainer.init(0)
    g = step.eval_graph(lambda m, x: m(x), {"x": ((2, D), "float64")})
    xs = np.ones((2, D))
    before = cpu.execute(g, inputs={"x": cpu.upload(xs)})["out"].download()
    x, y = blobs()
    trainer.run(batches(x, y, B, 2))
    after = cpu.execute(g, inputs={"x": cpu.upload(xs)})["out"].download()
    p = trainer.parameters()
    h = np.maximum(np.maximum(xs @ p["layers.0.weight"] + p["layers.0.bias"], 0) @ p["layers.2.weight"] + p["layers.2.bias"], 0)
    np.testing.assert_allclose(after, h @ p["layers.4.weight"] + p["layers.4.bias"], rtol=1e-12)
    assert not np.array_equal(before, after)


def test_checkpoint_resume_gives_the_uninterrupted_parameters(tmp_path):
    x, y = blobs(seed=2)
    k = 15
    data = list(batches(x, y, B, 2 * k))
    with compute.new("cpu") as r:
        full = Trainer(make(), r)
        full.init(7)
        full.run(data)
        want = full.parameters()
    with compute.new("cpu") as r:
        first = Trainer(make(), r)
        first.init(7)
        first.run(data[:k])
        path = first.save(tmp_path / "ck.safetensors", manifest_hash="abc123")
    tensors, info = read_checkpoint(path)
    assert info.step == k and info.manifest_hash == "abc123" and info.graph_hash == first.graph_hash
    assert {"opt.step", "layers.0.weight", "opt.adam.m.layers.0.weight"} <= set(tensors)
    with compute.new("cpu") as r:
        resumed = Trainer(make(), r)
        resumed.load(path)
        assert resumed.step_count == k
        resumed.run(data[k:])
        got = resumed.parameters()
    for n in want:
        np.testing.assert_array_equal(got[n], want[n], err_msg=n)


def test_checkpoint_from_another_graph_is_refused(cpu, tmp_path):
    a = Trainer(make(), cpu)
    a.init(0)
    x, y = blobs()
    a.step({"x": x[:B], "y": y[:B]})  # creates the optimizer state
    path = a.save(tmp_path / "a.safetensors")
    b = Trainer(make(SGD(0.1)), cpu)
    with pytest.raises(CheckpointError, match="was saved from graph"):
        b.load(path)
    with pytest.raises(CheckpointError, match="is not state of this graph"):
        b.load(path, check_graph=False)


def test_dropout_draws_a_fresh_mask_each_step_and_none_in_eval(cpu):
    model = Sequential(Linear(D, 64), ops.relu, Dropout(0.5, seed=1), Linear(64, C))
    step = make(SGD(0.0001), model)
    assert any(n.op == "nn.dropout" for n in step.graph.nodes)
    ev = step.eval_graph(lambda m, x: m(x), {"x": ((B, D), "float64")})
    assert not any(n.op == "nn.dropout" for n in ev.nodes)
    x, y = blobs()
    t = Trainer(step, cpu)
    t.init(0)
    b = {"x": x[:B], "y": y[:B]}
    l1, l2 = t.step(b)["loss"], t.step(b)["loss"]
    assert l1 != l2  # different masks (and a tiny update)


def test_unused_parameters_get_a_zero_gradient(cpu):
    class Two(Module):
        def __init__(self):
            super().__init__()
            self.used = Linear(D, C)
            self.unused = Linear(D, C)

        def __call__(self, x):
            return self.used(x)

    t = Trainer(make(SGD(0.1), Two()), cpu)
    t.init(0)
    before = t.parameters()
    x, y = blobs()
    t.step({"x": x[:B], "y": y[:B]})
    after = t.parameters()
    np.testing.assert_array_equal(after["unused.weight"], before["unused.weight"])
    assert not np.array_equal(after["used.weight"], before["used.weight"])


def test_loss_must_be_a_scalar():
    with pytest.raises(GraphError, match="the loss must be a float scalar"):
        TrainStep(MLP([D, C]), lambda m, x: m(x), SGD(0.1), {"x": ((B, D), "float64")})
