"""Datasets: named fields, fixed train/val/test splits, training and evaluation batches."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caramba.errors import CarambaError

SPLITS = ("train", "val", "test")


class DataError(CarambaError):
    """A dataset could not be loaded or does not fit the model (missing file, field or package,
    wrong shape or dtype). The message names the dataset, the field and what was expected.
    ``key`` is the path of the dataset's manifest key the error is about (``("tokenizer",
    "path")``), so a manifest error points at that line; ``()``: the dataset's entry."""

    def __init__(self, message: str, *, key: tuple[str, ...] = (), **kw: Any) -> None:
        self.key = tuple(key)
        super().__init__(message, **kw)


@dataclass(frozen=True)
class Field:
    """Per-example shape and dtype of one field (a batch adds a leading axis)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def __str__(self) -> str:
        return f"{self.dtype.name}{list(self.shape)}"


@dataclass
class Dataset:
    """Base: ``fields`` by name, ``info`` (classes, vocabulary, baselines), split sizes."""

    name: str
    fields: dict[str, Field] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def size(self, split: str) -> int:
        raise NotImplementedError

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(s for s in SPLITS if self.size(s) > 0)

    def train_batches(self, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
        """An endless stream of training batches of exactly ``batch_size`` examples."""
        raise NotImplementedError

    def eval_batches(self, split: str, batch_size: int, limit: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Deterministic batches covering ``split`` (the last one may be smaller), at most ``limit``."""
        raise NotImplementedError

    def _check_split(self, split: str) -> None:
        if split not in SPLITS:
            raise DataError(f"unknown split '{split}'; splits are {', '.join(SPLITS)}")
        if self.size(split) == 0:
            raise DataError(f"dataset '{self.name}' has no '{split}' examples; give it a share in `split:`")

    def describe(self) -> str:
        sizes = ", ".join(f"{s} {self.size(s)}" for s in SPLITS if self.size(s))
        fields = ", ".join(f"{k}: {v}" for k, v in self.fields.items())
        return f"{self.name}: {sizes}; fields {fields}"


def split_counts(n: int, fractions: Sequence[float], name: str = "") -> tuple[int, int, int]:
    ok = len(fractions) == 3 and all(isinstance(f, int | float) and math.isfinite(f) and f >= 0 for f in fractions)
    if not ok or fractions[0] <= 0 or abs(sum(fractions) - 1.0) > 1e-9:
        raise DataError(f"dataset '{name}': split fractions (train, val, test) must be finite numbers >= 0, "
                        f"train > 0, adding up to 1; got {tuple(fractions)}")
    train = round(n * fractions[0])
    val = round(n * fractions[1])
    test = n - train - val
    if fractions[2] == 0:
        val, test = n - train, 0
    return train, val, test


class ArrayDataset(Dataset):
    """Examples as rows of equal-length arrays; shuffled once with the dataset seed, then split."""

    def __init__(self, name: str, arrays: Mapping[str, np.ndarray], fractions: Sequence[float], seed: int,
                 info: dict[str, Any] | None = None, limit: int | None = None) -> None:
        lengths = {k: len(v) for k, v in arrays.items()}
        if len(set(lengths.values())) != 1:
            raise DataError(f"dataset '{name}': fields have different lengths {lengths}")
        n = next(iter(lengths.values()))
        order = np.random.default_rng(seed).permutation(n)
        if limit is not None:
            order = order[:limit]
            n = len(order)
        counts = split_counts(n, fractions, name)
        bounds = np.cumsum((0, *counts))
        self.parts: dict[str, dict[str, np.ndarray]] = {}
        for i, s in enumerate(SPLITS):
            idx = order[bounds[i] : bounds[i + 1]]
            self.parts[s] = {k: np.ascontiguousarray(v[idx]) for k, v in arrays.items()}
        fields = {k: Field(tuple(v.shape[1:]), v.dtype) for k, v in arrays.items()}
        super().__init__(name, fields, dict(info or {}))

    def size(self, split: str) -> int:
        part = self.parts.get(split, {})
        return len(next(iter(part.values()))) if part else 0

    def arrays(self, split: str) -> dict[str, np.ndarray]:
        self._check_split(split)
        return self.parts[split]

    def train_batches(self, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
        self._check_split("train")
        n = self.size("train")
        if batch_size > n:
            raise DataError(f"batch_size {batch_size} is larger than the {n} training examples of '{self.name}'")
        part = self.parts["train"]
        while True:  # epochs of a fresh permutation; the incomplete tail batch is dropped (static shapes)
            perm = rng.permutation(n)
            for start in range(0, n - batch_size + 1, batch_size):
                idx = perm[start : start + batch_size]
                yield {k: v[idx] for k, v in part.items()}

    def eval_batches(self, split: str, batch_size: int, limit: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        self._check_split(split)
        part, n = self.parts[split], self.size(split)
        for i, start in enumerate(range(0, n, batch_size)):
            if limit is not None and i >= limit:
                return
            yield {k: v[start : start + batch_size] for k, v in part.items()}


class TextDataset(Dataset):
    """A token stream split contiguously; examples are windows of ``context`` tokens with
    ``x = tokens[t : t + context]`` and ``y = tokens[t + 1 : t + context + 1]``.

    ``vocab`` lists the token of each ID; ``tokenizer`` (a ``caramba.text`` tokenizer) turns IDs
    back into text: by default the characters of ``vocab`` (a ``CharTokenizer``). With a
    tokenizer the info counts ``tokens`` (the source adds ``characters``)."""

    def __init__(self, name: str, tokens: np.ndarray, vocab: list[str], context: int, fractions: Sequence[float],
                 info: dict[str, Any] | None = None, tokenizer: Any = None) -> None:
        from caramba.text.tokenizer import CharTokenizer

        n = len(tokens)
        counts = split_counts(n, fractions, name)
        bounds = np.cumsum((0, *counts))
        self.vocab = vocab
        self.tokenizer = CharTokenizer(vocab) if tokenizer is None else tokenizer
        self.context = context
        self.streams = {s: tokens[bounds[i] : bounds[i + 1]] for i, s in enumerate(SPLITS)}
        unit = "characters" if tokenizer is None else "tokens"
        if len(self.streams["train"]) <= context:
            raise DataError(f"text dataset '{name}': {len(self.streams['train'])} training {unit} do not fill one "
                            f"window of context {context}")
        fields = {"x": Field((context,), np.dtype(np.int64)), "y": Field((context,), np.dtype(np.int64))}
        info = dict(info or {})
        info.update({"vocab_size": len(vocab), "context": context, unit: n})
        train_counts = np.bincount(self.streams["train"], minlength=len(vocab)).astype(np.float64) + 1.0
        logp = np.log(train_counts / train_counts.sum())
        for s in ("val", "test"):
            stream = self.streams[s]
            if len(stream):
                # Cross-entropy of the split under the train character frequencies (add-one smoothed):
                # the loss of the best model that ignores context.
                info[f"unigram_{s}_loss"] = float(-logp[stream].mean())
        super().__init__(name, fields, info)

    def size(self, split: str) -> int:
        stream = self.streams.get(split)
        return 0 if stream is None or len(stream) <= self.context else (len(stream) - 1) // self.context

    def _windows(self, stream: np.ndarray, starts: np.ndarray) -> dict[str, np.ndarray]:
        idx = starts[:, None] + np.arange(self.context)[None, :]
        return {"x": stream[idx], "y": stream[idx + 1]}

    def train_batches(self, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
        self._check_split("train")
        stream = self.streams["train"]
        high = len(stream) - self.context
        while True:
            yield self._windows(stream, rng.integers(0, high, size=batch_size))

    def eval_batches(self, split: str, batch_size: int, limit: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        self._check_split(split)
        stream = self.streams[split]
        starts = np.arange(self.size(split)) * self.context
        for i, b in enumerate(range(0, len(starts), batch_size)):
            if limit is not None and i >= limit:
                return
            yield self._windows(stream, starts[b : b + batch_size])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)


def unify_dims(specs: Mapping[str, Sequence[int | str]], actual: Mapping[str, tuple[int, ...]],
               known: Mapping[str, int] | None = None) -> dict[str, int]:
    """Bind symbolic dims by matching declared input shapes against actual per-batch shapes.

    ``specs``: input name -> declared shape (ints and names such as ``batch``, ``seq``);
    ``actual``: input name -> shape of one batch. Returns every bound dim; raises DataError
    naming the input on a rank or size mismatch.
    """
    dims = dict(known or {})
    for name, spec in specs.items():
        if name not in actual:
            continue
        shape = actual[name]
        if len(spec) != len(shape):
            raise DataError(f"input '{name}' is declared {list(spec)} but the data gives shape {list(shape)}")
        for d, n in zip(spec, shape):
            if isinstance(d, str):
                if d in dims and dims[d] != n:
                    raise DataError(f"input '{name}': dimension '{d}' is {dims[d]} elsewhere but the data gives {n} "
                                    f"(shape {list(shape)})")
                dims[d] = n
            elif d != n:
                raise DataError(f"input '{name}' is declared {list(spec)} but the data gives shape {list(shape)}")
    return dims
