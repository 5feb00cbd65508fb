"""The interpreter: runs a validated program's steps against its states, samplers and graphs.

Variables hold host values (ints, strings, lists) or handles to what stays on the runner (a
denoiser's sample, a language model's logits). Loops are bounded by their own count or max and,
all together, by the program's ``max_steps`` (every executed step counts). ``io.read_line`` reads
``input`` (stdin by default) and ``io.emit_*`` write ``output`` (stdout). Ctrl-C
(KeyboardInterrupt) propagates after every runner the program opened is closed.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from caramba.errors import CarambaError
from caramba.programs.graphs import GRAPHS, ProgramError, make_state
from caramba.programs.spec import Program, Step
from caramba.programs.steps import Signal

# What one variable (or an input line) may hold: elements of its lists and dicts plus characters of
# its strings, all nesting levels together, and how deep its lists nest. A program that doubles a
# list in a loop, or nests a list in itself, stops here with a ProgramError at its step instead of
# exhausting memory (or hanging in a copy or comparison of an exponentially large value).
MAX_VALUE_ITEMS = 1 << 22
MAX_VALUE_DEPTH = 16
_SCALARS = {int, float, bool, type(None)}


def value_too_large(value: Any, limit: int = MAX_VALUE_ITEMS, max_depth: int = MAX_VALUE_DEPTH) -> str | None:
    """Why ``value`` is over the limits (None when it is within them). The walk stops as soon as it
    has counted ``limit`` elements, so it costs O(limit) even for a value that shares a list with
    itself exponentially often."""
    count = len(value) if isinstance(value, (str, list, tuple, dict)) else 0  # a container counts when found
    stack: list[tuple[Any, int]] = [(value, 0)] if isinstance(value, (list, tuple, dict)) else []
    while stack and count <= limit:
        v, depth = stack.pop()
        items = v.values() if isinstance(v, dict) else v
        kinds = set(map(type, items))  # in C: a flat list of numbers (token IDs) costs no Python loop
        if kinds <= _SCALARS:
            continue
        if kinds <= {str}:
            count += sum(map(len, items))
            continue
        for x in items:
            if isinstance(x, str):
                count += len(x)
            elif isinstance(x, (list, tuple, dict)):
                if depth + 1 >= max_depth:
                    return f"it nests lists more than {max_depth} deep"
                count += len(x)
                if count > limit:
                    break
                stack.append((x, depth + 1))
    if count > limit:
        return f"it holds more than {limit:,} elements and characters"
    return None


@dataclass
class Result:
    """What a finished run reports: executed steps, the telemetry steps recorded and the variables."""

    steps: int
    telemetry: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)


class Machine:
    """One run of a program. ``backend``: a backend spec for the runners it opens; ``seed``: the
    sampling and noise seed; ``store``/``config``: where run IDs are looked up."""

    def __init__(self, program: Program, *, backend: str = "cpu", seed: int = 0, input: IO[str] | None = None,
                 output: IO[str] | None = None, store: str | None = None, config: str | None = None,
                 max_steps: int | None = None, base_dir: str | Path | None = None) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ProgramError(f"seed must be an int >= 0, got {seed!r}")
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
            raise ProgramError(f"max_steps must be an int >= 1, got {max_steps!r}")
        self.program = program
        self.backend = backend
        self.seed = seed
        self.input = input if input is not None else sys.stdin
        self.output = output if output is not None else sys.stdout
        self.store, self.config = store, config
        self.max_steps = max_steps if max_steps is not None else program.max_steps
        self.base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        self.vars: dict[str, Any] = {}
        self.telemetry: dict[str, Any] = {}
        self.executed = 0
        self.samplers = {n: _sampler(d) for n, d in program.samplers.items()}
        self._graphs: dict[str, Any] = {}
        self.states = {n: make_state(d, self) for n, d in program.state.items()}
        self._store: Any = None

    # ---- what steps use ------------------------------------------------------------------------
    def graph(self, name: str) -> Any:
        if name not in self._graphs:
            d = self.program.graphs[name]
            self._graphs[name] = GRAPHS[d.type](d, self)
        return self._graphs[name]

    def sampler(self, name: str) -> Any:
        return self.samplers[name]

    def run_store(self) -> Any:
        if self._store is None:
            from caramba.config import load_settings
            from caramba.store.runs import open_runs

            self._store = open_runs(load_settings(self.config, overrides={"store": self.store}).store)
        return self._store

    def path(self, p: str | Path) -> Path:
        q = Path(p)
        return q if q.is_absolute() else self.base_dir / q

    def write(self, text: str) -> None:
        if text:
            self.output.write(text)
            self.output.flush()

    def read_line(self) -> str | None:
        line = self.input.readline(MAX_VALUE_ITEMS + 1)
        if len(line) > MAX_VALUE_ITEMS:
            raise ProgramError(f"an input line is longer than {MAX_VALUE_ITEMS:,} characters")
        return line if line else None

    def truth(self, s: Step, port: str) -> bool:
        return bool(self._value(s, s.inputs[port]))

    def bind(self, s: Step, values: Mapping[str, Any]) -> None:
        """Write a step's outputs to the variables its ``outputs:`` names (or, for an in-place
        port left unnamed, back to its input variable)."""
        spec = s.spec
        for port, value in values.items():
            var = s.outputs.get(port)
            if var is None:
                src = spec.outputs[port].inplace if port in spec.outputs else None
                var = s.inputs.get(src) if src else None
            if var is not None:
                why = value_too_large(value)
                if why is not None:
                    raise ProgramError(f"step '{s.id}' ({s.op}): output '{port}' (variable '{var}') is too large: "
                                       f"{why}", origin=s.loc, hint="bound the loop that grows it")
                self.vars[var] = value

    def run_body(self, s: Step) -> Signal | None:
        sig = self.execute(s.body)
        return Signal.BREAK if sig is Signal.BREAK else None

    # ---- running -----------------------------------------------------------------------------------
    def run(self) -> Result:
        """Run the program to its end (or until a step fails, or Ctrl-C); always closes its runners."""
        try:
            self.execute(self.program.steps)
        finally:
            self.close()
        return Result(self.executed, self.telemetry, dict(self.vars))

    def execute(self, steps: tuple[Step, ...]) -> Signal | None:
        for s in steps:
            self.executed += 1
            if self.executed > self.max_steps:
                raise ProgramError(f"the program ran {self.max_steps} steps (its max_steps) and was stopped at step "
                                   f"'{s.id}' ({s.op})", origin=s.loc,
                                   hint="raise max_steps in the program or with --max-steps, or bound its loops")
            res = self._call(s)
            if isinstance(res, Signal):
                return res
            self.bind(s, res)
        return None

    def _value(self, s: Step, name: str) -> Any:
        if name in self.states:
            return self.states[name].read()
        if name not in self.vars:
            raise ProgramError(f"step '{s.id}' ({s.op}) reads '{name}', which has no value yet (a loop that "
                               "assigns it ran no pass, or skipped that step)", origin=s.loc)
        return self.vars[name]

    def _call(self, s: Step) -> Any:
        spec = s.spec
        ins: dict[str, Any] = {}
        for port, name in s.inputs.items():
            if spec.inputs[port].kind == "state":
                ins[port] = self.states[name]
            elif not (spec.body and port == "condition"):
                ins[port] = self._value(s, name)
        try:
            return spec.run(self, s, ins, s.config)
        except CarambaError as exc:
            if exc.origin is None:  # name the step and its line
                exc.origin = s.loc
                exc.node = exc.node or s.id
                exc.args = (exc._render(),)
            raise
        except (TypeError, ValueError, KeyError, IndexError, OverflowError, AttributeError) as exc:
            raise ProgramError(f"step '{s.id}' ({s.op}): {exc}", origin=s.loc) from None

    def close(self) -> None:
        errors: list[BaseException] = []
        for thing in [*self.states.values(), *self._graphs.values()]:
            try:
                thing.close()
            except Exception as exc:  # close everything, then report the first failure
                errors.append(exc)
        if errors:
            raise errors[0]


def _sampler(decl: Any) -> Any:
    from caramba.generate import GREEDY, Sampler

    return GREEDY if decl.type == "greedy" else Sampler(**decl.config)


__all__ = ["MAX_VALUE_DEPTH", "MAX_VALUE_ITEMS", "Machine", "Result", "value_too_large"]
