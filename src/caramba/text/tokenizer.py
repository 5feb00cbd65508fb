"""Tokenizers: Hugging Face ``tokenizer.json`` files (through the ``tokenizers`` library) and
caramba's character vocabulary, with one interface and a streaming decoder.

``load_tokenizer(path)`` reads a folder (``tokenizer.json`` plus the optional
``tokenizer_config.json``, ``special_tokens_map.json`` and ``chat_template.jinja``) or a
``tokenizer.json`` file. ``CharTokenizer(vocab)`` is the vocabulary of the ``text`` dataset
(``sorted(set(text))``; a character's ID is its index).

Every tokenizer has ``encode``, ``decode``, ``vocab_size``, ``bos_id``/``eos_id``/``pad_id``,
``token_to_id``, ``apply_chat_template`` and ``stream()``: a ``StreamDecoder`` that turns IDs
pushed one at a time into text without ever emitting half a character. ``tokenizers`` and
``jinja2`` are imported only when a Hugging Face tokenizer is loaded or a template rendered
(``pip install caramba[pretrained]``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from caramba.errors import CarambaError, did_you_mean

# Files of a Hugging Face tokenizer folder that load_tokenizer reads (the first is required).
FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
# The named special tokens transformers passes to a chat template (its SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# tokenizer.json model types the `tokenizers` library reads.
MODEL_TYPES = ("BPE", "WordPiece", "WordLevel", "Unigram")
REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole UTF-8 character
# The end-of-text token of a trained BPE (ID 0, its eos_token): GPT-2's text for it.
END_OF_TEXT = "<|endoftext|>"
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # SentencePiece byte-fallback tokens


class TokenizerError(CarambaError):
    """A tokenizer could not be loaded or used: a missing or unreadable ``tokenizer.json``, an
    unknown model type, a character or ID outside the vocabulary, no chat template. The message
    names the file, token or position; the hint says how to fix it."""


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise TokenizerError(f"this needs the `{module.split('.')[0]}` package, which is not installed",
                             hint="pip install 'caramba[pretrained]'") from None


class BaseTokenizer:
    """What every caramba tokenizer offers. Subclasses implement ``encode``, ``decode``,
    ``token_to_id``, ``id_to_token`` and ``vocab_size``."""

    special_tokens: dict[str, str]  # name (bos_token, eos_token, ...) -> token text
    chat_template: str | None = None

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        raise NotImplementedError

    def token_to_id(self, token: str) -> int | None:
        raise NotImplementedError

    def id_to_token(self, token_id: int) -> str | None:
        raise NotImplementedError

    def _special_id(self, name: str) -> int | None:
        token = self.special_tokens.get(name)
        return None if token is None else self.token_to_id(token)

    @property
    def bos_id(self) -> int | None:
        """ID of the beginning-of-sequence token (``bos_token`` of the config), or None."""
        return self._special_id("bos_token")

    @property
    def eos_id(self) -> int | None:
        """ID of the end-of-sequence token (``eos_token`` of the config), or None."""
        return self._special_id("eos_token")

    @property
    def pad_id(self) -> int | None:
        """ID of the padding token (``pad_token`` of the config), or None."""
        return self._special_id("pad_token")

    def _ids(self, ids: Iterable[int]) -> list[int]:
        out = [int(i) for i in ids]
        n = self.vocab_size
        for pos, i in enumerate(out):
            if not 0 <= i < n:
                raise TokenizerError(f"token ID {i} at position {pos} is outside the vocabulary (0 to {n - 1})")
        return out

    def holds(self, token_id: int) -> bool:
        """Whether a streaming decoder must wait for the next token before emitting text that
        ends with this one (a byte-fallback token ``<0xNN>``: its decoder reads a run of them
        together)."""
        return False

    def stream(self, skip_special_tokens: bool = False) -> StreamDecoder:
        """A decoder for IDs that arrive one at a time (generation): see ``StreamDecoder``."""
        return StreamDecoder(self, skip_special_tokens)

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                            **kwargs: Any) -> str:
        """Render ``messages`` (dicts with ``role`` and ``content``) with the tokenizer's jinja
        ``chat_template``, as ``transformers``' ``apply_chat_template(tokenize=False)`` does: a
        sandboxed environment (``trim_blocks``, ``lstrip_blocks``, ``loopcontrols``),
        ``raise_exception``, ``strftime_now``, a ``tojson`` that keeps non-ASCII text, and the named
        special tokens (``bos_token``, ``eos_token``, ...) in the context; ``kwargs`` are added to
        the context too. Keys whose value is None are dropped from each message."""
        if self.chat_template is None:
            raise TokenizerError("this tokenizer has no chat template",
                                 hint="a Hugging Face folder carries it in tokenizer_config.json (`chat_template`) "
                                 "or chat_template.jinja; format the prompt yourself and use encode()")
        if isinstance(messages, Mapping) or not all(isinstance(m, Mapping) for m in messages):
            raise TokenizerError("messages must be a list of dicts such as {'role': 'user', 'content': 'Hi'}")
        chat = [{k: v for k, v in m.items() if v is not None} for m in messages]
        for m in chat:  # transformers passes reasoning under every name templates read it by
            reasoning = next((m[k] for k in ("reasoning_content", "thinking", "reasoning") if k in m), None)
            if reasoning is not None:
                m.update(thinking=reasoning, reasoning_content=reasoning)
        template = _compile_template(self.chat_template)
        context = {**self.special_tokens, **kwargs, "range": _budget_range()}
        try:
            text = template.render(messages=chat, tools=context.pop("tools", None),
                                   documents=context.pop("documents", None),
                                   add_generation_prompt=add_generation_prompt, **context)
        except (Exception, RecursionError) as exc:  # a template is untrusted code: every failure is its own
            raise TokenizerError(f"the chat template failed: {type(exc).__name__}: {str(exc)[:300]}") from None
        if len(text) > MAX_TEMPLATE_OUTPUT:
            raise TokenizerError(f"the chat template wrote {len(text):,} characters (limit {MAX_TEMPLATE_OUTPUT:,})")
        return text


# A chat template is code from a downloaded file, run in jinja2's sandbox (no attribute escapes).
# The sandbox does not bound work or memory, so these do: no repeat (`'a' * n`), power, width or
# call argument beyond MAX_TEMPLATE_INT, at most MAX_TEMPLATE_RANGE loop items from range() in one
# render, and at most MAX_TEMPLATE_OUTPUT characters of output.
MAX_TEMPLATE_INT = 10**6
MAX_TEMPLATE_RANGE = 10**6
MAX_TEMPLATE_OUTPUT = 10**7
_WIDE = re.compile(r"\d{7,}")  # a 7-digit width or precision in a format string


def _refuse(what: str) -> None:
    from jinja2.exceptions import SecurityError

    raise SecurityError(f"{what} is over the chat template limits")


def _check_args(args: Iterable[Any]) -> None:
    for a in args:
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_TEMPLATE_INT:
            _refuse(f"the argument {a}")
        if isinstance(a, str) and len(a) > MAX_TEMPLATE_OUTPUT:
            _refuse(f"a string of {len(a):,} characters")


def _budget_range() -> Any:
    used = [0]

    def bounded_range(*args: Any) -> range:
        _check_args(args)
        r = range(*args)
        used[0] += len(r)
        if used[0] > MAX_TEMPLATE_RANGE:
            _refuse(f"{used[0]:,} range() items in one render")
        return r

    return bounded_range


def _bounded_filter(f: Any) -> Any:
    @functools.wraps(f)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _check_args([*args[1:], *kwargs.values()])  # args[0]: the value, or the context/environment
        if args and isinstance(args[0], str) and getattr(f, "__name__", "") == "do_format" and _WIDE.search(args[0]):
            _refuse("a format width")
        return f(*args, **kwargs)

    return bounded


def _sandbox_class() -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedSandbox(ImmutableSandboxedEnvironment):  # type: ignore[misc]
        intercepted_binops = frozenset(["*", "**", "%"])

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
                if right > 0 and left.bit_length() * right > 64 * MAX_TEMPLATE_INT:
                    _refuse(f"{left} ** {right}")
            if operator == "*":
                for a, b in ((left, right), (right, left)):
                    if isinstance(a, (str, list, tuple)) and isinstance(b, int) and len(a) * b > MAX_TEMPLATE_OUTPUT:
                        _refuse(f"a repeat of {len(a)} items {b} times")
            if operator == "%" and isinstance(left, str) and _WIDE.search(left):
                _refuse("a format width")
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            _check_args([*args, *kwargs.values()])
            owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)  # str.format is wrapped
            if isinstance(owner, str) and _WIDE.search(owner):
                _refuse("a format width")
            return super().call(__context, __obj, *args, **kwargs)

    return BoundedSandbox


@functools.lru_cache(maxsize=16)
def _compile_template(source: str) -> Any:
    _need("jinja2")
    from datetime import datetime

    import jinja2
    import jinja2.ext
    import jinja2.nodes
    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    class Generation(jinja2.ext.Extension):  # `{% generation %}` marks assistant text; rendered as its body
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    env = _sandbox_class()(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    for name, f in list(env.filters.items()):
        env.filters[name] = _bounded_filter(f)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TokenizerError(f"the chat template is not valid jinja (line {exc.lineno}): {exc.message}") from None
    except (Exception, RecursionError) as exc:  # e.g. expressions nested past the parser's recursion limit
        raise TokenizerError(f"the chat template cannot be compiled: {type(exc).__name__}: {str(exc)[:200]}") from None


class StreamDecoder:
    """Incremental decoding: ``push(token_id)`` returns the text the new token completes (maybe
    ""), ``flush()`` the rest. The pieces never split a UTF-8 character, and all pushes plus
    ``flush()`` concatenate to ``decode(all ids)``.

    Method (the one of transformers' ``TextStreamer`` and ``tokenizers``' ``DecodeStream``): the
    last tokens are re-decoded from ``prefix`` (the start of the previous emission, kept for
    context: SentencePiece's leading-space marker and WordPiece's ``##`` depend on the token
    before) and the text past the previous emission is emitted once it does not end with U+FFFD
    (an unfinished character) and its last token is not a byte-fallback token. Each push costs
    O(window), not O(tokens so far). ``DecodeStream`` itself is not used: it has no flush (bytes
    of a character left unfinished at the end are never returned) and it raises on some invalid
    sequences.
    """

    def __init__(self, tokenizer: BaseTokenizer, skip_special_tokens: bool = False) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self._ids: list[int] = []  # the window: ids[0:read] were emitted (ids[0:...] only as context)
        self._read = 0
        self._prefix = ""  # decode(ids[0:read])

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_id: int) -> str:
        """Add one token; return the new text it completes ("" while a character is unfinished)."""
        (token_id,) = self.tokenizer._ids([token_id])
        self._ids.append(token_id)
        text = self._decode(self._ids)
        if (len(text) <= len(self._prefix) or text.endswith(REPLACEMENT) or not text.startswith(self._prefix)
                or self.tokenizer.holds(token_id)):
            return ""
        new = text[len(self._prefix):]
        # The emitted tokens become the next window's context.
        self._ids = self._ids[self._read:]
        self._read = len(self._ids)
        self._prefix = self._decode(self._ids)
        return new

    def flush(self) -> str:
        """Return the text of the tokens pushed but not yet emitted, and start over."""
        text = self._decode(self._ids)
        new = text[len(self._prefix):] if text.startswith(self._prefix) else text
        self._ids, self._read, self._prefix = [], 0, ""
        return new


class CharTokenizer(BaseTokenizer):
    """The character vocabulary of the ``text`` dataset: ``vocab`` lists distinct characters
    and a character's ID is its index (``sorted(set(text))`` for a dataset).

    ``encode`` refuses a character outside the vocabulary, naming it and its position, unless
    ``unk`` names a vocabulary character to use for every unknown one. There are no special
    tokens and no chat template.
    """

    def __init__(self, vocab: Sequence[str], unk: str | None = None) -> None:
        self.vocab = list(vocab)
        self.index: dict[str, int] = {}
        for i, c in enumerate(self.vocab):
            if not isinstance(c, str) or len(c) != 1:
                raise TokenizerError(f"character vocabulary entry {i} is {c!r}, not one character")
            if c in self.index:
                raise TokenizerError(f"character vocabulary lists {c!r} twice (entries {self.index[c]} and {i})")
            self.index[c] = i
        if unk is not None and unk not in self.index:
            raise TokenizerError(f"unk {unk!r} is not in the character vocabulary")
        self.unk = unk
        self.special_tokens = {}

    def __repr__(self) -> str:
        return f"CharTokenizer({len(self.vocab)} characters)"

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """IDs of the characters of ``text`` (``add_special_tokens`` has no effect: there are none)."""
        index = self.index
        try:
            return [index[c] for c in text]
        except KeyError:
            pass
        unk = None if self.unk is None else index[self.unk]
        out = []
        for pos, c in enumerate(text):
            i = index.get(c, unk)
            if i is None:
                raise TokenizerError(f"character {c!r} (U+{ord(c):04X}) at position {pos} is not in the vocabulary "
                                     f"of {len(self.vocab)} characters",
                                     hint="remove it from the text, or build the tokenizer with unk=<a vocabulary "
                                     "character> to map unknown characters to it")
            out.append(i)
        return out

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The characters of ``ids``; an ID outside the vocabulary is an error."""
        vocab = self.vocab
        return "".join([vocab[i] for i in self._ids(ids)])

    def token_to_id(self, token: str) -> int | None:
        return self.index.get(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.vocab[token_id] if 0 <= token_id < len(self.vocab) else None


class Tokenizer(BaseTokenizer):
    """A Hugging Face tokenizer (``tokenizer.json``, any model type the ``tokenizers`` library
    reads: BPE, byte-level BPE, WordPiece, WordLevel, Unigram) with the special tokens and chat
    template of its ``tokenizer_config.json``. Build it with ``load_tokenizer``.

    ``encode``/``decode`` are the library's (``add_special_tokens`` applies the file's
    post-processor, e.g. BERT's [CLS] ... [SEP]); ``vocab_size`` is one more than the largest ID,
    added tokens included; ``backend`` is the ``tokenizers.Tokenizer``.
    """

    def __init__(self, backend: Any, special_tokens: Mapping[str, str] | None = None,
                 chat_template: str | None = None, source: str = "") -> None:
        self.backend = backend
        self.source = source
        vocab = backend.get_vocab(with_added_tokens=True)
        self._vocab_size = max(vocab.values(), default=-1) + 1
        self.special_tokens = dict(special_tokens or {})
        for name, token in self.special_tokens.items():
            if backend.token_to_id(token) is None:
                raise TokenizerError(f"{source or 'the tokenizer'}: {name} {token!r} is not in the vocabulary",
                                     hint=f"add it to tokenizer.json's added_tokens or remove {name} from "
                                     "tokenizer_config.json")
        self.chat_template = chat_template
        self._byte_tokens = frozenset(i for t, i in vocab.items() if _BYTE_TOKEN.fullmatch(t))

    def __repr__(self) -> str:
        model = type(self.backend.model).__name__
        return f"Tokenizer({model}, {self.vocab_size} tokens{', ' + self.source if self.source else ''})"

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token IDs of ``text``."""
        if not isinstance(text, str):
            raise TokenizerError(f"encode takes a str, got {type(text).__name__}")
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids`` (bytes that are not valid UTF-8 become U+FFFD); an ID outside the
        vocabulary is an error."""
        return self.backend.decode(self._ids(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def holds(self, token_id: int) -> bool:
        return token_id in self._byte_tokens

    def save(self, path: str | Path) -> None:
        """Write the ``tokenizer.json`` (the model only; not the config or template)."""
        self.backend.save(str(path))

    def save_folder(self, folder: str | Path) -> None:
        """Write ``tokenizer.json`` and a ``tokenizer_config.json`` with the special tokens (and
        chat template) into ``folder`` (created if needed): ``load_tokenizer(folder)`` gives the
        same IDs and the same ``eos_id``/``bos_id``/``pad_id``."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(out / "tokenizer.json"))
        config: dict[str, Any] = dict(self.special_tokens)
        if self.chat_template is not None:
            config["chat_template"] = self.chat_template
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")


def _special(value: Any) -> str | None:
    # tokenizer_config.json writes a token as a string or as an AddedToken dict {"content": ...}
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _read_json(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TokenizerError(f"{path.name} is not UTF-8 text", hint=f"{what}") from None
    except OSError as exc:
        raise TokenizerError(f"cannot read {path}: {exc.strerror or type(exc).__name__}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:  # position only: the message must not quote the file
        raise TokenizerError(f"{path.name} is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                             hint=what) from None
    except RecursionError:
        raise TokenizerError(f"{path.name} is not JSON a tokenizer writes: it nests too deeply", hint=what) from None


def tokenizer_files(path: str | Path) -> dict[str, Path]:
    """The files ``load_tokenizer(path)`` would read: ``{name: path}`` for the ``FILES`` that
    exist (``path`` a folder) or ``{"tokenizer.json": path}`` (``path`` a file). Raises
    TokenizerError naming what was looked for when there is no tokenizer.json."""
    p = Path(path).expanduser()
    if p.is_dir():
        found = {name: p / name for name in FILES if (p / name).is_file()}
        if "tokenizer.json" not in found:
            other = [n for n in ("tokenizer.model", "vocab.txt", "vocab.json", "spiece.model") if (p / n).is_file()]
            raise TokenizerError(
                f"no tokenizer.json in {p} (looked for {p / 'tokenizer.json'})"
                + (f"; it has {', '.join(other)}" if other else ""),
                hint="caramba reads the `tokenizers` format; transformers converts others: "
                "AutoTokenizer.from_pretrained(folder).save_pretrained(folder)" if other else None)
        return found
    if p.is_file():
        return {"tokenizer.json": p}
    raise TokenizerError(f"no tokenizer at {p}: it is neither a folder with tokenizer.json nor a tokenizer.json file")


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a Hugging Face tokenizer: a folder with ``tokenizer.json`` (and optionally
    ``tokenizer_config.json``, ``special_tokens_map.json``, ``chat_template.jinja``) or a
    ``tokenizer.json`` file."""
    return tokenizer_from_files(tokenizer_files(path))


def tokenizer_from_files(files: Mapping[str, Path]) -> Tokenizer:
    """Build a Tokenizer from the files of ``tokenizer_files`` (the caller may have checked them)."""
    tk = _need("tokenizers")
    main = Path(files["tokenizer.json"])
    what = "give the tokenizer.json written by the `tokenizers` library or transformers' save_pretrained"
    spec = _read_json(main, what)
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
        raise TokenizerError(f"{main.name} is not a tokenizer file: it has no `model` object", hint=what)
    kind = spec["model"].get("type")
    if kind is not None and kind not in MODEL_TYPES:
        raise TokenizerError(f"{main.name}: unknown model type {str(kind)[:40]!r}; {did_you_mean(str(kind), MODEL_TYPES)}",
                             hint=what)
    try:
        backend = tk.Tokenizer.from_str(json.dumps(spec))
    except Exception as exc:  # the library's messages are serde's: keep the first line, without the file's text
        msg = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise TokenizerError(f"{main.name} is not a tokenizer file the `tokenizers` library reads: {msg}",
                             hint=what) from None
    config: dict[str, Any] = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):  # the second wins, as in transformers
        if name in files:
            data = _read_json(Path(files[name]), "a JSON object written by transformers' save_pretrained")
            if not isinstance(data, dict):
                raise TokenizerError(f"{name} is not a JSON object")
            config.update({k: v for k, v in data.items() if k in SPECIAL_TOKENS or k == "chat_template"})
    special = {k: t for k in SPECIAL_TOKENS if (t := _special(config.get(k))) is not None}
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": "..."}, ...]
        named = {t.get("name"): t.get("template") for t in template
                 if isinstance(t, dict) and isinstance(t.get("name"), str)}
        template = named.get("default")
    if "chat_template.jinja" in files:
        try:
            template = Path(files["chat_template.jinja"]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenizerError(f"cannot read chat_template.jinja: {type(exc).__name__}") from None
    if template is not None and not isinstance(template, str):
        raise TokenizerError("tokenizer_config.json: chat_template must be a string")
    return Tokenizer(backend, special, template, source=str(main.parent if main.name == "tokenizer.json" else main))


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2,
              special_tokens: Sequence[str] = ()) -> Tokenizer:
    """Train a byte-level BPE tokenizer (GPT-2's scheme: every byte is a token, so any text
    encodes) on ``texts``; deterministic for the same texts and settings.

    ID 0 is the end-of-text token ``<|endoftext|>`` (``END_OF_TEXT``; GPT-2's text), the
    tokenizer's ``eos_token``, so ``eos_id == 0`` and generation stops there; ``special_tokens``
    follow it (IDs 1, 2, ...), then the 256 bytes and the merges: ``vocab_size`` counts them all.
    Where the training text contains ``<|endoftext|>`` (documents joined by it, as in GPT-2's
    and TinyStories' files) it encodes as that one token, so a model learns where texts end."""
    tk = _need("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    special = [END_OF_TEXT, *dict.fromkeys(t for t in special_tokens if t != END_OF_TEXT)]
    if vocab_size < 256 + len(special):
        raise TokenizerError(f"a byte-level BPE vocab_size must be at least {256 + len(special)} "
                             f"(256 bytes and {len(special)} special token{'s' if len(special) > 1 else ''}: "
                             f"{', '.join(special)}), got {vocab_size}")
    backend = tk.Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=special)
    backend.train_from_iterator(texts, trainer)
    return Tokenizer(backend, {"eos_token": END_OF_TEXT}, source="trained byte-level BPE")
