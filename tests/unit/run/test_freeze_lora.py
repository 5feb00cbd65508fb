"""``model.freeze`` and ``model.lora`` on a run: frozen parameters get no gradient, no optimizer
state and keep their bits; adapters train; a LoRA model starts as its base model and its merged
weights compute what it computes."""

from pathlib import Path

import numpy as np
import pytest

from caramba import compute
from caramba.manifest import lora
from caramba.manifest.compile import prepare
from caramba.run import build_optimizer, manifest_model, run_experiment
from caramba.store import RunStore
from caramba.train import TrainStep, read_checkpoint

CHAR_GPT = Path(__file__).parents[3] / "examples" / "char_gpt.yml"
SMALL = ["variables.context=16", "trainer.batch_size=4", "trainer.steps=12", "trainer.eval_every=0",
         "trainer.eval_batches=1", "trainer.eval_batch_size=4", "trainer.schedule.warmup_steps=0", "trainer.lr=0.01",
         "trainer.log_every=1"]
FREEZE = "model={freeze: ['gpt.tok_emb.*', 'gpt.h_0.*']}"
LORA = ("model={lora: {rank: 4, alpha: 8.0, targets: ['*.attn.qkv', '*.attn.out', '*.mlp.fc1'], dropout: 0.1}, "
        "freeze: ['gpt.h_1.attn.qkv.lora_a']}")


def _step(prep):
    """The train step a run builds for ``prep`` (as ``ManifestRun`` does)."""
    model = manifest_model(prep)
    t = prep.manifest.trainer
    b, ctx = prep.dims["batch"], prep.dims["seq"]

    def loss_fn(model, **ins):
        return model(**ins)[t.loss]

    return TrainStep(model, loss_fn, build_optimizer(prep, t.steps), {"x": ((b, ctx), "int64"), "y": ((b, ctx), "int64")})


@pytest.mark.parametrize("model", [FREEZE, LORA], ids=["freeze", "lora"])
def test_frozen_parameters_have_no_gradient_and_no_optimizer_state(model):
    prep = prepare(CHAR_GPT, [*SMALL, model])
    step = _step(prep)
    g, opt = step.graph, step.optimizer
    params = step.model.parameters()
    frozen = {n for n, p in params.items() if not p.trainable}
    trainable = set(params) - frozen
    want = ({n for n in params if n.startswith(("gpt.tok_emb.", "gpt.h_0."))} if model == FREEZE
            else {n for n in params if not lora.is_adapter(n)} | {"gpt.h_1.attn.qkv.lora_a"})
    assert frozen == want and trainable
    assert set(step.params) == trainable
    slots = {s for s in g.state if s.startswith("opt.") and s != "opt.step"}
    assert slots == {opt.state_name(s, p) for s in opt.slot_names() for p in trainable} and len(opt.slot_names()) == 2
    written = {n.attrs["name"] for n in g.nodes if n.op == "state.write"}
    assert not written & frozen and trainable <= written
    assert frozen <= set(g.state)  # still state: read by the forward pass, saved in checkpoints
    # No cotangent reaches a read of a frozen parameter, and no backward node computes a value
    # of a frozen-only type from cotangents (what a gradient of that parameter would be).
    reads = {n.id for n in g.nodes if n.op == "state.read" and n.attrs["name"] in frozen}
    backward = {n.id: n for n in g.nodes if n.id.startswith("d.")}
    assert backward and not [d for d in backward if any(d.startswith(f"d.{r}.acc") for r in reads)]
    # Layout ops compute nothing: a cotangent flattened to [rows, N] for a weight-gradient GEMM
    # (autodiff/rules/linalg.py) can have a frozen parameter's shape by coincidence (rows = B*T).
    layout = {"shape.reshape", "shape.transpose", "shape.expand_dims", "shape.squeeze"}
    frozen_types = {params[n].type for n in frozen} - {params[n].type for n in trainable}
    grads = [n.id for n in backward.values() if n.op not in layout and any(t in frozen_types for t in n.types)
             and any(r.node in backward for r in n.inputs)]
    assert not grads
    full = _step(prepare(CHAR_GPT, SMALL)).graph
    assert len(g.nodes) < len(full.nodes) or model == LORA


def _final(store: RunStore, run_id: str) -> dict[str, np.ndarray]:
    a = store.artifacts(run_id, "checkpoint")[-1]
    tensors, _ = read_checkpoint(a.path, a.sha256)
    return tensors


def test_a_run_keeps_frozen_parameters_bit_identical_and_trains_the_rest(tmp_path):
    """Two tuner arms of one manifest: a plain freeze and LoRA adapters (the arms set `model`)."""
    tuner = (f"tuner={{metric: val.loss, arms: [{{id: freeze, set: {{{FREEZE.replace('=', ': ', 1)}}}}}, "
             f"{{id: lora, set: {{{LORA.replace('=', ': ', 1)}}}}}]}}")
    store = RunStore(tmp_path / "store")
    result = run_experiment(CHAR_GPT, [*SMALL, tuner], store=store)
    assert [r.status for r in result.runs] == ["finished", "finished"], [r.error for r in result.runs]
    for r, arm, model in zip(result.runs, ("freeze", "lora"), (FREEZE, LORA), strict=True):
        assert r.label == f"{arm}/cpu/seed0"
        prep = prepare(CHAR_GPT, [*SMALL, model])
        m = manifest_model(prep)
        initial = m.initial_values(0)
        final = _final(store, r.run_id)
        frozen = {n for n, p in m.parameters().items() if not p.trainable}
        assert frozen and set(initial) <= set(final)  # frozen parameters are saved too
        for n in frozen:
            assert final[n].tobytes() == initial[n].tobytes(), n
            assert not [k for k in final if k.startswith("opt.") and k.endswith("." + n)], n
        for n in set(initial) - frozen:
            assert not np.array_equal(final[n], initial[n]), n
        if model == LORA:
            assert all(np.abs(final[n]).max() > 0 for n in final if n.endswith(".lora_b"))
        loss = [v for _, split, name, v in store.metrics(r.run_id, "loss", "train")]
        assert len(loss) == 12 and np.mean(loss[-3:]) < np.mean(loss[:3]), loss


def _logits(prep, params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    low = prep.lower(batch=x.shape[0], outputs=["logits"])
    runner = compute.new("cpu")
    try:
        for n in low.params:
            runner.state[n] = runner.upload(params[n])
        ins = {"x": runner.upload(x), "y": runner.upload(np.zeros_like(x))}
        return runner.compile(low.graph, targets=["logits"]).run(ins)["logits"].download()
    finally:
        runner.close()


def test_a_lora_model_starts_as_its_base_model_and_merges_exactly():
    base = prepare(CHAR_GPT, SMALL)
    tuned = prepare(CHAR_GPT, [*SMALL, LORA])
    x = np.random.default_rng(0).integers(0, 128, size=(4, 16))
    base_params = manifest_model(base).initial_values(3)
    params = manifest_model(tuned).initial_values(3)
    adapters = {n for n in params if lora.is_adapter(n)}
    assert len(adapters) == 12 and set(params) - adapters == set(base_params)
    assert all(not params[n].any() for n in adapters if n.endswith(".lora_b"))  # B = 0 at step 0
    ref = _logits(base, base_params, x)
    assert _logits(tuned, params, x).tobytes() == ref.tobytes()  # bit for bit
    # trained adapters: a random B; the merged weights reproduce the LoRA model
    rng = np.random.default_rng(1)
    params = {n: rng.normal(0, 0.5, v.shape) if n.endswith(".lora_b") else v for n, v in params.items()}
    out = _logits(tuned, params, x)
    merged = lora.merge(params, tuned.manifest.model.lora)
    assert set(merged) == set(base_params)
    np.testing.assert_allclose(_logits(base, merged, x), out, rtol=0, atol=1e-12)
    assert np.abs(out - ref).max() > 1e-3  # the adapters do change the model


def test_trainer_checkpoints_save_and_restore_frozen_parameters(tmp_path):
    from caramba.train import Trainer

    step = _step(prepare(CHAR_GPT, [*SMALL, LORA]))
    rng = np.random.default_rng(0)
    batch = {"x": rng.integers(0, 128, size=(4, 16)), "y": rng.integers(0, 128, size=(4, 16))}
    a = Trainer(step, compute.new("cpu"))
    b = Trainer(step, compute.new("cpu"))
    try:
        a.init(0)
        a.run([batch, batch])
        path = a.save(tmp_path / "ckpt.safetensors")
        b.init(1)
        b.load(path)
        want, got = a.parameters(), b.parameters()
        frozen = {n for n, p in step.model.parameters().items() if not p.trainable}
        assert frozen and set(got) == set(want)
        assert all(got[n].tobytes() == want[n].tobytes() for n in want)
        assert b.step(batch) == a.step(batch)
    finally:
        a.runner.close()
        b.runner.close()
