"""Generation with a resident KV cache (``caramba.generate``) against transformers.

Tiny random-weight GPT-2 and Llama checkpoints (``ref_encoder`` / ``ref_decoder``, float64, the
Llama reference with ``float64_islands``) generate 64 greedy tokens equal, token for token, to
``model.generate(do_sample=False)``; the reference's top-2 logit gap is checked at every step
so a near-tie cannot make the comparison pass or fail by luck. The cache itself is checked
through the logits: at every step they equal a full forward over the whole sequence so far
(1e-12 in float64), also for the sliding windows of Mistral and Gemma 2 and past the window.
A right-padded batch of two prompts gives each row what it gives alone. Then the capacity
errors and the command line on a char_gpt run trained for five steps.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest

import caramba.pretrained as pt
from caramba import compute
from caramba.errors import ConfigError
from caramba.generate import CapacityError, Generator, Sampler

from . import ref_decoder, ref_encoder
from .hf import rel_err, torch

NEW = 64
MIN_GAP = 1e-9
POSITIONS = 96  # GPT-2's position table: room for a prompt and 64 new tokens
CONTRAST = 0.3
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> (transformers model in float64, checkpoint directory), built once. GPT-2 and Llama
    get ``initializer_range`` 0.3 (contrast): with the default 0.02 a random model repeats one or
    two tokens; with 0.3 the 64 greedy tokens hold 24 (GPT-2) and 43 (Llama) distinct ones."""
    made: dict[str, tuple] = {}

    def get(name: str):
        if name not in made:
            d = tmp_path_factory.mktemp(name)
            if name == "gpt2":
                made[name] = ref_encoder.make("gpt2", d, "float64", n_positions=POSITIONS, initializer_range=CONTRAST)
            elif name == "llama":
                made[name] = ref_decoder.make(name, d, "float64", initializer_range=CONTRAST)
            else:
                made[name] = ref_decoder.make(name, d, "float64")
        return made[name]

    return get


def _prompt(n: int, seed: int = 1) -> list[int]:
    return np.random.default_rng(seed).integers(1, 128, n).tolist()


def reference(model, prompt: list[int], new: int = NEW) -> tuple[list[int], float]:
    """transformers' greedy continuation and the smallest top-2 gap of its logits over the steps."""
    islands = ref_decoder.float64_islands() if model.config.model_type != "gpt2" else contextlib.nullcontext()
    with torch.no_grad(), islands:
        out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=new, min_new_tokens=0,
                             eos_token_id=None, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    scores = torch.stack(out.scores)[:, 0].numpy()  # [steps, V]
    top2 = np.sort(scores, axis=-1)[:, -2:]
    return out.sequences[0, len(prompt):].tolist(), float(np.min(top2[:, 1] - top2[:, 0]))


@pytest.mark.parametrize("backend", ["cpu", "xla"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_tokens_equal_transformers(checkpoints, name, backend):
    if backend not in compute.available():
        pytest.skip(f"backend {backend} is not installed")
    model, directory = checkpoints(name)
    prompt = _prompt(7)
    want, gap = reference(model, prompt)
    assert gap >= MIN_GAP, f"{name}: the reference has a near-tie ({gap:.2e}); pick another prompt"
    with Generator.from_pretrained(pt.open(directory, dtype="float64"), backend=backend, capacity=80) as gen:
        got = [int(t[0]) for t in gen.generate([prompt], NEW)]
    assert got == want and len(set(want)) > 16


@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral", "gemma2"])
def test_cached_logits_equal_a_full_forward(checkpoints, name):
    """Every step's logits (prefill and each decode) equal the full-sequence forward's at that
    position: the cache holds the right keys and values, not just enough for the argmax.
    Mistral (window 5) and Gemma 2 (window 4, soft-capping) run well past their windows; the
    steps read 64 slots of the 96 (``CacheSpec.span``) until position 64, then all of them."""
    _, directory = checkpoints(name)
    m = pt.open(directory, dtype="float64")
    prompt = _prompt(6, seed=2)
    steps = 70
    got, seq = [], list(prompt)
    with Generator.from_pretrained(m, capacity=POSITIONS) as gen:
        assert [gen.span(n) for n in (1, 64, 65, 96)] == [64, 64, 96, 96]
        for t in gen.generate([prompt], steps):
            got.append(gen.logits()[0])
            seq.append(int(t[0]))
    full = m.forward({"tokens": np.array([seq[:-1]])})["logits"][0]  # position p predicts p + 1
    for i, logits in enumerate(got):
        assert rel_err(logits, full[len(prompt) - 1 + i]) <= 1e-12, (name, i)


def test_a_padded_batch_gives_each_row_what_it_gives_alone(checkpoints):
    _, directory = checkpoints("llama")
    m = pt.open(directory, dtype="float64")
    prompts = [_prompt(9, seed=3), _prompt(4, seed=4)]
    with Generator.from_pretrained(m, capacity=48) as gen:
        both = np.stack(list(gen.generate(prompts, 20)))
        logits_both = gen.logits()
        for row, p in enumerate(prompts):
            alone = np.stack(list(gen.generate([p], 20)))[:, 0]
            assert alone.tolist() == both[:, row].tolist(), row
            assert rel_err(logits_both[row], gen.logits()[0]) <= 1e-12


def test_gpt2_batch_of_different_lengths(checkpoints):
    _, directory = checkpoints("gpt2")
    m = pt.open(directory, dtype="float64")
    prompts = [_prompt(3, seed=5), _prompt(8, seed=6)]
    with Generator.from_pretrained(m, capacity=32) as gen:
        both = np.stack(list(gen.generate(prompts, 16)))
        for row, p in enumerate(prompts):
            assert np.stack(list(gen.generate([p], 16)))[:, 0].tolist() == both[:, row].tolist()


def test_eos_stops_a_row_and_reports_minus_one(checkpoints):
    _, directory = checkpoints("gpt2")
    with Generator.from_pretrained(pt.open(directory, dtype="float64"), capacity=32) as gen:
        free = [int(t[0]) for t in gen.generate([_prompt(5)], 12)]
        eos = free[3]
        stopped = [int(t[0]) for t in gen.generate([_prompt(5)], 12, eos_id=eos)]
    assert stopped == free[: free.index(eos) + 1]


def test_capacity_overflow_is_refused_before_running(checkpoints):
    _, directory = checkpoints("gpt2")
    with Generator.from_pretrained(pt.open(directory, dtype="float64"), capacity=10) as gen:
        with pytest.raises(CapacityError, match="holds 10 positions.*need 12") as e:
            gen.generate([_prompt(6)], 7)
        assert "capacity" in (e.value.hint or "")
        assert len(list(gen.generate([_prompt(6)], 5))) == 5  # 6 + 5 - 1 = 10 fits exactly
        with pytest.raises(CapacityError, match="holds 10 positions; this call needs 11"):
            gen.decode([1])  # the position past the last one
    with pytest.raises(ConfigError, match=f"longer than the model's context of {POSITIONS}"):
        Generator.from_pretrained(pt.open(directory, dtype="float64"), capacity=POSITIONS + 1)


def test_a_memory_limit_is_checked_before_the_weights_are_read(checkpoints, monkeypatch):
    """Weights + caches over ``max_bytes`` are a ResourceError at the first graph, before load."""
    from caramba.errors import ResourceError

    _, directory = checkpoints("gpt2")
    model = pt.open(directory, dtype="float64")
    loads = []
    monkeypatch.setattr(type(model), "load", lambda self, *a, **k: loads.append(1))
    with Generator.from_pretrained(model, capacity=32, max_bytes=1000) as gen:
        with pytest.raises(ResourceError, match=r"needs [0-9.]+ MiB of weights and KV caches \(capacity 32, batch 1\)"):
            list(gen.generate([_prompt(4)], 2))
    assert not loads
    monkeypatch.undo()
    with Generator.from_pretrained(pt.open(directory, dtype="float64"), capacity=32, max_bytes=1 << 30) as gen:
        assert len(list(gen.generate([_prompt(4)], 2))) == 2


def test_sampling_goes_through_sample_token(checkpoints):
    """Non-greedy settings draw with ``sample.token`` (seeded, step as key): the same seed gives
    the same tokens, another seed other ones; temperature 0 is the greedy path."""
    _, directory = checkpoints("llama")
    with Generator.from_pretrained(pt.open(directory, dtype="float64"), capacity=32) as gen:
        hot = Sampler(temperature=1.5, top_k=50)
        a = [int(t[0]) for t in gen.generate([_prompt(5)], 16, sampler=hot, seed=1)]
        b = [int(t[0]) for t in gen.generate([_prompt(5)], 16, sampler=hot, seed=1)]
        c = [int(t[0]) for t in gen.generate([_prompt(5)], 16, sampler=hot, seed=2)]
        greedy = [int(t[0]) for t in gen.generate([_prompt(5)], 16)]
        cold = [int(t[0]) for t in gen.generate([_prompt(5)], 16, sampler=Sampler(temperature=0.0))]
        pen = [int(t[0]) for t in gen.generate([_prompt(5)], 16, sampler=Sampler(repetition_penalty=1.3))]
    assert a == b != c and all(0 <= t < 128 for t in a + c)
    assert greedy == cold
    assert len(pen) == 16


def test_cli_generates_characters_from_a_char_gpt_run(tmp_path):
    """examples/char_gpt.yml trained for 5 steps; ``caramba generate RUN --prompt "def "``
    prints characters of the dataset's vocabulary; too small a --capacity is refused."""
    from typer.testing import CliRunner

    from caramba.cli import app
    from caramba.run import run_experiment
    from caramba.store import RunStore

    store = RunStore(tmp_path / "store")
    res = run_experiment(EXAMPLES / "char_gpt.yml", {"trainer.steps": 5, "trainer.eval_every": 5}, store=store).runs[0]
    assert res.status == "finished", res.error
    args = ["generate", res.run_id, "--prompt", "def ", "--store", str(tmp_path / "store")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    text = r.stdout.rstrip("\n")  # 64 positions of gpt_tiny: the 4 of the prompt and 61 new (one never fed back)
    assert len(text) == 61 and "(generating 61 tokens: the model has 64 positions)" in r.stderr
    assert set(text) <= set((EXAMPLES / "data" / "python_reference.txt").read_text(encoding="utf-8"))
    r = CliRunner().invoke(app, [*args, "-n", "12", "--capacity", "8"])
    assert isinstance(r.exception, CapacityError) and "holds 8 positions" in str(r.exception)
    with Generator.from_run(res.run_id, store=store) as gen:  # capacity: the model's 64 positions
        assert gen.capacity == 64 and len(list(gen.generate([[1, 2, 3]], 5))) == 5
    from caramba.errors import ResourceError
    from caramba.generate import run_model

    with pytest.raises(ResourceError, match=f"run {res.run_id}'s checkpoint is [0-9.]+ MiB"):
        run_model(res.run_id, store=store, max_bytes=1024)  # refused from the store's record, unread


def test_cli_streams_token_ids_and_stops_cleanly_on_ctrl_c(checkpoints, monkeypatch):
    from typer.testing import CliRunner

    from caramba.cli import app

    _, directory = checkpoints("gpt2")
    r = CliRunner().invoke(app, ["generate", str(directory), "--tokens", "5,6,7", "-n", "6", "--dtype", "float64"])
    assert r.exit_code == 0, r.output
    assert len(r.output.split()) == 6

    def interrupted(self, *a, **k):
        yield np.array([3])
        raise KeyboardInterrupt

    monkeypatch.setattr(Generator, "_stream", interrupted)
    r = CliRunner().invoke(app, ["generate", str(directory), "--tokens", "5,6,7", "-n", "6"])
    assert r.exit_code == 130 and r.output == "3 \n" and "Traceback" not in r.output


def test_cli_continues_text_through_the_checkpoints_tokenizer(tmp_path):
    """A Hugging Face folder with a tokenizer.json: ``--prompt`` text is encoded, the greedy
    continuation streamed as text, equal to decoding the Generator's tokens."""
    from typer.testing import CliRunner

    from caramba.cli import app
    from caramba.text import load_tokenizer, train_bpe

    _, directory = ref_encoder.make("gpt2", tmp_path / "gpt2", "float64", vocab_size=300, n_positions=32)
    train_bpe(["def f(x):\n    return x + 1\n" * 20], vocab_size=300).save(directory / "tokenizer.json")
    tok = load_tokenizer(directory)
    ids = tok.encode("def f(")
    with Generator.from_pretrained(pt.open(directory, dtype="float64"), capacity=len(ids) + 9) as gen:
        want = tok.decode([int(t[0]) for t in gen.generate([ids], 10)])
    r = CliRunner().invoke(app, ["generate", str(directory), "--prompt", "def f(", "-n", "10", "--dtype", "float64"])
    assert r.exit_code == 0, r.output
    assert r.output == want + "\n"


def test_the_cache_lowering_declares_state_not_parameters():
    """``cache=CacheSpec`` keeps the parameters (names, shapes) of the ordinary lowering and adds
    ``<attn>.k_cache`` / ``v_cache`` [B, heads, capacity, head_dim] zero-initialized state, an input
    ``positions`` [B]; it refuses training and models without a causal self-attention cache."""
    from caramba.manifest.compile import prepare
    from caramba.manifest.errors import ManifestError
    from caramba.manifest.lower import CacheSpec, lower_topology

    text = ("name: t\ntopology:\n  inputs: {tokens: {shape: [batch, seq], dtype: int64}}\n  nodes:\n"
            "    - {id: gpt, op: model.gpt, in: [tokens], config: {vocab_size: 16, context: 8, d_model: 8, layers: 2, heads: 2}}\n")
    p = prepare(text, load_data=False)
    plain = lower_topology(p.manifest.topology, p.doc, dims={"batch": 3, "seq": 5})
    cached = lower_topology(p.manifest.topology, p.doc, dims={"batch": 3, "seq": 5}, cache=CacheSpec(8, 3))
    assert cached.params == plain.params
    caches = {n: d for n, d in cached.graph.state.items() if n not in cached.params}
    assert sorted(caches) == [f"gpt.h_{i}.attn.{kv}_cache" for i in (0, 1) for kv in "kv"]
    assert all(d.init == "zeros" and d.type.shape == (3, 2, 8, 4) for d in caches.values())
    assert cached.graph.type_of(cached.graph.node("positions").outputs[0]).shape == (3,)
    with pytest.raises(ManifestError, match="cannot train"):
        lower_topology(p.manifest.topology, p.doc, dims={"batch": 3, "seq": 5}, training=True, cache=CacheSpec(8, 3))
    with pytest.raises(ManifestError, match="position table"):
        lower_topology(p.manifest.topology, p.doc, dims={"batch": 3, "seq": 5}, cache=CacheSpec(9, 3))
    mlp = prepare("name: m\ntopology:\n  inputs: {x: {shape: [batch, 4]}}\n  nodes:\n"
                  "    - {id: fc, op: projection.linear, in: [x], config: {out_features: 2}}\n", load_data=False)
    with pytest.raises(ManifestError, match="no attention layer that keeps a KV cache"):
        lower_topology(mlp.manifest.topology, mlp.doc, dims={"batch": 1}, cache=CacheSpec(8, 1))


def test_chat_keeps_the_conversation_through_the_chat_template(tmp_path):
    """`caramba chat`: each input line is a user turn rendered with the folder's chat template
    (tokenizer_config.json), the reply streams after `model> `, and the next turn's prompt holds
    the whole conversation; end of input ends the chat cleanly. Without a template the
    conversation is a plain transcript."""
    import json

    from typer.testing import CliRunner

    from caramba.cli import app
    from caramba.text import load_tokenizer, train_bpe
    from caramba.text.chat import chat_prompt

    _, directory = ref_encoder.make("gpt2", tmp_path / "gpt2", "float64", vocab_size=300, n_positions=128)
    train_bpe(["user: hi there\nassistant: hello\n" * 30], vocab_size=300).save(directory / "tokenizer.json")
    tok = load_tokenizer(directory)
    assert chat_prompt(tok, [{"role": "user", "content": "hi"}]) == "user: hi\nassistant:"
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    tok = load_tokenizer(directory)
    assert chat_prompt(tok, [{"role": "user", "content": "hi"}]) == "<user>hi<assistant>"
    args = ["chat", str(directory), "--temperature", "0", "-n", "5", "--capacity", "120", "--dtype", "float64"]
    r = CliRunner().invoke(app, args, input="hi there\n\nhello\n")
    assert r.exit_code == 0, r.output
    assert r.output.count("you> ") == 4 and r.output.count("model> ") == 2  # the empty line asks again
    first = r.output.split("model> ")[1].split("\n")[0]
    with Generator.from_pretrained(pt.open(directory, dtype="float64"), capacity=120) as gen:
        ids = tok.encode("<user>hi there<assistant>")
        want = tok.decode([int(t[0]) for t in gen.generate([ids], 5)])
    assert first == want
    r = CliRunner().invoke(app, [*args[:-4], "--capacity", "8", "--dtype", "float64"], input="hi there hi there\n")
    assert isinstance(r.exception, ConfigError) and "no longer fits the cache of 8 positions" in str(r.exception)
    r = CliRunner().invoke(app, ["chat", str(directory), "--top-p", "0"], input="hi\n")
    assert isinstance(r.exception, ConfigError) and "sampler: top_p must be in (0, 1]" in str(r.exception)
