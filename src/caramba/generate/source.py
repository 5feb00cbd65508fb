"""Open what generation needs from a name: a Hugging Face folder or a recorded run.

Shared by ``caramba generate``/``caramba chat`` and the server's ``POST /generate``.
"""

from __future__ import annotations

from typing import Any


def open_model(model: str, *, backend: str, dtype: str, store: str | None, config: str | None,
               text: bool, max_bytes: int | None = None) -> tuple[Any, Any, Any]:
    """``(make(capacity) -> Generator, tokenizer or None, prepared manifest)`` for a Hugging Face
    folder (its tokenizer.json) or a character-level run (its dataset's characters); ``text``:
    a tokenizer is needed. ``max_bytes`` bounds the weights and KV caches (a ResourceError
    before weights are read: from the checkpoint's headers, or a run checkpoint's size)."""
    from caramba.errors import ConfigError
    from caramba.generate import Generator, is_checkpoint_folder

    if is_checkpoint_folder(model):
        import caramba.pretrained as pt

        source = pt.open(model, dtype=dtype)
        tok = None
        if text:
            from caramba.text import load_tokenizer

            tok = load_tokenizer(model)
        return ((lambda cap: Generator.from_pretrained(source, backend=backend, capacity=cap, max_bytes=max_bytes)),
                tok, source.prep)
    from caramba.config import load_settings
    from caramba.generate import run_model
    from caramba.store.runs import open_runs

    runs = open_runs(load_settings(config, overrides={"store": store}).store)
    prep, params, rec = run_model(model, store=runs, max_bytes=max_bytes)
    tok = None
    if text:
        vocab = getattr(prep.dataset, "vocab", None)
        tok = getattr(prep.dataset, "tokenizer", None)
        if tok is None and vocab is None:
            raise ConfigError(f"run {rec.id}'s dataset has no tokenizer or character vocabulary; give --tokens")
        if tok is None:
            from caramba.text import CharTokenizer

            tok = CharTokenizer(vocab)
    return ((lambda cap: Generator.from_manifest(prep, params, backend=backend, capacity=cap, max_bytes=max_bytes)),
            tok, prep)


__all__ = ["open_model"]
