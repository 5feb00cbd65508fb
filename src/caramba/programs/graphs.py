"""The graphs and states a program runs on the runner: language models with resident KV caches
(``caramba.generate.Generator``) and diffusion denoisers split into a predict and an update graph.

Tensors stay on the runner: a ``Logits`` handle stands for the logits a graph.call left there
and is sampled *in the graph* by sampler.next_token (the call runs then, with that sampler, and
only the token comes back); a denoiser's sample and prediction are runner tensors from the
first step to io.write_image.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from caramba.errors import CarambaError, ConfigError
from caramba.programs.spec import Decl
from caramba.programs.steps import DENOISER, LM


class ProgramError(CarambaError):
    """A runtime program failed while running: a step got a value it cannot use, the program ran
    past its ``max_steps`` guard, or a graph has no model.

    The message names the step and its manifest line. Fix the program (or give what it asks
    for: ``--model``, a larger ``max_steps``)."""


def _ints(v: Any, what: str) -> list[int]:
    items = v if isinstance(v, (list, tuple)) else [v]
    if set(map(type, items)) <= {int}:  # the common case, without a Python loop
        return list(items)
    out = []
    for t in items:
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
            raise ProgramError(f"{what} must be token IDs (ints), got {type(t).__name__}")
        out.append(int(t))
    return out


# ---- graphs ----------------------------------------------------------------------------------------


class LanguageModel:
    """A ``graphs:`` entry of type language_model: opened on first use; each KV cache state makes
    its own ``Generator`` (the caches live in that generator's runner)."""

    kind = LM

    def __init__(self, decl: Decl, machine: Any) -> None:
        self.decl = decl
        self.m = machine
        self._opened: tuple[Any, Any] | None = None  # (make(capacity) -> Generator, tokenizer or None)

    def _open(self) -> tuple[Any, Any]:
        if self._opened is not None:
            return self._opened
        from caramba.generate import Generator, is_checkpoint_folder

        name, cfg, m = self.decl.name, self.decl.config, self.m
        model = cfg["model"]
        if model is None:
            raise ProgramError(f"graph '{name}' has no model", origin=self.decl.loc,
                               hint=f"give --model RUN_OR_FOLDER, or --set graphs.{name}.model=...")
        path = m.path(model)
        node = cfg["logits"]
        if is_checkpoint_folder(path) or (path.suffix in (".yml", ".yaml") and path.is_file()):
            import caramba.pretrained as pt

            if path.is_dir():
                source = pt.open(path, dtype=cfg["dtype"])
                folder = path
            else:
                from caramba.manifest.compile import prepare
                from caramba.pretrained.model import PretrainedModel

                prep = prepare(path, load_data=False)
                fs = prep.manifest.topology.from_safetensors
                if fs is None:
                    raise ConfigError(f"{model}: graph '{name}' needs trained weights; this manifest's topology has "
                                      "no from_safetensors checkpoint", hint="give the run ID of a run that trained it")
                source = PretrainedModel(prep, path.read_text(encoding="utf-8"))
                folder = prep.doc.base_dir / fs.source
            res = source.prep.manifest.topology.pretrained
            if node is not None and node != res.node.id:
                raise ConfigError(f"graph '{name}': the logits of {model} are the output of node '{res.node.id}', "
                                  f"not '{node}'")
            backend = m.backend

            def make(cap: int) -> Any:
                return Generator.from_pretrained(source, backend=backend, capacity=cap)

            tok = _folder_tokenizer(folder)
        else:
            from caramba.generate import run_model

            prep, params, _ = run_model(str(model), store=m.run_store())
            backend = m.backend

            def make(cap: int) -> Any:
                return Generator.from_manifest(prep, params, backend=backend, capacity=cap, node=node)

            tok = getattr(prep.dataset, "tokenizer", None)
            vocab = getattr(prep.dataset, "vocab", None)
            if tok is None and vocab is not None:
                from caramba.text import CharTokenizer

                tok = CharTokenizer(vocab)
        self._opened = (make, tok)
        return self._opened

    def generator(self, capacity: int) -> Any:
        return self._open()[0](capacity)

    @property
    def tokenizer(self) -> Any:
        tok = self._open()[1]
        if tok is None:
            raise ConfigError(f"graph '{self.decl.name}' ({self.decl.config['model']}) has no tokenizer",
                              hint="a Hugging Face folder carries tokenizer.json; a run's text dataset its characters")
        return tok

    def close(self) -> None:
        pass


def _folder_tokenizer(folder: Path) -> Any:
    from caramba.text.tokenizer import tokenizer_files

    try:
        files = tokenizer_files(folder)
    except CarambaError:
        return None
    if "tokenizer.json" not in files:
        return None
    from caramba.text import load_tokenizer

    return load_tokenizer(folder)


class Denoiser:
    """A ``graphs:`` entry of type denoiser: a diffusion run's denoiser, cut at its noise node
    (``caramba.diffusion.sample.find_denoiser``), as two graphs on one runner: *predict*
    (x, k) -> prediction and *update* (x, prediction, k) -> x at the next step (the scheduler's
    DDPM or flow update, with the same seeds as ``caramba image``)."""

    kind = DENOISER

    def __init__(self, decl: Decl, machine: Any) -> None:
        self.decl = decl
        self.m = machine
        self._run: Any = None
        self.runner: Any = None
        self._exe: tuple[Any, Any] | None = None
        self._ks: dict[int, Any] = {}
        self._count = 0

    @property
    def den(self) -> Any:
        if self._run is None:
            from caramba.diffusion.sample import find_denoiser, load_run

            model = self.decl.config["model"]
            if model is None:
                raise ProgramError(f"graph '{self.decl.name}' has no model", origin=self.decl.loc,
                                   hint=f"give --model RUN, or --set graphs.{self.decl.name}.model=...")
            run = load_run(str(model), self.m.run_store(), denoiser=True)
            self._run = (run, find_denoiser(run.prep))
        return self._run[1]

    @property
    def data_range(self) -> tuple[float, float]:
        return self.den.data_range

    def start(self, n: int, steps: int | None, seed: int) -> tuple[int, Any]:
        """Compile the two graphs for n examples and draw x_T; returns (steps, x_T on the runner)."""
        from caramba import compute
        from caramba.diffusion.sample import split_graphs

        den = self.den
        init, predict, update, count = split_graphs(den, n, seed=seed, steps=steps)
        if self.runner is None:
            self.runner = compute.new(self.m.backend)
        params = self._run[0].params
        missing = sorted(set(predict.state) - set(params))
        if missing:
            raise ConfigError(f"no value for parameter '{missing[0]}' of the denoiser ({len(missing)} missing)")
        for name, decl in predict.state.items():
            self.runner.state[name] = self.runner.upload(np.asarray(params[name]), decl.type.dtype)
        x = self.runner.compile(init).run({})["x"]
        self._exe = (self.runner.compile(predict), self.runner.compile(update))
        self._ks = {}
        self._count = count
        return count, x

    def _k(self, k: Any) -> Any:
        if self._exe is None:
            raise ProgramError("the denoiser runs after scheduler.timesteps (which compiles it and draws x_T)")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= int(k) < self._count:
            raise ProgramError(f"the step index must be an int in [0, {self._count}), got {k!r}")
        k = int(k)
        if k not in self._ks:
            self._ks[k] = self.runner.upload(np.array(k, np.int64))
        return self._ks[k]

    def predict(self, x: Any, k: Any) -> Any:
        kk = self._k(k)
        from caramba.diffusion.sample import K_INPUT, PRED_OUTPUT, X_INPUT

        return self._exe[0].run({X_INPUT: x, K_INPUT: kk})[PRED_OUTPUT]  # type: ignore[index]

    def update(self, x: Any, pred: Any, k: Any) -> Any:
        kk = self._k(k)
        from caramba.diffusion.sample import K_INPUT, PRED_INPUT, X_INPUT

        return self._exe[1].run({X_INPUT: x, PRED_INPUT: pred, K_INPUT: kk})["x"]  # type: ignore[index]

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None




# ---- states -------------------------------------------------------------------------------------------


class Counter:
    def __init__(self, decl: Decl) -> None:
        self.initial = int(decl.config["initial"])
        self.value = self.initial

    def set(self, v: Any) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ProgramError(f"a counter holds an int, got {type(v).__name__}")
        self.value = int(v)

    def add(self, n: int) -> None:
        self.value += n

    def reset(self) -> None:
        self.value = self.initial

    def inspect(self) -> int:
        return self.value

    read = inspect

    def close(self) -> None:
        pass


class TokenBuffer:
    MAX_TOKENS = 1 << 22  # a buffer that grows past this (a loop doubling it) is a ProgramError

    def __init__(self, decl: Decl) -> None:
        self.initial = list(decl.config["initial"])
        self.tokens = list(self.initial)

    def _fits(self, n: int) -> None:
        if n > self.MAX_TOKENS:
            raise ProgramError(f"a token buffer would hold {n:,} tokens, more than its limit of {self.MAX_TOKENS:,}",
                               hint="bound the loop that appends to it, or state.reset it")

    def extend(self, items: Sequence[Any]) -> None:
        items = list(items) if isinstance(items, (list, tuple)) else [items]
        self._fits(len(self.tokens) + len(items))
        self.tokens.extend(_ints(items, "a token buffer's items"))

    def set(self, v: Any) -> None:
        if isinstance(v, (list, tuple)):
            self._fits(len(v))
        self.tokens = _ints(v, "a token buffer's value")

    def add(self, n: int) -> None:
        raise ProgramError("state.update without a value adds to a counter; give a token buffer its new value")

    def reset(self) -> None:
        self.tokens = list(self.initial)

    def inspect(self) -> list[int]:
        return list(self.tokens)

    read = inspect

    def close(self) -> None:
        pass


class TokenStream:
    def __init__(self, decl: Decl, machine: Any) -> None:
        self.decl = decl
        self.m = machine
        self._dec: Any = None

    @property
    def decoder(self) -> Any:
        if self._dec is None:
            tok = self.m.graph(self.decl.config["graph"]).tokenizer
            self._dec = tok.stream(skip_special_tokens=self.decl.config["skip_special_tokens"])
        return self._dec

    def push(self, token: int) -> str:
        return self.decoder.push(token)

    def flush(self) -> str:
        return self.decoder.flush()

    def reset(self) -> None:
        if self._dec is not None:
            self._dec.flush()

    def inspect(self) -> int:
        return len(self._dec._ids) - self._dec._read if self._dec is not None else 0

    def close(self) -> None:
        pass


class KVCache:
    """A language model's keys and values, resident in its Generator's runner. ``tokens`` are
    the IDs the cache holds (host ints, for the repetition penalty and re-prefills)."""

    def __init__(self, decl: Decl, machine: Any) -> None:
        self.decl = decl
        self.m = machine
        self.capacity = int(decl.config["capacity"])
        self.gen: Any = None
        self.tokens: list[int] = []
        self.prefills = 0  # prefill t samples with seed + t (as `caramba chat` does per turn)
        self.seed = 0
        self.drawn = 0  # tokens drawn since the last prefill: the default key of the next decode
        self.pending: Logits | None = None

    def feed(self, graph: LanguageModel, tokens: Any) -> "Logits":
        ids = _ints(tokens, "graph.call tokens")
        if not ids:
            raise ProgramError("graph.call got no tokens to feed")
        if graph.decl.name != self.decl.config["graph"]:
            raise ProgramError(f"cache '{self.decl.name}' holds graph '{self.decl.config['graph']}', "
                               f"not '{graph.decl.name}'")
        if self.pending is not None:  # fed again before the logits were sampled: run that call (greedy)
            from caramba.generate import GREEDY

            self.pending.pick(GREEDY, self.m.seed, None, None)
        if self.gen is None:
            self.gen = graph.generator(self.capacity)
        prefill = not self.tokens or len(ids) > 1
        self.pending = Logits(self, (self.tokens + ids) if prefill else ids, prefill)
        return self.pending

    def reset(self) -> None:
        if self.pending is not None:
            self.pending.stale = True
        self.pending = None
        self.tokens = []
        self.drawn = 0

    def inspect(self) -> int:
        return len(self.tokens)

    def close(self) -> None:
        if self.gen is not None:
            self.gen.close()
            self.gen = None


class Logits:
    """The logits of one graph.call, left on the runner until sampler.next_token picks from them."""

    def __init__(self, cache: KVCache, ids: list[int], prefill: bool) -> None:
        self.cache = cache
        self.ids = ids
        self.prefill = prefill
        self.token: int | None = None
        self.sampler: Any = None
        self.stale = False

    def pick(self, sampler: Any, seed: int, key: int | None, history: Any) -> int:
        if self.token is not None:
            if sampler != self.sampler:
                raise ProgramError("these logits were already sampled with another sampler; call the graph again")
            return self.token
        if self.stale:
            raise ProgramError(f"the logits are stale: cache '{self.cache.decl.name}' was reset after the graph.call")
        c = self.cache
        gen = c.gen
        seen = None
        held = c.tokens + self.ids if not self.prefill else self.ids
        if sampler.repetition_penalty != 1.0:
            vocab = gen.vocab()
            seen = np.zeros((1, vocab), bool)
            hist = _ints(history, "history") if history is not None else held
            hist = [t for t in hist if 0 <= t < vocab]
            seen[0, hist] = True
        if self.prefill:
            c.seed = seed + c.prefills
            c.prefills += 1
            c.drawn = 0
            tok = gen.prefill([self.ids], sampler, c.seed, seen)
        else:
            c.drawn += 1
            tok = gen.decode(self.ids, sampler, c.seed, c.drawn if key is None else key, seen)
        c.tokens = held
        c.pending = None
        self.token, self.sampler = int(tok[0]), sampler
        return self.token

    def download(self) -> np.ndarray:
        """The logits [1, V] (telemetry.trace_tensor; a debugging download)."""
        if self.token is None:
            raise ProgramError("trace logits after sampler.next_token picked from them (the call runs then)")
        return self.cache.gen.logits()


STATES = {"counter": Counter, "token_buffer": TokenBuffer}
GRAPHS = {LM: LanguageModel, DENOISER: Denoiser}


def make_state(decl: Decl, machine: Any) -> Any:
    if decl.type in STATES:
        return STATES[decl.type](decl)
    return {"kv_cache": KVCache, "token_stream": TokenStream}[decl.type](decl, machine)


__all__ = ["GRAPHS", "Denoiser", "KVCache", "LanguageModel", "Logits", "ProgramError", "make_state"]
