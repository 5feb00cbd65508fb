"""Small random-weight Hugging Face checkpoints, made offline, and how they are compared.

``transformers`` (a test extra, with the CPU build of torch) builds a model from a config
object with random weights; ``save`` writes it with ``save_pretrained`` in the dtype asked for.
Nothing is downloaded: no ``from_pretrained("<hub name>")`` anywhere in the tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

transformers = pytest.importorskip("transformers", reason="the Hugging Face references need `transformers` (test extra)")
torch = pytest.importorskip("torch", reason="the Hugging Face references need torch (test extra)")

TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def build(model_cls, config, seed: int = 0):
    """A ``model_cls(config)`` with seeded random weights, in eval mode, eager attention."""
    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    model = model_cls(config).eval()
    with torch.no_grad():  # random init leaves some tensors at exact 0/1: perturb every one so each is tested
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model


def save(model, directory: Path, dtype: str = "float32") -> Path:
    """Write ``model`` as a Hugging Face directory (config.json + model.safetensors) in ``dtype``."""
    model.to(TORCH_DTYPES[dtype]).save_pretrained(directory, safe_serialization=True)
    return Path(directory)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| over the whole tensor."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300))
