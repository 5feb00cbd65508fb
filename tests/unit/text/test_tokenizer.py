"""caramba.text tokenizers against the `tokenizers` library and transformers, offline.

Three small tokenizers are trained on examples/data/python_reference.txt (plus a line of
multi-byte text): byte-level BPE (GPT-2's scheme), WordPiece (BERT's) and a Unigram with
SentencePiece byte fallback and Llama's decoder. Nothing is downloaded.
"""

import json
import random
from pathlib import Path

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from caramba.data import DataError, load_dataset  # noqa: E402
from caramba.text import CharTokenizer, Tokenizer, TokenizerError, load_tokenizer, train_bpe  # noqa: E402

CORPUS = Path(__file__).parents[3] / "examples" / "data" / "python_reference.txt"
MULTI = "naïve café — 東京 🙂 and “quotes”, don't stop."
TEXTS = ["def f(x):\n    return x ** 2  # squares", MULTI, "  leading and trailing spaces  ", "a\n\nb\tc", ""]
REFERENCE = CORPUS.read_text(encoding="utf-8")


def _bpe():
    t = tokenizers.Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator([REFERENCE, "\n" + MULTI], trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>", "<|user|>", "<|assistant|>"], show_progress=False))
    return t


def _wordpiece():
    t = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece()
    t.train_from_iterator([REFERENCE, MULTI], trainers.WordPieceTrainer(
        vocab_size=500, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"], show_progress=False))
    return t


def _unigram():
    # Trained without the multi-byte characters: they encode as byte-fallback tokens <0xNN>.
    t = tokenizers.Tokenizer(models.Unigram())
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.train_from_iterator([REFERENCE], trainers.UnigramTrainer(
        vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>", show_progress=False))
    vocab = [tuple(v) for v in json.loads(t.to_str())["model"]["vocab"]]
    vocab += [(f"<0x{b:02X}>", 0.0) for b in range(256)]
    u = tokenizers.Tokenizer(models.Unigram(vocab=vocab, unk_id=0, byte_fallback=True))
    u.pre_tokenizer = pre_tokenizers.Metaspace()
    u.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    return u


BUILDERS = {"bpe": _bpe, "wordpiece": _wordpiece, "unigram": _unigram}
SPECIALS = {"bpe": {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"},
            "wordpiece": {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]"},
            "unigram": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}}
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
            "{{ raise_exception('system must come first') }}{% endif %}"
            "<|{{ m.role }}|>\n{{ m.content | trim }}{{ eos_token }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


@pytest.fixture(scope="module", params=list(BUILDERS))
def kind(request):
    return request.param


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One saved folder per kind (tokenizer.json + tokenizer_config.json via transformers)."""
    out = {}
    for k, build in BUILDERS.items():
        d = tmp_path_factory.mktemp(k)
        backend = build()
        backend.save(str(d / "tokenizer.json"))
        config = {**SPECIALS[k], "chat_template": TEMPLATE} if k == "bpe" else dict(SPECIALS[k])
        (d / "tokenizer_config.json").write_text(json.dumps(config))
        out[k] = d
    return out


@pytest.fixture(scope="module")
def tok(folders, kind):
    return load_tokenizer(folders[kind])


def test_encode_and_decode_match_the_tokenizers_library_and_transformers(tok, folders, kind):
    transformers = pytest.importorskip("transformers")
    ref = tokenizers.Tokenizer.from_file(str(folders[kind] / "tokenizer.json"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folders[kind] / "tokenizer.json"),
                                                clean_up_tokenization_spaces=False, **SPECIALS[kind])
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False).ids == fast.encode(text, add_special_tokens=False)
        for skip in (False, True):
            assert tok.decode(ids, skip) == ref.decode(ids, skip_special_tokens=skip) == fast.decode(
                ids, skip_special_tokens=skip)
        if kind == "bpe":  # byte-level BPE encodes any text and decodes it back exactly
            assert tok.decode(ids) == text
    assert tok.vocab_size == ref.get_vocab_size(with_added_tokens=True)
    assert tok.encode(MULTI) and tok.decode(np.array(tok.encode("x = 1"))) == ref.decode(ref.encode("x = 1").ids)


def test_special_token_ids_come_from_the_config(folders):
    bpe, wp, uni = (load_tokenizer(folders[k]) for k in ("bpe", "wordpiece", "unigram"))
    assert bpe.bos_id == bpe.eos_id == bpe.token_to_id("<|endoftext|>") == 0 and bpe.pad_id is None
    assert wp.pad_id == wp.token_to_id("[PAD]") == 3 and wp.bos_id is None and wp.eos_id is None
    assert (uni.bos_id, uni.eos_id, uni.pad_id) == (1, 2, None)
    assert bpe.decode([0, *bpe.encode("hi")], skip_special_tokens=True) == "hi"
    assert load_tokenizer(folders["bpe"] / "tokenizer.json").bos_id is None  # a bare file has no config
    # special_tokens_map.json wins over tokenizer_config.json, as in transformers
    (folders["wordpiece"] / "special_tokens_map.json").write_text(json.dumps({"pad_token": {"content": "[SEP]"}}))
    try:
        assert load_tokenizer(folders["wordpiece"]).pad_id == 2
    finally:
        (folders["wordpiece"] / "special_tokens_map.json").unlink()


def _stream(tok, ids, skip=False):
    s = tok.stream(skip)
    return [s.push(i) for i in ids] + [s.flush()]


def test_streaming_never_splits_a_character_and_adds_up_to_decode(tok, kind):
    for text in [MULTI, *TEXTS, MULTI * 3]:
        ids = tok.encode(text)
        pieces = _stream(tok, ids)
        assert "".join(pieces) == tok.decode(ids)
        assert not any("\ufffd" in p for p in pieces), pieces
        if kind == "bpe":
            assert "".join(pieces) == text
    ids = tok.encode(MULTI)
    if kind != "wordpiece":  # some character of MULTI spans several tokens: the stream waits for it
        assert "" in _stream(tok, ids)[:-1]


def test_streaming_with_special_tokens_skipped(folders):
    tok = load_tokenizer(folders["bpe"])
    ids = [0, *tok.encode(MULTI), 0, *tok.encode("next")]
    for skip in (False, True):
        assert "".join(_stream(tok, ids, skip)) == tok.decode(ids, skip)


def test_streaming_is_a_window_not_the_whole_history(folders, monkeypatch):
    tok = load_tokenizer(folders["bpe"])
    ids = tok.encode(REFERENCE[:4000])
    lengths = []
    decode = tok.decode
    monkeypatch.setattr(tok, "decode", lambda i, skip_special_tokens=False: lengths.append(len(i)) or decode(i))
    assert "".join(_stream(tok, ids)) == REFERENCE[:4000]
    assert len(ids) > 1000 and max(lengths) <= 8


def test_random_id_sequences_decode_and_stream_without_raising(tok):
    """Mutation test: random IDs (byte tokens that never finish a character, stray ## pieces,
    specials) decode without raising, and the stream still adds up to decode."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    n = tok.vocab_size
    byte_like = [i for i in range(n) if (t := tok.id_to_token(i)) and (t.startswith("<0x") or t in "ÃâĠ")]

    @hypothesis.settings(max_examples=150, deadline=None, derandomize=True)
    @hypothesis.given(st.lists(st.one_of(st.integers(0, n - 1), st.sampled_from(byte_like or [0])), max_size=40),
                      st.booleans())
    def check(ids, skip):
        text = tok.decode(ids, skip)
        assert "".join(_stream(tok, ids, skip)) == text

    check()
    rng = random.Random(0)
    base = tok.encode(MULTI)
    for _ in range(200):  # mutate a valid sequence: drop, duplicate or swap tokens
        ids = list(base)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(ids))
            op = rng.choice(("drop", "dup", "swap", "random"))
            if op == "drop" and len(ids) > 1:
                del ids[i]
            elif op == "dup":
                ids.insert(i, ids[i])
            elif op == "swap":
                j = rng.randrange(len(ids))
                ids[i], ids[j] = ids[j], ids[i]
            else:
                ids[i] = rng.randrange(n)
        assert "".join(_stream(tok, ids)) == tok.decode(ids)


def test_out_of_range_ids_are_a_clear_error(tok):
    for bad in (tok.vocab_size, -1):
        with pytest.raises(TokenizerError, match=f"token ID {bad} at position 1 is outside the vocabulary"):
            tok.decode([0, bad])
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.stream().push(tok.vocab_size)


def test_chat_template_renders_as_transformers_does(folders, tmp_path):
    transformers = pytest.importorskip("transformers")
    tok = load_tokenizer(folders["bpe"])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_file(
        str(folders["bpe"] / "tokenizer.json")), chat_template=TEMPLATE, **SPECIALS["bpe"])
    chats = [[{"role": "user", "content": "Hi ☕"}],
             [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "2+2?"},
              {"role": "assistant", "content": "4"}, {"role": "user", "content": "東京?", "name": None}]]
    for chat in chats:
        for gen in (True, False):
            assert tok.apply_chat_template(chat, add_generation_prompt=gen) == fast.apply_chat_template(
                chat, tokenize=False, add_generation_prompt=gen)
    with pytest.raises(TokenizerError, match="the chat template failed: TemplateError: system must come first"):
        tok.apply_chat_template([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])
    # transformers' save_pretrained writes the template to chat_template.jinja: that folder loads the same
    fast.save_pretrained(tmp_path / "saved")
    again = load_tokenizer(tmp_path / "saved")
    assert (tmp_path / "saved" / "chat_template.jinja").is_file()
    assert again.apply_chat_template(chats[1]) == tok.apply_chat_template(chats[1])
    assert again.encode(MULTI) == tok.encode(MULTI) and again.eos_id == tok.eos_id
    # a template that reads attributes it must not is refused by the sandbox
    (tmp_path / "saved" / "chat_template.jinja").write_text("{{ messages.__class__.__mro__ }}")
    with pytest.raises(TokenizerError, match="SecurityError|UndefinedError"):
        load_tokenizer(tmp_path / "saved").apply_chat_template(chats[0])
    (tmp_path / "saved" / "chat_template.jinja").write_text("{% for m in messages %}")
    with pytest.raises(TokenizerError, match=r"the chat template is not valid jinja \(line 1\)"):
        load_tokenizer(tmp_path / "saved").apply_chat_template(chats[0])


def test_no_chat_template_is_a_clear_error(folders):
    for t in (load_tokenizer(folders["wordpiece"]), CharTokenizer("ab")):
        with pytest.raises(TokenizerError, match="this tokenizer has no chat template"):
            t.apply_chat_template([{"role": "user", "content": "a"}])


def test_loading_errors_name_the_file_and_the_problem(tmp_path, folders):
    with pytest.raises(TokenizerError, match=r"no tokenizer.json in .*empty \(looked for .*empty/tokenizer.json\)"):
        (tmp_path / "empty").mkdir()
        load_tokenizer(tmp_path / "empty")
    (tmp_path / "sp").mkdir()
    (tmp_path / "sp" / "tokenizer.model").write_bytes(b"\x00")
    with pytest.raises(TokenizerError, match="it has tokenizer.model") as e:
        load_tokenizer(tmp_path / "sp")
    assert "save_pretrained" in str(e.value)
    with pytest.raises(TokenizerError, match="neither a folder with tokenizer.json nor a tokenizer.json file"):
        load_tokenizer(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{secret: 1")
    with pytest.raises(TokenizerError, match=r"bad.json is not JSON \(line 1, column 2") as e:
        load_tokenizer(bad)
    assert "secret" not in str(e.value)
    bad.write_text('{"version": "1.0"}')
    with pytest.raises(TokenizerError, match="is not a tokenizer file: it has no `model` object"):
        load_tokenizer(bad)
    spec = json.loads((folders["bpe"] / "tokenizer.json").read_text())
    bad.write_text(json.dumps({**spec, "model": {**spec["model"], "type": "WordPeice"}}))
    with pytest.raises(TokenizerError, match="unknown model type 'WordPeice'; did you mean 'WordPiece'"):
        load_tokenizer(bad)
    bad.write_text(json.dumps({**spec, "model": {**spec["model"], "merges": 7}}))
    with pytest.raises(TokenizerError, match="is not a tokenizer file the `tokenizers` library reads: ") as e:
        load_tokenizer(bad)
    assert "Traceback" not in str(e.value) and len(str(e.value).splitlines()) <= 2
    d = tmp_path / "cfg"
    d.mkdir()
    (d / "tokenizer.json").write_text((folders["bpe"] / "tokenizer.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    with pytest.raises(TokenizerError, match="eos_token '</s>' is not in the vocabulary"):
        load_tokenizer(d)


def test_char_tokenizer_is_the_text_datasets_vocabulary():
    text = "hello, wörld\n"
    tok = CharTokenizer(sorted(set(text)))
    ids = tok.encode(text)
    assert ids == [sorted(set(text)).index(c) for c in text] and tok.decode(ids) == text
    assert tok.vocab_size == len(set(text)) and tok.bos_id is tok.eos_id is tok.pad_id is None
    assert "".join(_stream(tok, ids)) == text and tok.token_to_id("ö") == ids[8]
    with pytest.raises(TokenizerError, match=r"character 'Z' \(U\+005A\) at position 3 is not in the vocabulary"):
        tok.encode("helZo")
    assert CharTokenizer(tok.vocab, unk="?" if "?" in tok.vocab else " ").encode("hZ")[1] == tok.token_to_id(" ")
    with pytest.raises(TokenizerError, match="lists 'a' twice"):
        CharTokenizer(["a", "b", "a"])
    with pytest.raises(TokenizerError, match="not one character"):
        CharTokenizer(["ab"])
    with pytest.raises(TokenizerError, match="token ID 99 at position 0"):
        tok.decode([99])


def test_train_bpe_is_deterministic_and_checks_its_size():
    a, b = (train_bpe([REFERENCE[:20000]], 300) for _ in range(2))
    assert a.backend.to_str() == b.backend.to_str() and a.vocab_size == 300
    with pytest.raises(TokenizerError, match="at least 257"):  # 256 bytes and <|endoftext|>
        train_bpe(["x"], 256)


# ---- the text dataset's `tokenizer:` option ---------------------------------------------------

MANIFEST = """\
name: bpe-gpt
topology:
  inputs:
    x: {{shape: [batch, seq], dtype: int64}}
    y: {{shape: [batch, seq], dtype: int64}}
  nodes:
    - {{id: gpt, op: model.gpt_tiny, in: [x], config: {{vocab_size: 320, context: 16}}}}
    - {{id: loss, op: loss.cross_entropy, in: [gpt, y]}}
  outputs: {{logits: gpt, loss: loss}}
datasets:
  text:
    source: text
    path: corpus.txt
    context: 16
    vocab_size: 320
    tokenizer: {tokenizer}
trainer: {{loss: loss, batch_size: 4, steps: 2}}
"""


def test_text_dataset_trains_bpe_from_a_manifest(tmp_path):
    from caramba.manifest.compile import prepare

    (tmp_path / "corpus.txt").write_text(REFERENCE[:30000] + MULTI, encoding="utf-8")
    (tmp_path / "m.yml").write_text(MANIFEST.format(tokenizer="{type: bpe, vocab_size: 300, min_frequency: 2}"))
    prep = prepare(tmp_path / "m.yml")
    ds = prep.datasets["text"]
    assert isinstance(ds.tokenizer, Tokenizer) and ds.tokenizer.vocab_size == 300 == len(ds.vocab)
    assert prep.dims["seq"] == 16
    stream = np.concatenate([ds.streams[s] for s in ("train", "val", "test")])
    assert ds.decode(stream) == REFERENCE[:30000] + MULTI  # byte-level BPE loses nothing
    assert ds.info["tokens"] == len(stream) < ds.info["characters"] == 30000 + len(MULTI)
    assert ds.info["vocab_size"] == 300 and "unigram_val_loss" in ds.info and "BPE" in ds.info["description"]
    b = next(ds.train_batches(2, np.random.default_rng(0)))
    np.testing.assert_array_equal(b["x"][:, 1:], b["y"][:, :-1])
    again = prepare(tmp_path / "m.yml").datasets["text"]  # deterministic training
    np.testing.assert_array_equal(again.streams["train"], ds.streams["train"])
    # the trained tokenizer saved and named by path gives the same ids
    ds.tokenizer.save(tmp_path / "tokenizer.json")
    (tmp_path / "p.yml").write_text(MANIFEST.format(tokenizer="{path: tokenizer.json}"))
    np.testing.assert_array_equal(prepare(tmp_path / "p.yml").datasets["text"].streams["val"], ds.streams["val"])
    (tmp_path / "p.yml").write_text(MANIFEST.format(tokenizer="{path: .}"))  # a folder
    np.testing.assert_array_equal(prepare(tmp_path / "p.yml").datasets["text"].streams["val"], ds.streams["val"])


def test_text_dataset_tokenizer_errors(tmp_path, folders):
    from caramba.manifest import ManifestError
    from caramba.manifest.compile import prepare

    (tmp_path / "corpus.txt").write_text(REFERENCE[:3000])
    (tmp_path / "m.yml").write_text(MANIFEST.format(tokenizer="{path: nowhere/tokenizer.json}"))
    with pytest.raises(ManifestError, match="dataset 'text': tokenizer: no tokenizer at") as e:
        prepare(tmp_path / "m.yml")
    assert e.value.line == 16  # the `tokenizer:` line, not the dataset's entry (line 12)
    (tmp_path / "m.yml").write_text(MANIFEST.format(tokenizer="{type: bpe}"))
    with pytest.raises(ManifestError, match="needs `vocab_size`") as e:
        prepare(tmp_path / "m.yml")
    assert e.value.line == 16
    (tmp_path / "m.yml").write_text(MANIFEST.format(tokenizer="{type: bpe, vocab_size: 400}"))
    with pytest.raises(ManifestError, match="vocab_size 320 is smaller than the tokenizer's vocab_size 400") as e:
        prepare(tmp_path / "m.yml")
    assert e.value.line == 16
    (tmp_path / "m.yml").write_text(MANIFEST.format(tokenizer="{path: t.json, vocab_size: 300}"))
    with pytest.raises(ManifestError, match="drop them with `path:`") as e:
        prepare(tmp_path / "m.yml")
    assert e.value.line == 16
    (tmp_path / "m.yml").write_text(MANIFEST.format(tokenizer=f"{{path: {folders['wordpiece']}}}"))
    with pytest.raises(ManifestError, match="its tokenizer has 500 tokens, more than vocab_size 320") as e:
        prepare(tmp_path / "m.yml")
    assert e.value.line == 16


BLOCK = MANIFEST.replace("    tokenizer: {tokenizer}\n", "    tokenizer:\n{tokenizer}\n")  # keys on lines 17, 18


@pytest.mark.parametrize("tokenizer, line, words", [
    ("      type: bpe\n      vocab_size: 256", 18, "greater than or equal to 257"),  # 256 bytes and <|endoftext|>
    ("      type: bpe\n      vocab_size: 400", 17, "smaller than the tokenizer's vocab_size 400"),
    ("      type: bpe", 17, "needs `vocab_size`"),
    ("      path: nowhere/tokenizer.json", 17, "tokenizer: no tokenizer at"),
    ("      path: corpus.txt", 17, "tokenizer: corpus.txt is not JSON"),
])
def test_tokenizer_errors_point_at_the_tokenizer_lines(tmp_path, tokenizer, line, words):
    """Regression: errors found while loading or training the tokenizer pointed at the dataset's
    entry (line 11); they point at the `tokenizer:` key's lines, as the schema's own errors do."""
    from caramba.manifest import ManifestError
    from caramba.manifest.compile import prepare

    (tmp_path / "corpus.txt").write_text(REFERENCE[:3000])
    text = BLOCK.format(tokenizer=tokenizer)
    assert text.splitlines()[15] == "    tokenizer:" and text.splitlines()[10] == "  text:"
    (tmp_path / "m.yml").write_text(text)
    with pytest.raises(ManifestError, match=words) as e:
        prepare(tmp_path / "m.yml")
    assert (e.value.line, e.value.path) == (line, "datasets.text.tokenizer" + ".path" * ("path:" in tokenizer)
                                            + ".vocab_size" * (line == 18))


def test_text_dataset_tokenizer_path_obeys_the_data_roots(tmp_path, folders):
    from caramba.data.sources import data_roots

    (tmp_path / "c.txt").write_text(REFERENCE[:3000])
    spec = {"source": "text", "path": "c.txt", "context": 8, "tokenizer": {"path": str(folders["bpe"])}}
    with data_roots([tmp_path]), pytest.raises(DataError, match="outside the folders this server reads"):
        load_dataset("t", spec, tmp_path)
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").symlink_to(folders["bpe"] / "tokenizer.json")
    with data_roots([tmp_path]), pytest.raises(DataError, match="outside the folders this server reads"):
        load_dataset("t", {**spec, "tokenizer": {"path": "tok"}}, tmp_path)
    ds = load_dataset("t", {**spec, "tokenizer": {"path": "tok"}}, tmp_path)  # no roots: read
    assert ds.decode(ds.streams["train"][:20]) == REFERENCE[:3000][: len(ds.decode(ds.streams["train"][:20]))]


def test_text_dataset_without_tokenizer_is_unchanged(tmp_path):
    text = "abcabcabd" * 200
    (tmp_path / "c.txt").write_text(text)
    d = load_dataset("t", {"source": "text", "path": "c.txt", "context": 8}, tmp_path)
    assert isinstance(d.tokenizer, CharTokenizer) and d.tokenizer.vocab == d.vocab == ["a", "b", "c", "d"]
    assert list(d.info) == ["description", "source", "vocab_size", "context", "characters", "unigram_test_loss"]
    assert d.decode(d.streams["train"][:9]) == "abcabcabd" and d.tokenizer.encode("abd") == [0, 1, 3]


# ---- the end-of-text token of a trained BPE -----------------------------------------------------


def test_trained_bpe_has_an_end_of_text_token(tmp_path):
    """Regression: train_bpe made no special token, so a BPE-trained run had no eos_id and
    generation never stopped. ID 0 is now <|endoftext|>, the eos_token; transformers reads the
    saved folder the same way."""
    transformers = pytest.importorskip("transformers")
    docs = [REFERENCE[i : i + 400] for i in range(0, 8000, 400)]
    tok = train_bpe(["<|endoftext|>".join(docs)], 320, special_tokens=["<|user|>", "<|endoftext|>"])
    assert tok.eos_id == 0 and tok.id_to_token(0) == "<|endoftext|>" and tok.token_to_id("<|user|>") == 1
    assert tok.bos_id is None and tok.pad_id is None and tok.vocab_size == 320
    ids = tok.encode(docs[0] + "<|endoftext|>" + docs[1])
    assert ids.count(0) == 1 and tok.decode(ids) == docs[0] + "<|endoftext|>" + docs[1]
    assert tok.decode(ids, skip_special_tokens=True) == docs[0] + docs[1]
    assert "".join(_stream(tok, ids)) == tok.decode(ids)
    tok.save_folder(tmp_path / "tok")
    again = load_tokenizer(tmp_path / "tok")
    assert again.eos_id == 0 and again.encode(MULTI + "<|endoftext|>") == tok.encode(MULTI + "<|endoftext|>")
    fast = transformers.PreTrainedTokenizerFast.from_pretrained(str(tmp_path / "tok"))
    assert fast.eos_token == "<|endoftext|>" and fast.eos_token_id == 0
    assert fast.encode(docs[2] + "<|endoftext|>", add_special_tokens=False) == tok.encode(docs[2] + "<|endoftext|>")


def test_text_dataset_bpe_keeps_document_ends_as_the_eos_token(tmp_path):
    docs = [REFERENCE[i : i + 300] for i in range(0, 6000, 300)]
    (tmp_path / "c.txt").write_text("<|endoftext|>".join(docs) + "<|endoftext|>", encoding="utf-8")
    spec = {"source": "text", "path": "c.txt", "context": 8, "split": {"train": 1.0, "val": 0.0, "test": 0.0},
            "tokenizer": {"type": "bpe", "vocab_size": 300}}
    ds = load_dataset("t", spec, tmp_path)
    assert ds.tokenizer.eos_id == 0 and ds.vocab[0] == "<|endoftext|>"
    stream = ds.streams["train"]
    assert int((stream == 0).sum()) == len(docs) and stream[-1] == 0
