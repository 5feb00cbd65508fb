"""Tiny Hugging Face decoder checkpoints and a float64 transformers reference for them.

``CASES`` builds, per architecture, a small random config (hidden 64, 4 heads over 2 key/value
heads, vocab 128, 2-4 layers) that exercises what the family adds: Llama 3 ``rope_scaling``,
Mistral's and Gemma 2's sliding window shorter than the test sequence, Qwen2's q/k/v biases,
Qwen3's QK-norm and explicit head_dim, Gemma's (1 + weight) RMSNorm, sqrt(hidden) embedding scale
and tanh GELU, Gemma 2's soft-capping and query_pre_attn_scalar.

A transformers model cast to float64 still computes some things in float32. ``float64_islands``
patches them, only while the context is open, so the reference is float64 end to end:

1. ``<Family>RMSNorm.forward`` (Llama, Mistral, Qwen2, Qwen3): ``hidden_states.to(torch.float32)``
   before the mean square -> the same formula in the input's dtype.
2. ``GemmaRMSNorm.forward``, ``Gemma2RMSNorm.forward``: ``x.float()`` and ``weight.float()`` ->
   the same ``x_hat * (1 + weight)`` in the input's dtype.
3. ``<Family>RotaryEmbedding.forward`` (all six): ``inv_freq`` is computed at init in float32
   (``torch.arange(..., dtype=torch.float)``, also inside ``ROPE_INIT_FUNCTIONS``: llama3, yarn's
   ``torch.float32`` ramp, dynamic's base from a float32 ``seq_len`` tensor) and the angles
   ``position * inv_freq`` and their cos/sin in float32 -> ``inv_freq`` and ``attention_scaling``
   recomputed at each call by the same transformers function with ``torch.float`` and
   ``torch.float32`` bound to float64 (for that call only), ``dynamic`` given ``seq_len`` = the
   longest position + 1 when it exceeds ``max_position_embeddings`` (as ``dynamic_rope_update``
   does; longrope's switch is not reproduced, no case uses it), angles and cos/sin in float64.
4. ``torch.nn.functional.softmax``: every family's ``eager_attention_forward`` calls it with
   ``dtype=torch.float32``; a float64 input is kept in float64 (other inputs are untouched).
5. ``GemmaTextScaledWordEmbedding.forward``, ``Gemma2TextScaledWordEmbedding.forward``: the
   ``embed_scale`` buffer is ``torch.tensor(hidden_size ** 0.5)`` made in float32 -> the Python
   float ``scalar_embed_scale`` in the weight's dtype (equal for hidden 64, where sqrt is 8).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from .hf import TORCH_DTYPES, build, save, torch, transformers

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")
_MODULES = {f: getattr(transformers.models, f) for f in FAMILIES}
_PREFIX = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma": "Gemma",
           "gemma2": "Gemma2"}
SEQ = 12  # longer than the sliding windows below, so the window changes the result
BATCH = 2

_COMMON = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-6}


@dataclass(frozen=True)
class Case:
    family: str
    kwargs: dict[str, Any]  # the config's arguments besides _COMMON
    what: str

    @property
    def model_cls(self):
        return getattr(transformers, f"{_PREFIX[self.family]}ForCausalLM")

    def config(self, **overrides: Any):
        return getattr(transformers, f"{_PREFIX[self.family]}Config")(**{**_COMMON, **self.kwargs, **overrides})


CASES = {c.family: c for c in (
    Case("llama", dict(num_hidden_layers=2, attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                       rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 16}),
         "llama3 rope_scaling, attention and MLP biases, untied head"),
    Case("mistral", dict(num_hidden_layers=2, head_dim=24, sliding_window=5, rope_theta=20000.0),
         "sliding window 5 < 12 tokens, head_dim 24 != 64/4"),
    Case("qwen2", dict(num_hidden_layers=2, tie_word_embeddings=True), "q/k/v biases, tied head"),
    Case("qwen3", dict(num_hidden_layers=2, head_dim=32, attention_bias=False, tie_word_embeddings=False),
         "QK-norm, head_dim 32"),
    Case("gemma", dict(num_hidden_layers=2, head_dim=16), "(1 + w) RMSNorm, sqrt(d) embedding scale, GeGLU tanh, tied"),
    # small caps, so tanh bends the values; layers 0 and 2 slide
    Case("gemma2", dict(num_hidden_layers=4, head_dim=16, sliding_window=4, query_pre_attn_scalar=24,
                        attn_logit_softcapping=0.5, final_logit_softcapping=3.0),
         "sandwich norms, soft-capping, query_pre_attn_scalar, window 4 on layers 0 and 2"),
)}


# ---- float64 patches ---------------------------------------------------------------------------


def _rms_forward(self, hidden_states):
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _gemma_rms_forward(self, x):
    return self._norm(x) * (1.0 + self.weight)


def _inv_freq64(rotary, seq_len: int) -> tuple[torch.Tensor, float]:
    fn = (rotary.compute_default_rope_parameters if rotary.rope_type == "default"
          else sys.modules[type(rotary).__module__].ROPE_INIT_FUNCTIONS[rotary.rope_type])
    kwargs = {}
    if rotary.rope_type == "dynamic" and seq_len > rotary.original_max_seq_len:  # dynamic_rope_update's growth
        kwargs["seq_len"] = seq_len
    with mock.patch.object(torch, "float", torch.float64), mock.patch.object(torch, "float32", torch.float64):
        inv_freq, scaling = fn(rotary.config, **kwargs)
    assert inv_freq.dtype == torch.float64, inv_freq.dtype
    return inv_freq, scaling


def _rotary_forward(self, x, position_ids):
    inv_freq, scaling = _inv_freq64(self, int(position_ids.max()) + 1)
    freqs = position_ids[..., None].to(torch.float64) * inv_freq.to(x.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)


def _embed_forward(self, input_ids):
    return torch.nn.Embedding.forward(self, input_ids) * torch.tensor(self.scalar_embed_scale, dtype=self.weight.dtype)


_softmax = torch.nn.functional.softmax


def _softmax64(x, dim=None, _stacklevel=3, dtype=None):
    if x.dtype == torch.float64 and dtype == torch.float32:
        dtype = torch.float64
    return _softmax(x, dim=dim, _stacklevel=_stacklevel, dtype=dtype)


@contextlib.contextmanager
def float64_islands() -> Iterator[None]:
    """Patch transformers' float32 islands (the module docstring lists them) while open."""
    with contextlib.ExitStack() as stack:
        for fam, prefix in _PREFIX.items():
            mod = getattr(_MODULES[fam], f"modeling_{fam}")
            rms = getattr(mod, f"{prefix}RMSNorm")
            stack.enter_context(mock.patch.object(rms, "forward", _gemma_rms_forward if fam.startswith("gemma")
                                                  else _rms_forward))
            stack.enter_context(mock.patch.object(getattr(mod, f"{prefix}RotaryEmbedding"), "forward", _rotary_forward))
            if fam.startswith("gemma"):
                emb = getattr(mod, f"{prefix}TextScaledWordEmbedding")
                stack.enter_context(mock.patch.object(emb, "forward", _embed_forward))
        stack.enter_context(mock.patch.object(torch.nn.functional, "softmax", _softmax64))
        yield


# ---- checkpoints and references ------------------------------------------------------------


def make(family: str, directory: Path, dtype: str, seed: int = 0, **overrides: Any):
    """(the transformers model in ``dtype``, the directory it is saved in, in ``dtype``);
    ``overrides`` change the case's config arguments."""
    model = build(CASES[family].model_cls, CASES[family].config(**overrides), seed=seed)
    save(model, directory, dtype)
    return model.to(TORCH_DTYPES[dtype]), Path(directory)


def reload(family: str, directory: Path, dtype: str):
    """The checkpoint at ``directory`` read back by transformers and cast to ``dtype``."""
    model = CASES[family].model_cls.from_pretrained(directory, attn_implementation="eager")
    return model.to(TORCH_DTYPES[dtype]).eval()


def tokens(batch: int = BATCH, seq: int = SEQ, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, _COMMON["vocab_size"], (batch, seq)).astype(np.int64)


def logits(model, ids: np.ndarray) -> np.ndarray:
    """transformers' logits for int64 ``ids`` [B, T]; a float64 model runs with its float32
    islands patched (``float64_islands``)."""
    float64 = next(model.parameters()).dtype == torch.float64
    with torch.no_grad(), float64_islands() if float64 else contextlib.nullcontext():
        return model(input_ids=torch.as_tensor(ids)).logits.numpy()
