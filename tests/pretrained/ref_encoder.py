"""Tiny random-weight GPT-2 and BERT checkpoints, and what transformers computes on them.

Each checkpoint is built from a config object (``hf.build``: width 64, 2 layers, 4 heads,
vocabulary 128, 32 positions) and written with ``save_pretrained`` (``hf.save``); the reference
is the same ``transformers`` model, in eval mode with eager attention, in the dtype compared.

float64 patches: none. In a float64 ``GPT2LMHeadModel`` or ``BertModel`` (transformers 5.24,
eager attention) every op runs in float64: the additive masks are built in the embeddings'
dtype (``torch.finfo(float64).min``), GPT-2's eager attention casts its weights to
``value.dtype``, and gelu / gelu_new / LayerNorm follow their input's dtype. The one float32
path, GPT-2's ``reorder_and_upcast_attn`` (scores computed in float32 whatever the model's dtype),
is only compared in float32 (``test_gpt2_reorder_and_upcast_attn_in_float32``). A future
transformers that computes something in float32 gets a patch here (a context manager around
``reference``), listed in this paragraph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .hf import TORCH_DTYPES, build, save, torch, transformers

WIDTH, LAYERS, HEADS, VOCAB, POSITIONS = 64, 2, 4, 128, 32


def gpt2_config(**overrides: Any) -> Any:
    kw = dict(n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, vocab_size=VOCAB, n_positions=POSITIONS,
              bos_token_id=0, eos_token_id=0)
    return transformers.GPT2Config(**{**kw, **overrides})


def bert_config(**overrides: Any) -> Any:
    kw = dict(hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=4 * WIDTH,
              vocab_size=VOCAB, max_position_embeddings=POSITIONS, type_vocab_size=2)
    return transformers.BertConfig(**{**kw, **overrides})


MODELS = {"gpt2": ("GPT2LMHeadModel", gpt2_config), "bert": ("BertModel", bert_config)}


def make(arch: str, directory: Path, dtype: str, seed: int = 0, **overrides: Any) -> tuple[Any, Path]:
    """A random ``arch`` model saved to ``directory`` in ``dtype``; returns (the model in that dtype, dir)."""
    cls_name, config = MODELS[arch]
    model = build(getattr(transformers, cls_name), config(**overrides), seed=seed)
    return model, save(model, directory, dtype)  # save casts the model to dtype in place


def reload(arch: str, directory: Path, dtype: str) -> Any:
    """The model ``from_pretrained(directory)`` (its saved dtype), then cast to ``dtype``: exact for an upcast."""
    cls = getattr(transformers, MODELS[arch][0])
    model = cls.from_pretrained(directory, attn_implementation="eager").eval()
    return model.to(TORCH_DTYPES[dtype])


def inputs(arch: str, batch: int = 3, seq: int = 16, seed: int = 0) -> dict[str, np.ndarray]:
    """caramba inputs (int64): GPT-2 tokens; BERT tokens, token types and a padded attention mask
    (row 0 full, row 1 padded from position 11, row 2 from position 4)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, (batch, seq), dtype=np.int64)
    if arch == "gpt2":
        return {"tokens": tokens}
    mask = np.ones((batch, seq), np.int64)
    for row, start in zip(range(1, batch), (11, 4)):
        mask[row, start:] = 0
    return {"tokens": tokens, "token_types": rng.integers(0, 2, (batch, seq), dtype=np.int64), "attention_mask": mask}


def reference(arch: str, model: Any, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What transformers computes, under caramba's output names."""
    t = {k: torch.from_numpy(v) for k, v in feed.items()}
    with torch.no_grad():
        if arch == "gpt2":
            return {"logits": model(input_ids=t["tokens"]).logits.numpy()}
        out = model(input_ids=t["tokens"], token_type_ids=t["token_types"], attention_mask=t["attention_mask"])
        return {"hidden": out.last_hidden_state.numpy(), "pooled": out.pooler_output.numpy()}
