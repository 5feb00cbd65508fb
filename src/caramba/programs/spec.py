"""A runtime program document, validated: sections, declarations and steps with their lines.

A program is a YAML document loaded by caramba's manifest loader (``variables``, ``${...}``,
``!include``, ``--set`` overrides, every value located) with these top-level sections::

    name, description           # like any manifest
    kind: runtime, op: runtime.<name>   # only in asset files (caramba/assets/runtime/)
    max_steps: 1000000          # the interpreter's hard guard on executed steps
    state:    {NAME: {type: token_buffer | kv_cache | counter | token_stream, ...}}
    samplers: {NAME: {type: greedy | categorical, temperature, top_k, top_p, min_p, repetition_penalty}}
    graphs:   {NAME: {type: language_model | denoiser, model: RUN_OR_FOLDER_OR_MANIFEST, ...}}
    program:  [{id, op, inputs: {PORT: NAME}, outputs: {PORT: NAME}, config: {...}, body: [...]}]

``validate_program(doc)`` checks all of it against the step table (``caramba.programs.steps``)
and raises one ``ManifestError`` at the first problem's line that also lists every other problem
(``.problems`` holds them all).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from caramba.errors import ConfigError, did_you_mean
from caramba.manifest.errors import Loc, ManifestError, short
from caramba.manifest.loader import Document
from caramba.manifest.registry import ConfigField, coerce
from caramba.programs.steps import DENOISER, LM, READABLE_STATES, STEPS, F, StepDef

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
TOP_KEYS = ("name", "description", "kind", "op", "label", "max_steps", "state", "samplers", "graphs", "program")
STEP_KEYS = ("id", "op", "inputs", "outputs", "config", "body", "description")
DEFAULT_MAX_STEPS = 1_000_000
MAX_STEPS = 10**12
MAX_PROGRAM_STEPS = 10_000  # steps written in one program (bodies included)
MAX_CAPACITY = 2**20

# Declarations: type -> its typed fields (the registry's ConfigField, as op configs use).
STATE_FIELDS: dict[str, tuple[ConfigField, ...]] = {
    "token_buffer": (F("initial", "ints", [], "the tokens it starts with (and resets to)"),),
    "kv_cache": (F("graph", "str", doc="the language model whose keys and values it holds"),
                 F("capacity", "int", doc="positions it holds (prompt + generated - 1)", range_=f"[1, {MAX_CAPACITY}]")),
    "counter": (F("initial", "int", 0, "the value it starts with (and resets to)"),),
    "token_stream": (F("graph", "str", doc="the language model whose tokenizer decodes it"),
                     F("skip_special_tokens", "bool", False, "leave special tokens out of the text")),
}
SAMPLER_FIELDS: dict[str, tuple[ConfigField, ...]] = {
    "greedy": (),
    "categorical": (F("temperature", "float", 1.0, "> 0 (0 is greedy)", range_="[0, inf)"),
                    F("top_k", "int", 0, "the k most likely tokens (0: all)", range_="[0, inf)"),
                    F("top_p", "float", 1.0, "nucleus mass", range_="(0, 1]"),
                    F("min_p", "float", 0.0, "fraction of the top probability", range_="[0, 1]"),
                    F("repetition_penalty", "float", 1.0, "> 1 discourages seen tokens", range_="(0, inf)")),
}
GRAPH_FIELDS: dict[str, tuple[ConfigField, ...]] = {
    LM: (F("model", "str?", None, "a run ID (prefix, latest), a Hugging Face folder or a manifest "
           "with a from_safetensors topology; null: given with --model"),
         F("logits", "str?", None, "the node whose output is the logits (default: the one model node)"),
         F("dtype", "str", "float32", "parameter dtype of a Hugging Face checkpoint", choices=("float32", "float64"))),
    DENOISER: (F("model", "str?", None, "a diffusion run ID (prefix, latest); null: given with --model"),),
}
STATE_GRAPH = {"kv_cache": LM, "token_stream": LM}  # state types that name a graph, and its type


@dataclass(frozen=True)
class Decl:
    """A state, sampler or graph declaration: its name, type and resolved fields."""

    name: str
    type: str
    config: dict[str, Any]
    path: tuple
    loc: Loc


@dataclass
class Step:
    """One validated step; ``config`` has defaults filled, ``given`` the keys written."""

    id: str
    op: str
    inputs: dict[str, str]
    outputs: dict[str, str]
    config: dict[str, Any]
    given: frozenset[str]
    body: tuple["Step", ...]
    path: tuple
    loc: Loc
    graph_type: str | None = None

    @property
    def spec(self) -> StepDef:
        return STEPS[self.op]


@dataclass
class Program:
    name: str
    description: str
    doc: Document
    state: dict[str, Decl] = field(default_factory=dict)
    samplers: dict[str, Decl] = field(default_factory=dict)
    graphs: dict[str, Decl] = field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    max_steps: int = DEFAULT_MAX_STEPS

    def walk(self) -> list[Step]:
        """Every step, bodies included, in program order."""
        out: list[Step] = []

        def go(steps: tuple[Step, ...]) -> None:
            for s in steps:
                out.append(s)
                go(s.body)

        go(self.steps)
        return out


class _Bad(Exception):
    pass


class _Check:
    """Collects located problems; ``done()`` raises them as one ManifestError."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.problems: list[ManifestError] = []

    def bad(self, path: tuple, message: str, *, key: bool = False, hint: str | None = None) -> None:
        self.problems.append(self.doc.error(path, message, key=key, hint=hint))

    def done(self) -> None:
        if not self.problems:
            return
        first, rest = self.problems[0], self.problems[1:]
        msg = first.message
        if rest:
            msg += f" (and {len(rest)} more problem{'s' if len(rest) > 1 else ''}:"
            msg += "".join(f"\n  {e.loc}: {e.path + ': ' if e.path else ''}{e.message}" for e in rest[:20])
            msg += "\n  ...)" if len(rest) > 20 else ")"
        err = ManifestError(msg, loc=first.loc, path=first.path, hint=first.hint)
        err.problems = list(self.problems)  # type: ignore[attr-defined]
        raise err

    def fields(self, given: Any, fields: tuple[ConfigField, ...], path: tuple, what: str) -> dict[str, Any]:
        """Resolve typed fields (unknown keys, types, ranges, required ones, defaults)."""
        if not isinstance(given, dict):
            self.bad(path, f"{what} must be a mapping, got {short(given)}")
            return {f.name: None if f.required else f.default for f in fields}
        index = {f.name: f for f in fields}
        for k in given:
            if k not in index:
                self.bad((*path, k), f"unknown key '{k}' for {what}; "
                         + (did_you_mean(str(k), list(index)) if index else "it takes none"), key=True)
        out: dict[str, Any] = {}
        for f in fields:
            if f.name in given:
                try:
                    out[f.name] = coerce(f, given[f.name], _raise)
                except _Bad as exc:
                    self.bad((*path, f.name), str(exc).replace("config '", "'", 1))
                    out[f.name] = None if f.required else f.default
            elif f.required:
                self.bad(path, f"missing required key '{f.name}' ({f.type}) for {what}"
                         + (f": {f.description}" if f.description else ""), key=True)
                out[f.name] = None
            else:
                out[f.name] = f.default
        return out


def _raise(msg: str) -> None:
    raise _Bad(msg)


def validate_program(doc: Document) -> Program:
    """Check a loaded program document; raises a ManifestError listing every problem with its line."""
    c = _Check(doc)
    data = doc.data
    if not isinstance(data, dict):
        raise doc.error((), "a runtime program is a mapping of sections (state, samplers, graphs, program)")
    for k in data:
        if k not in TOP_KEYS:
            hint = ("this looks like an experiment manifest: check it with `caramba manifest validate`"
                    if k in ("topology", "trainer", "datasets", "targets") else None)
            c.bad((k,), f"unknown section '{k}' of a runtime program; {did_you_mean(str(k), TOP_KEYS)}", key=True,
                  hint=hint)
    name = data.get("name", "program")
    if not isinstance(name, str) or not NAME.match(name):
        c.bad(("name",), f"name must be a name (letters, digits, _ . -), got {short(name)}")
        name = "program"
    desc = data.get("description", "")
    if not isinstance(desc, str):
        c.bad(("description",), f"description must be a string, got {short(desc)}")
        desc = ""
    if not isinstance(data.get("label", ""), str):
        c.bad(("label",), f"label must be a string, got {short(data['label'])}")
    if "kind" in data and data["kind"] != "runtime":
        c.bad(("kind",), f"a runtime program's kind is 'runtime', got {short(data['kind'])}")
    if "op" in data and not (isinstance(data["op"], str) and data["op"].startswith("runtime.")
                             and NAME.match(data["op"])):
        c.bad(("op",), f"a runtime program's op is runtime.<name>, got {short(data['op'])}")
    max_steps = c.fields({k: data[k] for k in ("max_steps",) if k in data},
                         (F("max_steps", "int", DEFAULT_MAX_STEPS, range_=f"[1, {MAX_STEPS}]"),), (), "the program")
    prog = Program(name, desc, doc, max_steps=max_steps["max_steps"] or DEFAULT_MAX_STEPS)
    prog.state = _decls(c, data, "state", STATE_FIELDS)
    prog.samplers = _decls(c, data, "samplers", SAMPLER_FIELDS)
    prog.graphs = _decls(c, data, "graphs", GRAPH_FIELDS)
    for d in prog.samplers.values():
        if d.type == "categorical" and None not in d.config.values():
            from caramba.generate import Sampler

            try:
                Sampler(**d.config)
            except ConfigError as exc:
                c.bad(d.path, exc.message)
    for d in prog.state.values():
        want = STATE_GRAPH.get(d.type)
        g = d.config.get("graph")
        if want is not None and isinstance(g, str):
            _ref(c, prog.graphs, g, want, (*d.path, "graph"), "graph")
    steps = data.get("program")
    if steps is None:
        c.bad((), "missing section 'program' (a list of steps)")
    elif not isinstance(steps, list) or not steps:
        c.bad(("program",), f"program must be a non-empty list of steps, got {short(steps)}")
    else:
        _Walk(c, prog).run(steps)
    c.done()
    return prog


def _decls(c: _Check, data: dict, section: str, types: dict[str, tuple[ConfigField, ...]]) -> dict[str, Decl]:
    raw = data.get(section, {})
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        c.bad((section,), f"{section} must be a mapping of names to declarations, got {short(raw)}")
        return {}
    out: dict[str, Decl] = {}
    for name, spec in raw.items():
        path = (section, name)
        if not isinstance(name, str) or not IDENT.match(name):
            c.bad(path, f"{short(name)} is not a valid name (letters, digits and _, not starting with a digit)", key=True)
            continue
        if not isinstance(spec, dict):
            c.bad(path, f"{section}.{name} must be a mapping with a type, got {short(spec)}")
            continue
        kind = spec.get("type")
        if not isinstance(kind, str) or kind not in types:
            c.bad((*path, "type") if "type" in spec else path,
                  f"{section}.{name} needs a type, one of {', '.join(types)}; got {short(kind)}", key="type" not in spec)
            continue
        fields = c.fields({k: v for k, v in spec.items() if k != "type"}, types[kind], path, f"{kind} '{name}'")
        out[name] = Decl(name, kind, fields, path, c.doc.loc(path))
    return out


def _ref(c: _Check, table: dict[str, Decl], name: str, want: str | None, path: tuple, what: str) -> Decl | None:
    d = table.get(name)
    if d is None:
        c.bad(path, f"unknown {what} '{name}'; " + (did_you_mean(name, list(table)) if table else
                                                    f"the program declares no {what}s"))
        return None
    if want is not None and d.type != want:
        c.bad(path, f"{what} '{name}' is a {d.type}; this needs a {want}")
        return None
    return d


class _Walk:
    """The steps in program order: names, ports, config, references and assignment order."""

    def __init__(self, c: _Check, prog: Program) -> None:
        self.c = c
        self.prog = prog
        self.ids: dict[str, tuple] = {}
        self.count = 0
        self.first_assigned: dict[str, tuple[str, tuple]] = {}  # variable -> (step id, path) of its first writer

    def run(self, steps: list) -> None:
        self._collect(steps, ("program",))
        self.prog.steps = self.block(steps, ("program",), set(), 0)

    def _collect(self, steps: Any, path: tuple) -> None:
        """Every variable any step writes (to tell 'used before assigned' from 'unknown')."""
        if not isinstance(steps, list):
            return
        for i, s in enumerate(steps):
            if not isinstance(s, dict):
                continue
            outs = s.get("outputs")
            if isinstance(outs, dict):
                for v in outs.values():
                    if isinstance(v, str):
                        self.first_assigned.setdefault(v, (str(s.get("id")), (*path, i)))
            self._collect(s.get("body"), (*path, i, "body"))

    def block(self, steps: list, path: tuple, assigned: set[str], depth: int) -> tuple[Step, ...]:
        out = []
        for i, raw in enumerate(steps):
            s = self.step(raw, (*path, i), assigned, depth)
            if s is not None:
                out.append(s)
        return tuple(out)

    def step(self, raw: Any, p: tuple, assigned: set[str], depth: int) -> Step | None:
        c = self.c
        self.count += 1
        if self.count == MAX_PROGRAM_STEPS + 1:
            c.bad(p, f"a program has at most {MAX_PROGRAM_STEPS} steps")
        if self.count > MAX_PROGRAM_STEPS:
            return None
        if not isinstance(raw, dict):
            c.bad(p, f"a step is a mapping {{id, op, inputs, outputs, config, body}}, got {short(raw)}")
            return None
        for k in raw:
            if k not in STEP_KEYS:
                c.bad((*p, k), f"unknown step key '{k}'; {did_you_mean(str(k), STEP_KEYS)}", key=True)
        sid = raw.get("id")
        if not isinstance(sid, str) or not IDENT.match(sid):
            c.bad((*p, "id") if "id" in raw else p, "every step needs an id (letters, digits and _), got "
                  + short(sid))
            sid = f"step_{len(self.ids)}"
        elif sid in self.ids:
            c.bad((*p, "id"), f"step id '{sid}' is used twice (first at line {c.doc.loc(self.ids[sid]).line})")
        else:
            self.ids[sid] = p
        op = raw.get("op")
        if not isinstance(op, str) or op not in STEPS:
            c.bad((*p, "op") if "op" in raw else p, f"unknown step op {short(op)}; "
                  + did_you_mean(op if isinstance(op, str) else "", list(STEPS)))
            return None
        spec = STEPS[op]
        ins = self.names(raw, "inputs", p, spec.inputs, f"{op}")
        outs = self.names(raw, "outputs", p, spec.outputs, f"{op}")
        given = raw.get("config", {})
        cfg = c.fields(given if given is not None else {}, spec.config, (*p, "config"), f"step op {op}")
        s = Step(sid, op, ins, outs, cfg, frozenset(given) if isinstance(given, dict) else frozenset(), (),
                 p, c.doc.loc(p))
        for key, target in spec.refs.items():
            v = cfg.get(key)
            if isinstance(v, str):
                section, _, want = target.partition(":")
                table = self.prog.graphs if section == "graph" else self.prog.samplers
                d = _ref(c, table, v, want or None, (*p, "config", key), section)
                if d is not None and section == "graph":
                    s.graph_type = d.type
        for port, port_spec in spec.inputs.items():
            if port not in ins and not port_spec.optional:
                c.bad((*p, "inputs") if "inputs" in raw else p, f"step '{sid}' ({op}) needs input '{port}': "
                      f"{port_spec.doc}")
        if spec.check is not None:
            spec.check(s, self.prog, lambda q, msg: c.bad((*p, *q), f"step '{sid}': {msg}"))
        if op in ("control.break_if", "control.continue_if") and depth == 0:
            c.bad((*p, "op"), f"step '{sid}': {op} is outside a loop; it acts on the innermost loop around it")
        late = {"condition"} if op == "control.loop_until" else set()
        for port, var in ins.items():
            if port not in late:
                self.read(s, port, var, assigned)
        inner = set(assigned) | (set(outs.values()) if spec.body else set())  # a loop binds index/item first
        if spec.body:
            body = raw.get("body")
            if not isinstance(body, list) or not body:
                c.bad((*p, "body") if "body" in raw else p, f"step '{sid}' ({op}) needs a body: a non-empty list "
                      "of steps")
            else:
                s.body = self.block(body, (*p, "body"), inner, depth + 1)
            assigned |= inner
        elif "body" in raw:
            c.bad((*p, "body"), f"step '{sid}' ({op}) takes no body; only control.loop_* steps do", key=True)
        for port, var in ins.items():
            if port in late:
                self.read(s, port, var, assigned)
        for port, var in outs.items():
            if var in self.prog.state:
                c.bad((*p, "outputs", port), f"step '{sid}' writes '{var}', which is a state; states change "
                      "through state.* steps (use another variable name)")
            assigned.add(var)
        for port, out_spec in spec.outputs.items():
            if out_spec.inplace and port not in outs and out_spec.inplace in ins:
                var = ins[out_spec.inplace]
                if var in self.prog.state:
                    c.bad((*p, "inputs", out_spec.inplace), f"step '{sid}' ({op}) writes its {port} back to "
                          f"'{var}', which is a state; use a variable (or state.* steps for states)")
        return s

    def names(self, raw: dict, side: str, p: tuple, ports: dict, op: str) -> dict[str, str]:
        c = self.c
        given = raw.get(side, {})
        if given is None:
            return {}
        if not isinstance(given, dict):
            c.bad((*p, side), f"{side} maps port names to variable names, got {short(given)}")
            return {}
        out: dict[str, str] = {}
        for port, var in given.items():
            if port not in ports:
                c.bad((*p, side, port), f"{op} has no {side[:-1]} '{port}'; "
                      + (did_you_mean(str(port), list(ports)) if ports else f"it takes no {side}"), key=True)
                continue
            if not isinstance(var, str) or not IDENT.match(var):
                c.bad((*p, side, port), f"{side[:-1]} '{port}' must name a variable or state (letters, digits and "
                      f"_), got {short(var)}")
                continue
            out[port] = var
        return out

    def read(self, s: Step, port: str, var: str, assigned: set[str]) -> None:
        c = self.c
        port_spec = s.spec.inputs[port]
        path = (*s.path, "inputs", port)
        st = self.prog.state.get(var)
        if port_spec.kind == "state":
            if st is None:
                c.bad(path, f"step '{s.id}': input '{port}' names a state ({'/'.join(port_spec.states)}); unknown "
                      f"state '{var}'; " + (did_you_mean(var, list(self.prog.state)) if self.prog.state
                                            else "the program declares no state"))
            elif st.type not in port_spec.states:
                c.bad(path, f"step '{s.id}': input '{port}' takes a {' or '.join(port_spec.states)} state; "
                      f"'{var}' is a {st.type}")
            return
        if st is not None:
            if st.type not in READABLE_STATES:
                c.bad(path, f"step '{s.id}': '{var}' is a {st.type} state, which has no value to read here "
                      "(state.inspect gives its size)")
            return
        if var in assigned:
            return
        if var in self.first_assigned:
            writer, wpath = self.first_assigned[var]
            c.bad(path, f"step '{s.id}' reads '{var}' before it is assigned (step '{writer}' at line "
                  f"{c.doc.loc(wpath).line} assigns it first)")
        else:
            known = sorted(assigned | set(self.prog.state))
            c.bad(path, f"step '{s.id}' reads unknown variable '{var}'; "
                  + (did_you_mean(var, known) if known else "no variable is assigned before this step"))


__all__ = ["DEFAULT_MAX_STEPS", "Decl", "Program", "Step", "validate_program"]
