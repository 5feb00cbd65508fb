"""Running programs: the chat program's replies are exactly what ``Generator.generate`` gives for the
same prompt (greedy and sampled, turn after turn), the docs' example runs, the diffusion program
writes the PNG ``caramba image`` writes, lines come from an injected input, the max-steps guard
stops runaway loops, Ctrl-C closes the runners, and the command line."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from caramba.cli import app
from caramba.errors import RunnerClosed
from caramba.manifest.errors import ManifestError
from caramba.programs import ProgramError, load_program, run_program
from caramba.programs.runtime import Machine

DOCS = Path(__file__).resolve().parents[3] / "docs" / "programs.md"


def expected(model: Path, messages: list[dict], n: int, sampler=None, seed: int = 0) -> list[int]:
    """Generator.generate's tokens for the chat prompt of ``messages``, cut before EOS."""
    import caramba.pretrained as pt
    from caramba.generate import Generator
    from caramba.text import load_tokenizer
    from caramba.text.chat import chat_prompt

    tok = load_tokenizer(model)
    ids = tok.encode(chat_prompt(tok, messages))
    with Generator.from_pretrained(pt.open(model, dtype="float32"), capacity=len(ids) + n) as gen:
        got = [int(t[0]) for t in gen.generate([ids], n, sampler=sampler, seed=seed)]
    return got[: got.index(tok.eos_id)] if tok.eos_id in got else got


def chat(model: Path, lines: str, seed: int = 0, **variables):
    sets = {"variables.model": str(model), "variables.capacity": 256,
            **{f"variables.{k}": v for k, v in variables.items()}}
    out = io.StringIO()
    res = run_program(load_program("chat", sets), input=io.StringIO(lines), output=out, seed=seed)
    return res, out.getvalue()


def test_chat_reply_is_the_generators_greedy_continuation(tiny_chat_lm):
    from caramba.text import load_tokenizer

    tok = load_tokenizer(tiny_chat_lm)
    res, text = chat(tiny_chat_lm, "the cat\n", temperature=0, max_new_tokens=12)
    want = expected(tiny_chat_lm, [{"role": "user", "content": "the cat"}], 12)
    assert res.variables["reply"] == want and len(want) >= 3
    reply = tok.decode(want, skip_special_tokens=True)
    assert text == f"you> model> {reply}\nyou> "
    assert res.variables["messages"] == [{"role": "user", "content": "the cat"},
                                         {"role": "assistant", "content": reply}]


@pytest.mark.parametrize("settings", [{"temperature": 0.9}, {"temperature": 0.8, "top_k": 20, "min_p": 0.05},
                                      {"temperature": 0.7, "repetition_penalty": 1.3}], ids=["t", "topk_minp", "rep"])
def test_sampled_turns_equal_generate_with_the_turns_seed(tiny_lm, settings):
    """Turn t prefills with seed + t (as `caramba chat`); each reply is Generator.generate's for
    the conversation so far. tiny_lm has no chat template: the plain transcript is used."""
    from caramba.generate import Sampler

    sampler = Sampler(**{"top_p": 0.95, **settings})
    res, text = chat(tiny_lm, "the cat\n\na dog\n", seed=5, max_new_tokens=10, **settings)
    first = expected(tiny_lm, [{"role": "user", "content": "the cat"}], 10, sampler, seed=5)
    msgs = res.variables["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    second = expected(tiny_lm, msgs[:3], 10, sampler, seed=6)
    assert res.variables["reply"] == second and len(first) == 10  # no EOS: every reply is max_new_tokens long
    from caramba.text import load_tokenizer

    assert msgs[1]["content"] == load_tokenizer(tiny_lm).decode(first, skip_special_tokens=True)
    assert text.count("you> ") == 4 and text.count("model> ") == 2  # the empty line is skipped


def _docs_example() -> str:
    text = DOCS.read_text(encoding="utf-8")
    return re.search(r"## An example.*?```yaml\n(.*?)```", text, re.S).group(1)


def test_the_docs_example_prints_the_generators_greedy_tokens(tiny_lm, tmp_path):
    import caramba.pretrained as pt
    from caramba.generate import Generator
    from caramba.text import load_tokenizer

    path = tmp_path / "complete.yml"
    path.write_text(_docs_example())
    out = io.StringIO()
    res = run_program(load_program(path, {"variables.model": str(tiny_lm), "variables.n": 12}),
                      input=io.StringIO("the cat\n"), output=out)
    tok = load_tokenizer(tiny_lm)
    ids = tok.encode("the cat")
    with Generator.from_pretrained(pt.open(tiny_lm, dtype="float32"), capacity=64) as gen:
        want = [int(t[0]) for t in gen.generate([ids], 12)]
    assert res.variables["out"] == want
    assert out.getvalue() == "".join(f"{t} " for t in want) + tok.decode(want) + "\n"


def test_a_graph_model_may_be_a_from_safetensors_manifest(tiny_lm, tmp_path):
    _write(tmp_path, f"name: tiny\ntopology:\n  from_safetensors:\n    source: {tiny_lm}\n", "model.yml")
    prog = _write(tmp_path, _docs_example(), "complete.yml")
    outs = []
    for model in (tmp_path / "model.yml", tiny_lm):
        out = io.StringIO()
        run_program(load_program(prog, {"variables.model": str(model), "variables.n": 5}),
                    input=io.StringIO("the cat\n"), output=out)
        outs.append(out.getvalue())
    assert outs[0] == outs[1] and len(outs[0].split(" ")) == 6


def test_a_run_id_model_decodes_with_its_character_vocabulary(tmp_path, monkeypatch):
    """A run ID as the model: examples/char_gpt.yml's model with seeded random parameters stands
    in for a trained run (``run_model`` is what reads a run); the docs' example continues a line
    with Generator.from_manifest's greedy tokens, decoded by the dataset's characters."""
    import caramba.generate
    from caramba.generate import Generator
    from caramba.manifest.compile import prepare
    from caramba.text import CharTokenizer

    prep = prepare(Path(__file__).resolve().parents[3] / "examples" / "char_gpt.yml")
    rng = np.random.default_rng(0)
    params = {n: rng.normal(0.0, 0.3, spec.shape) for n, spec in prep.lower(batch=1).params.items()}
    asked = []

    def run_model(ref, *, store=None):
        asked.append(ref)
        return prep, params, None

    monkeypatch.setattr(caramba.generate, "run_model", run_model)
    prog = load_program(_write(tmp_path, _docs_example().replace("capacity: 256", "capacity: 64")),
                        {"variables.model": "abc123", "variables.n": 10})
    out = io.StringIO()
    got = run_program(prog, input=io.StringIO("def\n"), output=out, store=str(tmp_path / "store"))
    tok = CharTokenizer(prep.dataset.vocab)
    with Generator.from_manifest(prep, params, capacity=64) as gen:
        want = [int(t[0]) for t in gen.generate([tok.encode("def")], 10)]
    assert asked == ["abc123"] and got.variables["out"] == want
    assert out.getvalue() == "".join(f"{t} " for t in want) + tok.decode(want) + "\n"


HOST = """\
name: host
max_steps: 500
state:
  lines: {type: counter}
  buf: {type: token_buffer, initial: [7]}
program:
  - {id: all, op: value.assign, config: {value: []}, outputs: {value: seen}}
  - id: read
    op: control.loop_until
    inputs: {condition: eof}
    config: {max: 100}
    outputs: {index: i}
    body:
      - {id: line, op: io.read_line, config: {prompt: "> "}, outputs: {line: text, eof: eof}}
      - {id: stop, op: control.break_if, inputs: {condition: eof}}
      - {id: quit, op: value.equals, inputs: {a: text}, config: {value: quit}, outputs: {result: q}}
      - {id: leave, op: control.break_if, inputs: {condition: q}}
      - {id: count, op: state.update, inputs: {state: lines}}
      - {id: size, op: value.length, inputs: {value: text}, outputs: {length: n}}
      - {id: hist, op: telemetry.histogram, inputs: {value: n}, config: {name: chars}}
      - {id: tok, op: state.append, inputs: {state: buf, item: n}}
      - {id: keep, op: value.append, inputs: {list: seen, item: text}}
      - {id: echo, op: io.emit_text, inputs: {text: text}, config: {end: "|"}}
  - {id: total, op: state.inspect, inputs: {state: lines}, outputs: {value: c}}
  - {id: show, op: io.emit_token, inputs: {token: c}}
  - {id: ids, op: value.positions, inputs: {tokens: buf}, config: {start: 3}, outputs: {positions: pos}}
  - {id: tail, op: value.slice, inputs: {value: buf}, config: {start: -2}, outputs: {value: last2}}
  - {id: show2, op: io.emit_token, inputs: {token: last2}, config: {sep: ","}}
  - id: each
    op: control.loop_each
    inputs: {items: seen}
    outputs: {item: s, index: j}
    body:
      - {id: skip, op: value.equals, inputs: {a: j}, config: {value: 0}, outputs: {result: first}}
      - {id: nofirst, op: control.continue_if, inputs: {condition: first}}
      - {id: tick, op: telemetry.counter, config: {name: later, add: 2}}
  - {id: reset, op: state.reset, inputs: {state: buf}}
  - {id: after, op: state.inspect, inputs: {state: buf}, outputs: {value: b}}
  - {id: trace, op: telemetry.trace_tensor, inputs: {value: pos}, config: {name: pos}}
  - {id: wipe, op: value.clear, inputs: {list: seen}}
"""


def test_host_steps_read_lines_from_an_injected_input(tmp_path):
    prog = load_program(_write(tmp_path, HOST))
    out = io.StringIO()
    res = run_program(prog, input=io.StringIO("ab\n  cde  \nf\nquit\nnever read\n"), output=out)
    assert out.getvalue() == "> ab|> cde|> f|> 3 3,1,"
    v = res.variables
    assert v["c"] == 3 and v["pos"] == [3, 4, 5, 6] and v["last2"] == [3, 1] and v["b"] == [7] and v["seen"] == []
    assert v["i"] == 3 and v["q"] is True
    assert res.telemetry["histograms"]["chars"] == {"count": 3, "sum": 6.0, "min": 1.0, "max": 3.0}
    assert res.telemetry["counters"]["later"] == 4
    assert res.telemetry["traces"]["pos"] == [{"shape": [4], "dtype": "int64", "min": 3.0, "mean": 4.5, "max": 6.0}]
    empty = run_program(prog, input=io.StringIO(""), output=io.StringIO())  # end of input at once
    assert empty.variables["c"] == 0 and empty.variables["seen"] == []


def _write(tmp_path: Path, text: str, name: str = "p.yml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


SPIN = """\
name: spin
max_steps: 1000000
program:
  - id: forever
    op: control.loop_until
    config: {max: 1000000000}
    body:
      - {id: nothing, op: io.emit_text, config: {text: ""}}
"""


def test_the_max_steps_guard_stops_a_runaway_loop(tmp_path):
    prog = load_program(_write(tmp_path, SPIN))
    with pytest.raises(ProgramError, match=r"ran 50 steps \(its max_steps\)") as info:
        run_program(prog, max_steps=50)
    assert "p.yml:8:" in str(info.value)  # the step it stopped at
    small = load_program(_write(tmp_path, SPIN.replace("max_steps: 1000000", "max_steps: 10")))
    with pytest.raises(ProgramError, match="ran 10 steps"):
        run_program(small)
    with pytest.raises(ProgramError, match="max_steps must be"):
        run_program(small, max_steps=0)


def test_a_value_a_step_cannot_use_is_a_program_error_at_its_line(tmp_path):
    prog = load_program(_write(tmp_path, "name: t\nprogram:\n  - {id: a, op: value.assign, config: {value: 3}, "
                                         "outputs: {value: x}}\n  - {id: b, op: value.length, inputs: {value: x}, "
                                         "outputs: {length: n}}\n"))
    with pytest.raises(ProgramError, match=r"step 'b' \(value.length\): value must be a list") as info:
        run_program(prog)
    assert "p.yml:4:" in str(info.value)


def test_a_graph_without_a_model_says_how_to_give_one():
    with pytest.raises(ProgramError, match="graph 'lm' has no model") as info:
        run_program(load_program("chat"), input=io.StringIO("hi\n"), output=io.StringIO())
    assert "--model" in str(info.value)


def test_ctrl_c_stops_the_program_and_closes_its_runners(tiny_lm):
    class Interrupting(io.StringIO):
        def __init__(self) -> None:
            super().__init__("the cat\n")
            self.calls = 0
            self.gen = None

        def readline(self, *a):
            self.calls += 1
            if self.calls == 2:
                self.gen = machine.states["cache"].gen
                raise KeyboardInterrupt
            return super().readline(*a)

    stdin = Interrupting()
    prog = load_program("chat", {"variables.model": str(tiny_lm), "variables.capacity": 128,
                                 "variables.max_new_tokens": 2})
    machine = Machine(prog, input=stdin, output=io.StringIO())
    with pytest.raises(KeyboardInterrupt):
        machine.run()
    assert stdin.gen is not None and machine.states["cache"].gen is None
    with pytest.raises(RunnerClosed):
        stdin.gen.runner.upload(np.zeros(1))


def test_the_diffusion_denoiser_runs_only_after_its_timesteps(tmp_path):
    text = ("name: t\ngraphs:\n  d: {type: denoiser, model: some-run}\nprogram:\n"
            "  - {id: a, op: value.assign, config: {value: 0}, outputs: {value: k}}\n"
            "  - {id: b, op: graph.call, config: {graph: d}, inputs: {sample: k, t: k}, outputs: {prediction: p}}\n")
    with pytest.raises(ProgramError, match="after scheduler.timesteps") as info:
        run_program(load_program(_write(tmp_path, text)), store=str(tmp_path / "store"))
    assert "p.yml:6:" in str(info.value)


@pytest.mark.slow
def test_the_diffusion_program_writes_what_caramba_image_writes(diffusion_run, tmp_path):
    from caramba.diffusion.io import write_image
    from caramba.diffusion.sample import find_denoiser, load_run, sample
    from caramba.store import RunStore

    root, run_id = diffusion_run
    out = tmp_path / "grid.png"
    prog = load_program("diffusion", {"variables.model": run_id, "variables.n": 4, "variables.steps": 5,
                                      "variables.out": str(out), "variables.scale": 2})
    text = io.StringIO()
    res = run_program(prog, output=text, store=str(root), seed=3)
    assert text.getvalue() == f"wrote {out}\n"
    run = load_run(run_id, RunStore(root))
    den = find_denoiser(run.prep)
    ref = tmp_path / "ref.png"
    write_image(ref, sample(den, run.params, n=4, seed=3, steps=5), value_range=den.data_range, scale=2, pad=1)
    assert out.read_bytes() == ref.read_bytes()
    assert res.steps == 1 + 1 + 5 * 2 + 1


# ---- the command line ---------------------------------------------------------------------------------


def test_cli_runs_and_validates_programs(tiny_chat_lm, tmp_path):
    r = CliRunner().invoke(app, ["program", "run", "chat", "--model", str(tiny_chat_lm), "--set",
                                 "variables.temperature=0", "--set", "variables.max_new_tokens=4", "--set",
                                 "variables.capacity=128"], input="the cat\n")
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert r.output.startswith("you> model> ") and r.output.endswith("\nyou> ")
    r = CliRunner().invoke(app, ["program", "validate", "diffusion"])
    assert r.exit_code == 0 and "diffusion: valid (5 steps" in r.output
    bad = _write(tmp_path, "name: t\nprogram:\n  - {id: a, op: io.emit_txt}\n")
    r = CliRunner().invoke(app, ["program", "validate", str(bad)])
    assert isinstance(r.exception, ManifestError) and r.exception.line == 3
    r = CliRunner().invoke(app, ["asset", "show", "runtime.chat"])
    assert r.exit_code == 0 and "op: runtime.chat" in r.output


def test_cli_model_option_fills_the_one_graph_without_a_model(tiny_lm, tmp_path):
    text = ("name: t\nstate:\n  c: {type: kv_cache, graph: g, capacity: 16}\nsamplers:\n  s: {type: greedy}\n"
            "graphs:\n  g: {type: language_model}\nprogram:\n"
            "  - {id: a, op: tokenizer.encode, inputs: {text: x}, config: {graph: g}, outputs: {ids: ids}}\n")
    bad = _write(tmp_path, text)
    r = CliRunner().invoke(app, ["program", "validate", str(bad)])
    assert isinstance(r.exception, ManifestError) and "unknown variable 'x'" in str(r.exception)
    good = _write(tmp_path, text.replace("inputs: {text: x}, ", "inputs: {text: t}, ").replace(
        "program:\n", "program:\n  - {id: z, op: value.assign, config: {value: the cat}, outputs: {value: t}}\n"
                      "  - {id: e, op: tokenizer.special, config: {graph: g}, outputs: {id: eos}}\n"), "good.yml")
    r = CliRunner().invoke(app, ["program", "run", str(good), "--model", str(tiny_lm)])
    assert r.exit_code == 0, r.output + repr(r.exception)


def test_cli_ctrl_c_exits_130(monkeypatch, tmp_path):
    import caramba.programs

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(caramba.programs, "run_program", interrupted)
    r = CliRunner().invoke(app, ["program", "run", str(_write(tmp_path, SPIN))])
    assert r.exit_code == 130 and r.output == "\n"
