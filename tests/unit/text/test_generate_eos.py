"""`caramba generate` on a run whose text dataset trained a BPE stops at its end-of-text token.

Regression: a trained BPE had no special token, so such a run had no eos_id and generation
always ran to --max-new-tokens. The corpus here is short documents joined by <|endoftext|>;
a tiny GPT learns within a few dozen steps that each one ends after its two words. Marked
``slow`` (a training run and three compilations of the generation graphs: about 6 s of CPU
time, 25 s when the cpu backend's compiled kernels are not cached yet).
"""

import pytest

pytest.importorskip("tokenizers")

MANIFEST = """\
name: bpe-eos
topology:
  inputs:
    x: {shape: [batch, seq], dtype: int64}
    y: {shape: [batch, seq], dtype: int64}
  nodes:
    - {id: gpt, op: model.gpt_tiny, in: [x], config: {vocab_size: 300, context: 16}}
    - {id: loss, op: loss.cross_entropy, in: [gpt, y]}
  outputs: {logits: gpt, loss: loss}
datasets:
  text:
    source: text
    path: corpus.txt
    context: 16
    split: {train: 1.0, val: 0.0, test: 0.0}
    tokenizer: {type: bpe, vocab_size: 300}
trainer:
  loss: loss
  lr: 1.0e-2
  batch_size: 8
  steps: 60
  eval_every: 60
targets:
  - {name: cpu, backend: "cpu:threads=1", runs: [{id: s0, seed: 0}]}
"""


@pytest.mark.slow
def test_generate_stops_at_the_trained_bpe_end_of_text(tmp_path):
    from typer.testing import CliRunner

    from caramba.cli import app
    from caramba.generate.source import open_model
    from caramba.run import run_experiment
    from caramba.store import RunStore

    (tmp_path / "corpus.txt").write_text("hello world<|endoftext|>" * 400, encoding="utf-8")
    (tmp_path / "m.yml").write_text(MANIFEST)
    store = RunStore(tmp_path / "store")
    res = run_experiment(tmp_path / "m.yml", store=store).runs[0]
    assert res.status == "finished", res.error
    make, tok, _ = open_model(res.run_id, backend="cpu", dtype="float32", store=str(tmp_path / "store"),
                              config=None, text=True)
    assert tok.eos_id == 0 == tok.token_to_id("<|endoftext|>")
    with make(16) as gen:  # without an eos_id the same model runs on to the token limit
        free = [int(t[0]) for t in gen.generate([tok.encode("hello world")], 12)]
    assert len(free) == 12 and free[0] == 0
    args = ["generate", res.run_id, "--prompt", "hello world<|endoftext|>hello", "-n", "12",
            "--store", str(tmp_path / "store")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert r.stdout == " world<|endoftext|>\n"  # the document's end, then nothing: eos stopped it
