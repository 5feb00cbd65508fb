"""``Generator``: autoregressive generation with the KV caches resident on the runner.

The model is lowered from the same assets in decode mode (``lower_topology(...,
cache=CacheSpec)``): a *prefill* graph per prompt length T (tokens [B, T], positions 0) and
*decode* graphs (tokens [B, 1] at each row's own position), each for a span of cache slots (64,
128, ... up to the capacity: a step reads the smallest span that holds its positions). Both write the keys and values they compute into
the attention layers' cache state and attend over the whole cache through a keep-mask, so the
caches never leave the runner. Each graph ends in the rows' last-position logits [B, V]
(gathered at ``length - 1`` for a right-padded prefill) and the next token, picked in the graph:
``reduce.argmax`` (greedy) or ``sample.token`` (``Sampler``; the step counter is its key). Only
the B next tokens are downloaded per step.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from caramba.errors import CarambaError, ConfigError
from caramba.ir.dtypes import DType

TOKENS_OUT, LOGITS_OUT = "next", "logits"
LAST, STEP, SEEN = "last", "step", "seen"  # extra graph inputs: prefill's last index, sampler key, seen tokens
SPAN_MIN = 64  # the fewest cache slots a step reads (then 128, 256, ... up to the capacity)


class CapacityError(CarambaError):
    """A generation needs more positions than the KV cache holds.

    Cause: prompt length plus generated tokens (minus one: the last token is never fed back)
    exceeds the ``capacity`` the caches were made with. Fix: a larger capacity (``capacity=``,
    ``--capacity``), a shorter prompt or fewer new tokens."""


@dataclass(frozen=True)
class Sampler:
    """How the next token is drawn: ``temperature`` 0 is greedy (argmax, in the graph); otherwise
    ``sample.token`` with transformers' order (repetition penalty, temperature, top-k, top-p,
    min-p) and a counter-based random stream (``seed`` per generation, the step as key)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:  # the ranges are sample.token's: checked before anything compiles
        from caramba.errors import ConfigError, GraphError
        from caramba.ops.sample import check_attrs

        try:
            check_attrs(self.__dict__)
        except GraphError as exc:
            raise ConfigError(exc.message.replace("sample.token: ", "sampler: ")) from None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 and self.repetition_penalty == 1.0


GREEDY = Sampler()


@dataclass
class _Model:
    """What the generator lowers and loads: a topology whose node ``node`` maps the int64
    [batch, seq] input ``tokens`` to logits, and how the parameters reach a runner."""

    topology: Any
    doc: Any
    name: str
    model_spec: Any
    tokens: str
    node: str
    load: Callable[[Any, Mapping[str, Any]], None]  # (runner, param specs) -> state set
    context: int | None = None  # the longest sequence the model supports, when it has a limit


def _vocab_check(prompts: Sequence[Sequence[int]], vocab: int) -> list[np.ndarray]:
    rows = []
    for i, p in enumerate(prompts):
        a = np.asarray(list(p), dtype=np.int64)
        if a.ndim != 1 or a.size == 0:
            raise ConfigError(f"prompt {i} is empty; every row needs at least one token")
        bad = (a < 0) | (a >= vocab)
        if bad.any():
            j = int(np.argmax(bad))
            raise ConfigError(f"prompt {i} token {j} is {int(a[j])}, outside the vocabulary [0, {vocab})")
        rows.append(a)
    return rows


class Generator:
    """Greedy or sampled generation of a causal language model with a resident KV cache.

    ``Generator.from_pretrained(pt.open(dir), backend="cpu", capacity=256)`` or
    ``Generator.from_run(run_id, ...)``; then ``for tokens in gen.generate(prompts, 64): ...``
    streams one int64 [B] array per step. ``capacity`` is the positions each row may fill
    (prompt + generated - 1); the caches take ``2 * layers * B * kv_heads * capacity *
    head_dim`` values. Close it (or use ``with``) to free a runner it made.
    """

    def __init__(self, model: _Model, backend: Any = "cpu", capacity: int = 256,
                 max_bytes: int | None = None) -> None:
        from caramba import compute

        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0:
            raise ConfigError(f"capacity must be a positive number of positions, got {capacity!r}")
        if model.context is not None and capacity > model.context:
            raise ConfigError(f"capacity {capacity} is longer than the model's context of {model.context} positions",
                              hint=f"use --capacity {model.context} or less")
        self.model = model
        self.capacity = capacity
        self.max_bytes = max_bytes  # weights + caches; checked when the first graph is lowered
        self._own = not hasattr(backend, "compile")
        self.runner = compute.new(backend) if self._own else backend
        self._graphs: dict[tuple, tuple[Any, Any]] = {}  # (batch, T, span, sampler, seed) -> (executable, Lowered)
        self._batch: int | None = None
        self._caches: set[str] = set()
        self._loaded = False
        self._lengths = np.zeros(0, np.int64)
        self._last: dict[str, Any] = {}
        self.vocab_size: int | None = None

    # ---- construction --------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, model: Any, backend: Any = "cpu", capacity: int = 256,
                        params: Mapping[str, np.ndarray] | None = None, max_bytes: int | None = None) -> "Generator":
        """A generator for a ``caramba.pretrained.PretrainedModel`` (its checkpoint's weights, or
        ``params`` by parameter name)."""
        def load(runner: Any, specs: Mapping[str, Any]) -> None:
            if params is None:
                model.load(runner, specs)
            else:
                _upload(runner, specs, params)

        m = _model_of(model.prep, load, None)
        context = model.variables.get("context")  # GPT-2's n_positions: the position table
        m.context = context if isinstance(context, int) else None
        return cls(m, backend, capacity, max_bytes)

    @classmethod
    def from_manifest(cls, prep: Any, params: Mapping[str, np.ndarray], backend: Any = "cpu", capacity: int = 256,
                      node: str | None = None, max_bytes: int | None = None) -> "Generator":
        """A generator for the language model node of a prepared manifest (``node``, default: the
        one node whose op is a model asset, e.g. char_gpt's ``gpt``) with ``params`` by name (a
        run's checkpoint)."""
        return cls(_model_of(prep, lambda runner, specs: _upload(runner, specs, params), node), backend, capacity,
                   max_bytes)

    @classmethod
    def from_run(cls, ref: str, *, store: Any = None, backend: Any = "cpu", capacity: int | None = None) -> "Generator":
        """A generator for run ``ref``'s (ID, prefix or ``latest``) newest checkpoint."""
        prep, params, _ = run_model(ref, store=store)
        model = _model_of(prep, lambda runner, specs: _upload(runner, specs, params), None)
        return cls(model, backend, capacity if capacity is not None else (model.context or 256))

    def close(self) -> None:
        if self._own:
            self.runner.close()

    def __enter__(self) -> "Generator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- graphs ----------------------------------------------------------------------------
    def span(self, need: int) -> int:
        """The slots a call that fills positions up to ``need`` reads: the smallest of 64, 128,
        256, ... (and the capacity) that holds them, so a step's cost follows the sequence's
        length in doublings, not the capacity."""
        span = SPAN_MIN
        while span < need:
            span *= 2
        return min(span, self.capacity)

    def _graph(self, batch: int, t: int, sampler: Sampler, seed: int, span: int | None = None) -> Any:
        from caramba.manifest.lower import CacheSpec, lower_topology

        span = span if span is not None else self.span(t)
        key = (batch, t, span, sampler, seed if not sampler.greedy else 0)
        if key in self._graphs:
            return self._graphs[key][0]
        m = self.model
        spec = m.topology.inputs[m.tokens]
        dims: dict[str, int] = {}
        for d, n in zip(spec.shape, (batch, t), strict=True):
            if isinstance(d, str):
                dims[d] = n
            elif d != n:
                raise ConfigError(f"input '{m.tokens}' has a fixed size {d}; generation needs {n} there")
        low = lower_topology(m.topology, m.doc, dims=dims, outputs=[m.node], name=f"{m.name}.generate",
                             model_spec=m.model_spec, cache=CacheSpec(self.capacity, batch, span))
        _pick(low.graph, low.graph.outputs.pop(m.node), batch, t, sampler, seed)
        self._check_size(low.graph, batch)
        exe = self.runner.compile(low.graph)
        self._graphs[key] = (exe, low)
        if not self._loaded:
            m.load(self.runner, low.params)
            self._loaded = True
        self.vocab_size = low.graph.type_of(low.graph.outputs[LOGITS_OUT]).shape[-1]
        self._caches |= set(low.graph.state) - set(low.params)
        return exe

    def resident_bytes(self, graph: Any) -> int:
        """What ``graph``'s resident state takes: the weights and the KV caches."""
        return sum(d.type.nbytes for d in graph.state.values())

    def _check_size(self, graph: Any, batch: int) -> None:
        if self.max_bytes is None:
            return
        need = self.resident_bytes(graph)
        if need > self.max_bytes:
            from caramba.errors import ResourceError

            raise ResourceError(
                f"generating with this model needs {need / 2**20:.1f} MiB of weights and KV caches (capacity "
                f"{self.capacity}, batch {batch}); the limit is {self.max_bytes / 2**20:.1f} MiB",
                hint="a smaller capacity or batch, a smaller model, or a higher limit")

    def _use_batch(self, batch: int) -> None:
        """Caches are [batch, ...] state: a new batch size drops the old caches (and graphs)."""
        if self._batch == batch:
            return
        for name in self._caches:
            if name in self.runner.state:
                del self.runner.state[name]
        self._graphs = {k: v for k, v in self._graphs.items() if k[0] == batch}
        self._batch = batch

    def _run(self, batch: int, tokens: np.ndarray, positions: np.ndarray, sampler: Sampler, seed: int,
             step: int, last: np.ndarray | None = None, seen: np.ndarray | None = None) -> np.ndarray:
        t = tokens.shape[1]
        need = int(positions.max()) + t
        if need > self.capacity:
            raise CapacityError(f"the KV cache holds {self.capacity} positions; this call needs {need}",
                                hint="give a larger capacity (Generator(capacity=...), --capacity)")
        exe = self._graph(batch, t, sampler, seed, self.span(need))
        up = self.runner.upload
        feed = {self.model.tokens: up(tokens), "positions": up(positions)}
        if LAST in exe.input_types:
            feed[LAST] = up(last)
        if STEP in exe.input_types:
            feed[STEP] = up(np.asarray(step, np.int64))
        if SEEN in exe.input_types:
            feed[SEEN] = up(seen)
        self._last = exe.run(feed)
        return self._last[TOKENS_OUT].download()

    # ---- stepping ----------------------------------------------------------------------------
    def prefill(self, prompts: Sequence[Sequence[int]], sampler: Sampler = GREEDY, seed: int = 0,
                seen: np.ndarray | None = None) -> np.ndarray:
        """Run the prompts (right-padded to the longest) from position 0; returns each row's
        next token, int64 [B]. Resets the caches' contents for these rows."""
        batch = len(prompts)
        if batch == 0:
            raise ConfigError("no prompts")
        self._use_batch(batch)
        if self.vocab_size is None:
            self._graph(batch, 1, GREEDY, 0)  # learn the vocabulary (and load the weights) first
        rows = _vocab_check(prompts, self.vocab_size or 0)
        lengths = np.array([len(r) for r in rows], np.int64)
        t = int(lengths.max())
        tokens = np.zeros((batch, t), np.int64)
        for i, r in enumerate(rows):
            tokens[i, : len(r)] = r
        out = self._run(batch, tokens, np.zeros(batch, np.int64), sampler, seed, 0, lengths - 1, seen)
        self._lengths = lengths
        return out

    def decode(self, tokens: Sequence[int] | np.ndarray, sampler: Sampler = GREEDY, seed: int = 0, step: int = 1,
               seen: np.ndarray | None = None) -> np.ndarray:
        """Feed one token per row at each row's next position; returns the next tokens [B]."""
        tok = np.asarray(tokens, np.int64).reshape(-1, 1)
        if self._batch is None or tok.shape[0] != self._batch or len(self._lengths) != self._batch:
            raise ConfigError("decode() continues a prefill() of the same batch size")
        out = self._run(self._batch, tok, self._lengths, sampler, seed, step, None, seen)
        self._lengths = self._lengths + 1
        return out

    def logits(self) -> np.ndarray:
        """The last step's last-position logits [B, V], downloaded (tests, inspection)."""
        if not self._last:
            raise ConfigError("no step has run yet")
        return self._last[LOGITS_OUT].download()

    @property
    def lengths(self) -> np.ndarray:
        """Each row's filled positions (prompt + fed tokens)."""
        return self._lengths.copy()

    def vocab(self) -> int:
        """The model's vocabulary size (the logits' last dimension); before the first step this
        compiles the smallest graph and loads the weights, as a repetition penalty's first step does."""
        if self.vocab_size is None:
            self._use_batch(self._batch or 1)
            self._graph(self._batch or 1, 1, GREEDY, 0)
        return int(self.vocab_size or 0)

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, eos_id: int | None = None,
                 sampler: Sampler | None = None, seed: int = 0) -> Iterator[np.ndarray]:
        """Stream ``max_new_tokens`` steps of next tokens, one int64 [B] array per step; a row that
        produced ``eos_id`` reports -1 from then on and generation stops when every row has.
        Rows may have different lengths. Raises ``CapacityError`` before running anything when
        the longest prompt plus ``max_new_tokens - 1`` exceeds the capacity."""
        sampler = sampler or GREEDY
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
        if not prompts:
            raise ConfigError("no prompts")
        longest = max(len(p) for p in prompts)
        need = longest + max_new_tokens - 1
        if need > self.capacity:
            raise CapacityError(f"the KV cache holds {self.capacity} positions; a prompt of {longest} tokens and "
                                f"{max_new_tokens} new tokens need {need}",
                                hint=f"give a capacity of at least {need} (Generator(capacity=...), --capacity)")
        return self._stream(prompts, max_new_tokens, eos_id, sampler, seed)

    def _stream(self, prompts: Sequence[Sequence[int]], n: int, eos_id: int | None, sampler: Sampler,
                seed: int) -> Iterator[np.ndarray]:
        track = sampler.repetition_penalty != 1.0
        seen = None
        if track:
            if self.vocab_size is None:
                self._use_batch(len(prompts))
                self._graph(len(prompts), 1, GREEDY, 0)
            seen = np.zeros((len(prompts), self.vocab_size or 0), bool)
            for i, p in enumerate(prompts):
                seen[i, np.asarray(list(p), np.int64)] = True
        done = np.zeros(len(prompts), bool)
        tok = self.prefill(prompts, sampler, seed, seen)
        for i in range(n):
            yield np.where(done, -1, tok)
            if eos_id is not None:
                done |= tok == eos_id
            if done.all() or i == n - 1:
                return
            if seen is not None:
                seen[np.arange(len(tok)), tok] = True
            tok = self.decode(np.where(done, 0, tok), sampler, seed, i + 1, seen)


# ---- the in-graph pick ---------------------------------------------------------------------------


def _pick(g: Any, logits_ref: Any, batch: int, t: int, sampler: Sampler, seed: int) -> None:
    """Add the last-position logits [B, V] and the next token [B] to ``g`` as outputs."""
    logits = g.value(logits_ref)
    if logits.ndim != 3 or logits.shape[:2] != (batch, t):
        raise ConfigError(f"the model's output is {logits.type}; generation needs logits [{batch}, {t}, vocab]")
    v = logits.shape[-1]
    if t == 1:
        last = g.call("shape.reshape", (logits,), {"shape": (batch, v)}, id="generate.last_logits")
    else:  # row b's last real token sits at b * T + last[b] of the [B*T, V] rows
        idx = g.input(LAST, (batch,), DType.int64)
        rows = g.call("shape.iota", (), {"shape": (batch,), "axis": 0, "dtype": DType.int64}, id="generate.rows")
        base = g.call("math.mul", (rows, g.constant(t, DType.int64, id="generate.t")), id="generate.row_base")
        flat = g.call("math.add", (base, idx), id="generate.flat_index")
        all_rows = g.call("shape.reshape", (logits,), {"shape": (batch * t, v)}, id="generate.flat_logits")
        last = g.call("shape.gather", (all_rows, flat), {"axis": 0}, id="generate.last_logits")
    g.output(LOGITS_OUT, last)
    # ---- THE SAMPLER HOOK: greedy argmax, or sample.token(logits [B, V], key, seen) -> int64 [B]
    if sampler.greedy:
        nxt = g.call("reduce.argmax", (last,), {"axis": -1}, id="generate.next")
    else:
        key = g.input(STEP, (), DType.int64)
        ins = [last, key]
        if sampler.repetition_penalty != 1.0:
            ins.append(g.input(SEEN, (batch, v), DType.bool))
        attrs = {"seed": int(seed), "temperature": float(sampler.temperature), "top_k": int(sampler.top_k),
                 "top_p": float(sampler.top_p), "min_p": float(sampler.min_p),
                 "repetition_penalty": float(sampler.repetition_penalty)}
        nxt = g.call("sample.token", ins, attrs, id="generate.next")
    g.output(TOKENS_OUT, nxt)


# ---- models of runs ---------------------------------------------------------------------------------


def _upload(runner: Any, specs: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    missing = sorted(set(specs) - set(params))
    if missing:
        raise ConfigError(f"no value for parameter '{missing[0]}' ({len(missing)} missing)")
    for n, spec in specs.items():
        runner.state[n] = runner.upload(np.asarray(params[n]), spec.dtype)


def _model_of(prep: Any, load: Callable[[Any, Mapping[str, Any]], None], node: str | None) -> _Model:
    """The language-model node of a prepared manifest as a topology of its own."""
    from caramba.manifest.registry import registry

    topo = prep.manifest.topology
    res = topo.pretrained
    if res is not None and node in (None, res.node.id):
        sub = topo.model_copy(update={"nodes": [], "outputs": {}})
        chosen, inputs = res.node, list(res.node.in_)
    else:
        reg = registry()
        models = [n for n in topo.nodes if (node is None and reg.get(n.op, ("operation", "block", "model")).kind == "model")
                  or n.id == node]
        if len(models) != 1:
            names = [n.id for n in topo.nodes]
            raise ConfigError(f"cannot tell which node is the language model ({'none' if not models else [n.id for n in models]} "
                              f"of {names}); name it", hint="pass node=<id> (the node whose output is the logits)")
        chosen = models[0]
        inputs = list(chosen.in_)
        sub = topo.model_copy(update={"nodes": [chosen], "outputs": {}})
    if len(inputs) != 1 or inputs[0] not in topo.inputs:
        raise ConfigError(f"node '{chosen.id}' reads {inputs}; generation needs a model fed by one topology input "
                          "of token IDs [batch, seq]")
    spec = topo.inputs[inputs[0]]
    sub = sub.model_copy(update={"inputs": {inputs[0]: spec}})
    context = chosen.config.get("context") if isinstance(chosen.config, dict) else None
    return _Model(sub, prep.doc, prep.manifest.name, prep.manifest.model, inputs[0], chosen.id, load,
                  context if isinstance(context, int) else None)


def model_context(prep: Any, node: str | None = None) -> int | None:
    """The most positions the language model of a prepared manifest takes (its position table,
    ``context``), or None when it has no such limit (rotary models)."""
    return _model_of(prep, _upload, node).context


def run_model(ref: str, *, store: Any = None, max_bytes: int | None = None) -> tuple[Any, dict[str, np.ndarray], Any]:
    """(prepared manifest, newest checkpoint's tensors, run record) of run ``ref``; the
    checkpoint's digest is checked against the store's record (as ``caramba model export``);
    a checkpoint over ``max_bytes`` is refused before it is read."""
    from caramba.run.trained import load_trained

    run = load_trained(ref, store, purpose="generate with", max_bytes=max_bytes)
    return run.prep, run.params, run.record


def is_checkpoint_folder(path: str | os.PathLike[str]) -> bool:
    """A Hugging Face folder (config.json beside safetensors), as opposed to a run ID."""
    from pathlib import Path

    p = Path(path)
    try:
        return p.is_dir() and (p / "config.json").is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: not a folder
        return False


__all__ = ["GREEDY", "CapacityError", "Generator", "Sampler", "is_checkpoint_folder", "model_context", "run_model"]
