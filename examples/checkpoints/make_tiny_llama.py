"""Make examples/checkpoints/tiny-llama: a small Llama-architecture checkpoint with random
weights, in the Hugging Face format (config.json + model.safetensors), for the LoRA example.

    python examples/checkpoints/make_tiny_llama.py   # needs transformers and torch (caramba[test])

It stands in for a published checkpoint (nothing may be downloaded): transformers builds the
model from a config object, seeded, and saves it with save_pretrained in float32. Its weights
are drawn wider than transformers' default (initializer_range 0.3, not 0.02) so that a frozen
random base still spans useful outputs for the adapters to steer. The vocabulary
(128) covers the characters of examples/data/python_reference.txt, as the text dataset numbers
them. The committed files are what this script writes; rerunning it reproduces them.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

OUT = Path(__file__).resolve().parent / "tiny-llama"


def main() -> None:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, initializer_range=0.3,
    )
    model = LlamaForCausalLM(config).eval()
    model.to(torch.float32).save_pretrained(OUT, safe_serialization=True)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
