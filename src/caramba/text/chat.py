"""A conversation as the text a chat model continues (shared by ``caramba chat`` and the chat
runtime program)."""

from __future__ import annotations

from typing import Any


def chat_prompt(tok: Any, messages: list[dict[str, str]]) -> str:
    """The conversation as the model's chat template writes it (tokenizer_config.json or
    chat_template.jinja), or, for a tokenizer without one, a plain transcript
    (``role: text`` lines, then ``assistant:``)."""
    if tok.chat_template:
        return tok.apply_chat_template(messages, add_generation_prompt=True)
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"


__all__ = ["chat_prompt"]
