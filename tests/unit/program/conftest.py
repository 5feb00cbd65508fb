"""Fixtures for runtime programs: a tiny random GPT-2 checkpoint with a BPE tokenizer (the pattern
of tests/unit/api/test_api_generate.py: caramba's own format code, no transformers needed), one
copy with a chat template, and a diffusion run trained for a few steps."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def make_gpt2(d: Path, vocab: int = 300, positions: int = 256) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    from caramba.text import train_bpe

    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    D = 16
    t = {"transformer.wte.weight": (vocab, D), "transformer.wpe.weight": (positions, D),
         "transformer.ln_f.weight": (D,), "transformer.ln_f.bias": (D,)}
    for i in range(2):
        p = f"transformer.h.{i}."
        t.update({p + "ln_1.weight": (D,), p + "ln_1.bias": (D,), p + "attn.c_attn.weight": (D, 3 * D),
                  p + "attn.c_attn.bias": (3 * D,), p + "attn.c_proj.weight": (D, D), p + "attn.c_proj.bias": (D,),
                  p + "ln_2.weight": (D,), p + "ln_2.bias": (D,), p + "mlp.c_fc.weight": (D, 4 * D),
                  p + "mlp.c_fc.bias": (4 * D,), p + "mlp.c_proj.weight": (4 * D, D), p + "mlp.c_proj.bias": (D,)})
    save_file({k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in t.items()},
              str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "vocab_size": vocab,
                                               "n_positions": positions, "n_embd": D, "n_layer": 2, "n_head": 2}))
    train_bpe(["the cat sat on the mat\n" * 40, "a dog ran far\n" * 20], vocab_size=vocab).save(d / "tokenizer.json")
    return d


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> Path:
    pytest.importorskip("tokenizers")
    return make_gpt2(tmp_path_factory.mktemp("programs") / "tiny-gpt2")


@pytest.fixture(scope="session")
def tiny_chat_lm(tiny_lm, tmp_path_factory) -> Path:
    """The same model with a chat template and an EOS token in tokenizer_config.json."""
    d = tmp_path_factory.mktemp("programs_chat") / "tiny-chat"
    shutil.copytree(tiny_lm, d)
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "eos_token": "t"}))
    return d


@pytest.fixture(scope="session")
def diffusion_run(tmp_path_factory):
    """(store folder, run ID) of examples/digits_diffusion.yml trained for 3 steps (slow tests only)."""
    for mod, extra in (("sklearn", "data"), ("PIL", "image")):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"needs {mod} (caramba[{extra}])")
    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    root = tmp_path_factory.mktemp("program_store")
    res = run_experiment(EXAMPLES / "digits_diffusion.yml", ["trainer.steps=3", "trainer.eval_every=0"],
                         store=RunStore(root))
    assert res.ok, [r.error for r in res.runs]
    return root, res.runs[0].run_id
