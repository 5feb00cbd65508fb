"""The step ops of runtime programs: one table, each op's ports, config and implementation together.

``@step(op, inputs=..., outputs=..., config=...)`` above a function registers the op in
``STEPS``; the validator (``caramba.programs.spec``) reads only this table, and the interpreter
(``caramba.programs.runtime``) calls the function. An implementation gets the machine, the step,
its input values by port and its resolved config, and returns its output values by port (or a
``Signal`` for break/continue). Nothing here imports a heavy library at module level.

Port kinds: ``value`` reads a variable (or the value of a ``counter`` / ``token_buffer`` state);
``state`` names a declared state of one of the listed types. Config fields are the registry's
``ConfigField`` (same types and ranges as op configs); ``refs`` names config keys that point at a
``graphs:`` entry of a type or at a ``samplers:`` entry.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from caramba.ir.attrs import REQUIRED
from caramba.manifest.registry import ConfigField, Interval

if TYPE_CHECKING:
    from caramba.programs.runtime import Machine
    from caramba.programs.spec import Step

MAX_LOOP = 10**9  # the largest count / max a loop may declare (the machine's max_steps bounds the work anyway)
STATE_TYPES = ("token_buffer", "kv_cache", "counter", "token_stream")
READABLE_STATES = ("counter", "token_buffer")  # states a `value` port may read
LM, DENOISER = "language_model", "denoiser"


class Signal(enum.Enum):
    """What a step tells the loop around it."""

    BREAK = "break"
    CONTINUE = "continue"


@dataclass(frozen=True)
class In:
    """An input port: a variable (``value``) or a declared state of ``states`` types (``state``)."""

    doc: str
    kind: str = "value"
    states: tuple[str, ...] = ()
    optional: bool = False


@dataclass(frozen=True)
class Out:
    """An output port; ``inplace`` names the input port whose variable it writes when the step
    does not name an output variable (value.append writes back to its list)."""

    doc: str
    optional: bool = False
    inplace: str | None = None


@dataclass(frozen=True)
class StepDef:
    op: str
    doc: str
    run: Callable[..., Any]
    inputs: Mapping[str, In] = field(default_factory=dict)
    outputs: Mapping[str, Out] = field(default_factory=dict)
    config: tuple[ConfigField, ...] = ()
    refs: Mapping[str, str] = field(default_factory=dict)  # config key -> "graph:<type>" | "graph" | "sampler"
    body: bool = False  # a loop: runs `body:` steps; break_if/continue_if act on the innermost one
    check: Callable[["Step", Any, Callable[[tuple, str], None]], None] | None = None  # (step, program, bad)

    @property
    def config_index(self) -> dict[str, ConfigField]:
        return {c.name: c for c in self.config}


STEPS: dict[str, StepDef] = {}


def step(op: str, *, inputs: Mapping[str, In] | None = None, outputs: Mapping[str, Out] | None = None,
         config: tuple[ConfigField, ...] = (), refs: Mapping[str, str] | None = None, body: bool = False,
         check: Callable[..., None] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if op in STEPS:
            raise RuntimeError(f"step op {op} is defined twice")
        STEPS[op] = StepDef(op, (fn.__doc__ or "").strip(), fn, dict(inputs or {}), dict(outputs or {}), config,
                            dict(refs or {}), body, check)
        return fn

    return register


def F(name: str, type_: str, default: Any = REQUIRED, doc: str = "", choices: tuple[Any, ...] | None = None,
      range_: str | None = None) -> ConfigField:
    return ConfigField(name, type_, default, doc, choices, Interval.parse(range_) if range_ else None)


def _one_of(port: str, key: str) -> Callable[["Step", Callable[[tuple, str], None]], None]:
    """A check: exactly one of input ``port`` and config ``key`` is given."""
    def check(s: "Step", prog: Any, bad: Callable[[tuple, str], None]) -> None:
        has_in, has_cfg = port in s.inputs, key in s.given
        if has_in == has_cfg:
            bad(("inputs",) if has_in else (), f"{s.op} takes its {port} from input '{port}' or from config "
                f"'{key}', exactly one of them ({'both' if has_in else 'neither'} given)")
    return check


def _items(v: Any, what: str) -> list[Any]:
    if isinstance(v, str):
        return list(v)
    if isinstance(v, (list, tuple)):
        return list(v)
    raise TypeError(f"{what} must be a list or a string, got {type(v).__name__}")


# ---- io ------------------------------------------------------------------------------------------


@step("io.emit_text", inputs={"text": In("the text to write", optional=True)},
      config=(F("text", "str?", None, "literal text (instead of the input)"),
              F("end", "str", "", "written after the text, e.g. a newline")),
      check=_one_of("text", "text"))
def emit_text(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Write text to the program's output (stdout by default) and flush it."""
    text = ins["text"] if "text" in ins else cfg["text"]
    m.write(("" if text is None else str(text)) + cfg["end"])
    return {}


@step("io.emit_token", inputs={"token": In("a token ID (or a list of them)")},
      config=(F("sep", "str", " ", "written after each ID"),))
def emit_token(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Write token IDs as decimal numbers (models without a tokenizer, tests)."""
    tok = ins["token"]
    ids = tok if isinstance(tok, (list, tuple)) else [tok]
    m.write("".join(f"{int(t)}{cfg['sep']}" for t in ids))
    return {}


@step("io.read_line", outputs={"line": Out("the line, without its newline"),
                               "eof": Out("true when the input has ended (line is then empty)", optional=True)},
      config=(F("prompt", "str", "", "written to the output before reading"),
              F("strip", "bool", True, "strip surrounding whitespace")))
def read_line(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Read one line from the program's input (stdin by default)."""
    if cfg["prompt"]:
        m.write(cfg["prompt"])
    line = m.read_line()
    eof = line is None
    text = "" if eof else line.rstrip("\r\n")
    return {"line": text.strip() if cfg["strip"] else text, "eof": eof}


@step("io.write_image", inputs={"images": In("a batch of images [n, ...] (a runner tensor or an array)")},
      outputs={"path": Out("the file written", optional=True)},
      config=(F("path", "str", REQUIRED, "PNG file to write"),
              F("graph", "str?", None, "a denoiser graph: map its [-1, 1] samples to its data range"),
              F("scale", "int", 8, "each pixel becomes scale x scale pixels", range_="[1, 64]"),
              F("cols", "int?", None, "images per row (default: a square grid)")),
      refs={"graph": "graph:" + DENOISER})
def write_image(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Write a batch as one PNG grid (downloads the images: the end of their trip)."""
    import numpy as np

    from caramba.diffusion.io import write_image as write

    x = ins["images"]
    arr = np.asarray(x.download() if hasattr(x, "download") else x, np.float64)
    lo, hi = -1.0, 1.0
    if cfg["graph"] is not None:
        lo, hi = m.graph(cfg["graph"]).data_range
        arr = lo + (np.clip(arr, -1.0, 1.0) + 1.0) * 0.5 * (hi - lo)
    path = write(m.path(cfg["path"]), arr, value_range=(lo, hi), scale=cfg["scale"], cols=cfg["cols"],
                 pad=max(1, cfg["scale"] // 2))
    m.write(f"wrote {path}\n")
    return {"path": str(path)}


# ---- control ---------------------------------------------------------------------------------------


@step("control.loop_until", inputs={"condition": In("checked after each pass: true ends the loop", optional=True)},
      config=(F("max", "int", REQUIRED, "most passes (required: no loop is unbounded)", range_=f"[1, {MAX_LOOP}]"),),
      outputs={"index": Out("the pass number, from 0", optional=True)}, body=True)
def loop_until(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Run the body until its condition is true, a break_if breaks, or max passes ran."""
    for i in range(cfg["max"]):
        m.bind(s, {"index": i})
        if m.run_body(s) is Signal.BREAK:
            break
        if "condition" in s.inputs and m.truth(s, "condition"):
            break
    return {}


@step("control.loop_count", outputs={"index": Out("the pass number, from 0", optional=True)},
      config=(F("count", "int", REQUIRED, "number of passes", range_=f"[0, {MAX_LOOP}]"),), body=True)
def loop_count(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Run the body count times (fewer when a break_if breaks)."""
    for i in range(cfg["count"]):
        m.bind(s, {"index": i})
        if m.run_body(s) is Signal.BREAK:
            break
    return {}


@step("control.loop_each", inputs={"items": In("a list (or a string: its characters)")},
      outputs={"item": Out("the current item"), "index": Out("its position", optional=True)}, body=True)
def loop_each(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Run the body once per item of a list, in order (the list is read once, before the first pass)."""
    for i, item in enumerate(_items(ins["items"], "items")):
        m.bind(s, {"item": item, "index": i})
        if m.run_body(s) is Signal.BREAK:
            break
    return {}


@step("control.break_if", inputs={"condition": In("true leaves the innermost loop")})
def break_if(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> Any:
    """Leave the innermost loop when the condition is true."""
    return Signal.BREAK if bool(ins["condition"]) else {}


@step("control.continue_if", inputs={"condition": In("true skips to the next pass")})
def continue_if(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> Any:
    """Skip the rest of the innermost loop's body when the condition is true."""
    return Signal.CONTINUE if bool(ins["condition"]) else {}


# ---- value ------------------------------------------------------------------------------------------


@step("value.equals", inputs={"a": In("one value"), "b": In("the other (or config value)", optional=True)},
      outputs={"result": Out("true or false")},
      config=(F("value", "any", None, "a literal to compare a with (instead of input b)"),),
      check=_one_of("b", "value"))
def equals(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """a == b (a token ID equals the EOS ID, a line equals "/quit")."""
    b = ins["b"] if "b" in ins else cfg["value"]
    a = ins["a"]
    if a is None or b is None:
        return {"result": a is b}
    return {"result": bool(a == b) if not isinstance(a, (list, str)) or type(a) is type(b) else False}


@step("value.assign", inputs={"value": In("a value to copy", optional=True)}, outputs={"value": Out("the copy")},
      config=(F("value", "any", None, "a literal value (instead of the input)"),), check=_one_of("value", "value"))
def assign(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Set a variable to a literal or to a copy of another value."""
    import copy

    return {"value": copy.deepcopy(ins["value"] if "value" in ins else cfg["value"])}


@step("value.append", inputs={"list": In("a list variable"), "item": In("a value, or a list of values")},
      outputs={"list": Out("the longer list (default: the input variable)", optional=True, inplace="list")},
      config=(F("role", "str?", None, "append {role, content: item} (a chat message) instead of the item"),
              F("extend", "bool", False, "append each element of a list item")))
def append(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Append an item (or a chat message, with ``role``) to a list."""
    out = _items(ins["list"], "list")
    item = ins["item"]
    if cfg["role"] is not None:
        out.append({"role": cfg["role"], "content": str(item)})
    elif cfg["extend"]:
        out.extend(_items(item, "item"))
    else:
        out.append(item)
    return {"list": out}


@step("value.clear", inputs={"list": In("a list or string variable")},
      outputs={"list": Out("the empty value (default: the input variable)", optional=True, inplace="list")})
def clear(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Empty a list (or a string)."""
    return {"list": "" if isinstance(ins["list"], str) else []}


@step("value.length", inputs={"value": In("a list or a string")}, outputs={"length": Out("its length")})
def length(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """The number of items (tokens, characters)."""
    return {"length": len(_items(ins["value"], "value"))}


@step("value.positions", inputs={"tokens": In("a list of tokens")}, outputs={"positions": Out("start, start+1, ...")},
      config=(F("start", "int", 0, "the first position", range_=f"[0, {MAX_LOOP}]"),))
def positions(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """The positions of a run of tokens starting at ``start``."""
    n = len(_items(ins["tokens"], "tokens"))
    return {"positions": list(range(cfg["start"], cfg["start"] + n))}


@step("value.slice", inputs={"value": In("a list or a string")}, outputs={"value": Out("the part")},
      config=(F("start", "int", 0, "first index (negative: from the end)"),
              F("stop", "int?", None, "index after the last (null: the end)")))
def slice_(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """value[start:stop], Python's rules."""
    v = ins["value"]
    if not isinstance(v, (list, str, tuple)):
        raise TypeError(f"value must be a list or a string, got {type(v).__name__}")
    return {"value": v[cfg["start"]:cfg["stop"]]}


# ---- state -------------------------------------------------------------------------------------------


@step("state.append", inputs={"state": In("a token buffer", "state", ("token_buffer",)),
                              "item": In("a token ID or a list of them")})
def state_append(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Append tokens to a token buffer."""
    buf = ins["state"]
    item = ins["item"]
    buf.extend(item if isinstance(item, (list, tuple)) else [item])
    return {}


@step("state.update", inputs={"state": In("a counter or a token buffer", "state", ("counter", "token_buffer")),
                              "value": In("the new value (default: counter + add)", optional=True)},
      config=(F("add", "int", 1, "what a counter grows by when no value is given"),))
def state_update(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Set a state to a value, or add to a counter."""
    st = ins["state"]
    if "value" in ins:
        st.set(ins["value"])
    else:
        st.add(cfg["add"])
    return {}


@step("state.reset", inputs={"state": In("any state", "state", STATE_TYPES)})
def state_reset(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Back to the declared start: a counter to its initial value, a buffer or stream emptied, a
    KV cache emptied (its next graph.call is a prefill from position 0)."""
    ins["state"].reset()
    return {}


@step("state.inspect", inputs={"state": In("any state", "state", STATE_TYPES)}, outputs={"value": Out("its value")})
def state_inspect(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """A state's value: a counter's count, a buffer's tokens, a KV cache's filled positions, a
    stream's pending tokens."""
    return {"value": ins["state"].inspect()}


# ---- graphs, samplers, schedulers ----------------------------------------------------------------


def _graph_ports(s: "Step", prog: Any, bad: Callable[[tuple, str], None]) -> None:
    """graph.call's ports follow the graph's type (the validator sets ``s.graph_type``), and a
    language model's cache must be one of that model's."""
    want = {LM: ({"tokens", "cache"}, {"logits"}), DENOISER: ({"sample", "t"}, {"prediction"})}.get(s.graph_type or "")
    if want is None:
        return
    for side, have, need in (("inputs", set(s.inputs), want[0]), ("outputs", set(s.outputs), want[1])):
        if have != need:
            bad((side,), f"graph.call of a {s.graph_type} graph takes {side} {sorted(need)}, got {sorted(have)}")
    cache = prog.state.get(s.inputs.get("cache", ""))
    if cache is not None and cache.type == "kv_cache" and cache.config.get("graph") != s.config["graph"]:
        bad(("inputs", "cache"), f"cache '{cache.name}' holds the keys and values of graph "
            f"'{cache.config.get('graph')}', not of '{s.config['graph']}'")


@step("graph.call", inputs={"tokens": In("language model: the token IDs to feed", optional=True),
                            "cache": In("language model: its KV cache", "state", ("kv_cache",), optional=True),
                            "sample": In("denoiser: the current sample x_t (on the runner)", optional=True),
                            "t": In("denoiser: the step index from scheduler.timesteps", optional=True)},
      outputs={"logits": Out("language model: the next-token logits (they stay on the runner)", optional=True),
               "prediction": Out("denoiser: its prediction (on the runner)", optional=True)},
      config=(F("graph", "str", REQUIRED, "a graphs: entry"),), refs={"graph": "graph"}, check=_graph_ports)
def graph_call(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Run a graph. A language model feeds tokens into its KV cache (a prefill when the cache is
    empty or more than one token is fed, else one decode step) and returns resident logits that
    sampler.next_token turns into a token; a denoiser predicts from (sample, t)."""
    g = m.graph(cfg["graph"])
    if g.kind == LM:
        return {"logits": ins["cache"].feed(g, ins["tokens"])}
    return {"prediction": g.predict(ins["sample"], ins["t"])}


@step("sampler.next_token", inputs={"logits": In("from graph.call"),
                                    "key": In("the random stream's key (default: tokens drawn since the prefill)",
                                              optional=True),
                                    "history": In("tokens the repetition penalty sees (default: the cache's)",
                                                  optional=True)},
      outputs={"token": Out("the next token ID")},
      config=(F("sampler", "str", REQUIRED, "a samplers: entry"),), refs={"sampler": "sampler"})
def next_token(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Pick the next token from the logits with a sampler, in the graph (only the token comes back)."""
    key = ins.get("key")
    return {"token": ins["logits"].pick(m.sampler(cfg["sampler"]), m.seed,
                                        None if key is None else int(key), ins.get("history"))}


@step("scheduler.timesteps", outputs={"timesteps": Out("the step indices, in order"),
                                      "sample": Out("x_T ~ N(0, I) of n examples, on the runner")},
      config=(F("graph", "str", REQUIRED, "the denoiser whose trained scheduler to use"),
              F("n", "int", 16, "examples to sample", range_="[1, 1024]"),
              F("steps", "int?", None, "sampling steps (default: the training steps)")),
      refs={"graph": "graph:" + DENOISER})
def timesteps(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """The sampling plan of the denoiser's scheduler (DDPM or flow) and the starting noise."""
    g = m.graph(cfg["graph"])
    count, x = g.start(cfg["n"], cfg["steps"], m.seed)
    return {"timesteps": list(range(count)), "sample": x}


@step("scheduler.step", inputs={"sample": In("x at step t"), "prediction": In("the denoiser's prediction"),
                                "t": In("the step index")},
      outputs={"sample": Out("x at the next step")},
      config=(F("graph", "str", REQUIRED, "the denoiser whose scheduler steps"),), refs={"graph": "graph:" + DENOISER})
def scheduler_step(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """One update of the scheduler (a DDPM ancestral step or a flow Euler step), on the runner."""
    return {"sample": m.graph(cfg["graph"]).update(ins["sample"], ins["prediction"], ins["t"])}


# ---- tokenizer ----------------------------------------------------------------------------------------


@step("tokenizer.encode", inputs={"text": In("a string, or a list of chat messages {role, content}")},
      outputs={"ids": Out("token IDs")},
      config=(F("graph", "str", REQUIRED, "the language model whose tokenizer to use"),
              F("add_special_tokens", "bool", False, "let the tokenizer add BOS/EOS (plain text only)")),
      refs={"graph": "graph:" + LM})
def encode(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Text to token IDs. Chat messages go through the tokenizer's chat template when it has one
    (with the generation prompt), else a plain ``role: text`` transcript ending in ``assistant:``."""
    tok = m.graph(cfg["graph"]).tokenizer
    text = ins["text"]
    if isinstance(text, list):
        if not all(isinstance(x, dict) and "role" in x and "content" in x for x in text):
            raise TypeError("a list to encode must hold chat messages {role, content} (value.append with role)")
        from caramba.text.chat import chat_prompt

        text = chat_prompt(tok, text)
    elif not isinstance(text, str):
        raise TypeError(f"text must be a string or a list of chat messages, got {type(text).__name__}")
    return {"ids": tok.encode(text, add_special_tokens=cfg["add_special_tokens"])}


@step("tokenizer.decode", inputs={"ids": In("token IDs")}, outputs={"text": Out("the text")},
      config=(F("graph", "str", REQUIRED, "the language model whose tokenizer to use"),
              F("skip_special_tokens", "bool", False, "leave out special tokens")),
      refs={"graph": "graph:" + LM})
def decode(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Token IDs to text."""
    ids = ins["ids"]
    ids = ids if isinstance(ids, (list, tuple)) else [ids]
    return {"text": m.graph(cfg["graph"]).tokenizer.decode(ids, skip_special_tokens=cfg["skip_special_tokens"])}


@step("tokenizer.stream_decode", inputs={"stream": In("a token stream", "state", ("token_stream",)),
                                         "token": In("the next token ID")},
      outputs={"text": Out("the text it completes (maybe empty: never half a character)")})
def stream_decode(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Push one token into a streaming decoder."""
    return {"text": ins["stream"].push(int(ins["token"]))}


@step("tokenizer.stream_flush", inputs={"stream": In("a token stream", "state", ("token_stream",))},
      outputs={"text": Out("the rest of the text")})
def stream_flush(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """The text of tokens pushed but not yet emitted; the stream starts over."""
    return {"text": ins["stream"].flush()}


@step("tokenizer.special", outputs={"id": Out("the token's ID, or null when the tokenizer has none")},
      config=(F("graph", "str", REQUIRED, "the language model whose tokenizer to ask"),
              F("token", "str", "eos", "which special token", choices=("eos", "bos", "pad"))),
      refs={"graph": "graph:" + LM})
def special(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """A special token's ID (an addition to the seed's tokenizer family: how a program knows EOS)."""
    tok = m.graph(cfg["graph"]).tokenizer
    return {"id": getattr(tok, f"{cfg['token']}_id")}


# ---- telemetry ---------------------------------------------------------------------------------------


@step("telemetry.counter", inputs={"value": In("what to add (default: config add)", optional=True)},
      config=(F("name", "str", REQUIRED, "the counter's name in the run's telemetry"), F("add", "int", 1, "")))
def t_counter(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Add to a named counter of the run's telemetry."""
    add = ins["value"] if "value" in ins else cfg["add"]
    m.telemetry.setdefault("counters", {}).setdefault(cfg["name"], 0)
    m.telemetry["counters"][cfg["name"]] += float(add) if isinstance(add, float) else int(add)
    return {}


@step("telemetry.histogram", inputs={"value": In("a number (or a list of numbers)")},
      config=(F("name", "str", REQUIRED, "the histogram's name in the run's telemetry"),))
def t_histogram(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Record numbers under a name (the run's telemetry keeps count, sum, min, max)."""
    v = ins["value"]
    xs = [float(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    h = m.telemetry.setdefault("histograms", {}).setdefault(
        cfg["name"], {"count": 0, "sum": 0.0, "min": float("inf"), "max": float("-inf")})
    for x in xs:
        h["count"] += 1
        h["sum"] += x
        h["min"], h["max"] = min(h["min"], x), max(h["max"], x)
    return {}


@step("telemetry.trace_tensor", inputs={"value": In("a tensor, logits, array or list")},
      config=(F("name", "str", REQUIRED, "the trace's name in the run's telemetry"),))
def t_trace(m: Machine, s: Step, ins: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Record a value's shape, dtype and min/mean/max (downloads it: a debugging aid)."""
    import numpy as np

    v = ins["value"]
    arr = v.download() if hasattr(v, "download") else np.asarray(v)
    a = np.asarray(arr, np.float64) if arr.size else np.zeros(0)
    m.telemetry.setdefault("traces", {}).setdefault(cfg["name"], []).append(
        {"shape": list(arr.shape), "dtype": str(arr.dtype),
         **({"min": float(a.min()), "mean": float(a.mean()), "max": float(a.max())} if a.size else {})})
    return {}


__all__ = ["DENOISER", "LM", "MAX_LOOP", "READABLE_STATES", "STATE_TYPES", "STEPS", "In", "Out", "Signal", "StepDef",
           "step"]
