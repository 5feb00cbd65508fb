"""examples/llama_lora.yml end to end: a Llama-architecture checkpoint fine-tuned with LoRA by
`caramba research run`, the frozen base bit for bit unchanged, and the exported Hugging Face
folder loading in transformers with logits equal to caramba's (float64, 1e-10)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from .hf import rel_err, torch, transformers
from .ref_decoder import float64_islands, logits

pytestmark = pytest.mark.slow  # two short runs of the example (~15 s)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama_lora.yml"
CHECKPOINT = EXAMPLE.parent / "checkpoints" / "tiny-llama"


def test_lora_finetune_export_and_reload(tmp_path):
    import caramba.pretrained as pt
    from caramba.actors.experiment import RunSpec
    from caramba.manifest.pretrained import param_specs
    from caramba.pretrained.model import PretrainedModel
    from caramba.run.driver import plan_from_spec
    from caramba.run.engine import run_experiment
    from caramba.run.export import export_run
    from caramba.store.runs import RunStore
    from caramba.train.checkpoint import read_checkpoint

    store = RunStore(tmp_path / "store")
    start = run_experiment(EXAMPLE, ["trainer.steps=0"], store=store).runs[-1]
    run = run_experiment(EXAMPLE, ["trainer.steps=40", "trainer.eval_every=20"], store=store).runs[-1]
    val0 = store.get(start.run_id).summary["val.loss"]
    rec = store.get(run.run_id)
    assert rec.status == "finished", rec.error
    assert rec.summary["val.loss"] < val0 - 1.0, (val0, rec.summary["val.loss"])

    # the frozen base: every non-adapter parameter is the checkpoint's float32 value, bit for bit
    newest = store.artifacts(run.run_id, "checkpoint")[-1]
    trained, _ = read_checkpoint(newest.path, newest.sha256)
    prep = plan_from_spec(RunSpec.model_validate(rec.config["spec"])).prep
    specs = param_specs(prep)
    base = pt.open(CHECKPOINT, dtype="float64", node_id="llama")
    initial = base.read({k: v for k, v in specs.items() if not k.endswith((".lora_a", ".lora_b"))})
    assert initial and all(np.array_equal(trained[k], v) for k, v in initial.items())
    adapters = [k for k in specs if k.endswith(".lora_b")]
    assert len(adapters) == 14 and all(np.abs(trained[k]).max() > 0 for k in adapters)  # 7 linears x 2 layers learned

    # export (adapters merged) -> transformers -> the same logits as caramba's unmerged model
    out = export_run(run.run_id, tmp_path / "hf", store=store)
    assert json.loads((out / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    ids = np.random.default_rng(3).integers(0, 128, size=(2, 12))
    ours = PretrainedModel(prep, "").forward({"tokens": ids, "y": ids}, outputs=["logits"],
                                                params={k: trained[k] for k in specs})["logits"]
    model = transformers.LlamaForCausalLM.from_pretrained(out, dtype=torch.float64).eval()
    with float64_islands():
        ref = logits(model, ids)
    assert rel_err(ours, ref) <= 1e-10
    # and the adapter form: the base folder plus PEFT's files
    adapter = export_run(run.run_id, tmp_path / "hf_adapter", store=store, lora="adapter")
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    assert cfg["r"] == 8 and cfg["lora_alpha"] == 16 and set(cfg["target_modules"]) == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
