"""caramba.text: tokenizers for language models.

``load_tokenizer`` reads a Hugging Face ``tokenizer.json`` (folder or file) through the
``tokenizers`` library (``pip install caramba[pretrained]``); ``CharTokenizer`` is the
character vocabulary of the ``text`` dataset; ``train_bpe`` trains a byte-level BPE. Each has
``encode``/``decode``, special-token IDs, ``apply_chat_template`` and ``stream()`` (a
``StreamDecoder`` that never emits half a character). Nothing heavy is imported here.
"""

from caramba.text.tokenizer import (
    BaseTokenizer,
    CharTokenizer,
    StreamDecoder,
    Tokenizer,
    TokenizerError,
    load_tokenizer,
    train_bpe,
)

__all__ = ["BaseTokenizer", "CharTokenizer", "StreamDecoder", "Tokenizer", "TokenizerError", "load_tokenizer",
           "train_bpe"]
