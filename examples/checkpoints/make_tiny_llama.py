"""Make examples/checkpoints/tiny-llama: a small Llama-architecture checkpoint with random
weights, in the Hugging Face format (config.json + model.safetensors), for the LoRA example.

    python examples/checkpoints/make_tiny_llama.py   # needs transformers and torch (caramba[test])
    python examples/checkpoints/make_tiny_llama.py --tokenizer   # the tokenizer files only

It stands in for a published checkpoint (nothing may be downloaded): transformers builds the
model from a config object, seeded, and saves it with save_pretrained in float32. Its weights
are drawn wider than transformers' default (initializer_range 0.3, not 0.02) so that a frozen
random base still spans useful outputs for the adapters to steer. The vocabulary
(128) covers the characters of examples/data/python_reference.txt, as the text dataset numbers
them; its tokenizer (tokenizer.json through the tokenizers library, one token per character,
no merges) numbers them the same way, and tokenizer_config.json gives it a small chat template,
so `caramba generate` and `caramba chat` run on the folder as on a published checkpoint. The
committed files are what this script writes; rerunning it reproduces them.
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parent / "tiny-llama"
TEXT = Path(__file__).resolve().parents[1] / "data" / "python_reference.txt"
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def write_tokenizer(out: Path) -> None:
    """tokenizer.json: the text dataset's character IDs (sorted(set(text)), padded to 128 with
    unused private-use characters) as a BPE without merges; tokenizer_config.json: the chat template."""
    import json

    from tokenizers import Tokenizer, decoders
    from tokenizers.models import BPE

    chars = sorted(set(TEXT.read_text(encoding="utf-8")))
    chars += [chr(0xE000 + i) for i in range(128 - len(chars))]
    tok = Tokenizer(BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[]))
    tok.decoder = decoders.Fuse()
    tok.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
              "model_max_length": 256, "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    import sys

    if "--tokenizer" in sys.argv:
        write_tokenizer(OUT)
        print(f"wrote the tokenizer of {OUT}")
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, initializer_range=0.3,
    )
    model = LlamaForCausalLM(config).eval()
    model.to(torch.float32).save_pretrained(OUT, safe_serialization=True)
    write_tokenizer(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
