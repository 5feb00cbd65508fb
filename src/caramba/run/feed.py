"""Feeding and evaluation: dataset batches to topology inputs, and metrics over a split."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from caramba.manifest.compile import Prepared
from caramba.manifest.lower import resolve_dims


class Feeder:
    """Dataset batches -> topology inputs, cast to the declared dtypes (host side, explicit)."""

    def __init__(self, prep: Prepared, batch: int) -> None:
        self.prep = prep
        self.types = resolve_dims(prep.manifest.topology, prep.doc, {**prep.dims, "batch": batch}, ("topology",))

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for inp, fld in self.prep.feed.items():
            arr = batch[fld]
            want = self.types[inp].dtype.numpy
            out[inp] = arr if arr.dtype == want else arr.astype(want)
        return out

    def specs(self, n: int) -> dict[str, tuple[tuple[int, ...], str]]:
        return {k: ((n, *t.shape[1:]), t.dtype.value) for k, t in self.types.items()}


def eval_splits(ds: Any) -> list[str]:
    return [s for s in ("val", "test") if ds.size(s)]


def eval_batch_size(prep: Prepared, batch: int) -> int:
    """The trainer's eval batch, or by default whole small splits at once (one compiled graph);
    the train batch for text (a whole text split would be one huge batch)."""
    from caramba.data import TextDataset

    t, ds = prep.manifest.trainer, prep.dataset
    assert t is not None and ds is not None
    size = t.eval_batch_size or (batch if isinstance(ds, TextDataset) else max(batch, 512))
    return max(1, min(size, max((ds.size(s) for s in eval_splits(ds)), default=batch)))


class Evaluator:
    """Scalar metrics over a split: one eval graph per batch size, averaged weighted by size."""

    def __init__(self, step: Any, trainer: Any, prep: Prepared, names: list[str], batch: int, limit: int | None,
                 disable: tuple[str, ...] = ()) -> None:
        self.step, self.trainer, self.prep, self.disable = step, trainer, prep, disable
        self.names, self.batch, self.limit = names, batch, limit
        self.feeder = Feeder(prep, batch)
        self._exes: dict[int, Any] = {}

    def _exe(self, n: int) -> Any:
        exe = self._exes.get(n)
        if exe is None:
            names = self.names

            def fn(model: Any, **ins: Any) -> dict[str, Any]:
                out = model(**ins)
                return {k: out[k] for k in names}

            graph = self.step.eval_graph(fn, self.feeder.specs(n), name=f"{self.prep.manifest.name}.eval{n}")
            exe = self.trainer.runner.compile(graph, disable=self.disable)
            self._exes[n] = exe
        return exe

    def prepare(self, splits: list[str]) -> None:
        """Compile now the executables the first batch of each split will run."""
        ds = self.prep.dataset
        for n in {min(self.batch, ds.size(s)) for s in splits}:
            if n > 0:
                self._exe(n)

    def __call__(self, split: str) -> dict[str, float]:
        ds = self.prep.dataset
        totals = dict.fromkeys(self.names, 0.0)
        count = 0
        for batch in ds.eval_batches(split, self.batch, self.limit):
            arrays = self.feeder(batch)
            n = len(next(iter(arrays.values())))
            outs = self._exe(n).run(self.trainer.upload_batch(arrays))
            for k in self.names:
                totals[k] += float(outs[k].download()) * n
            count += n
        return {k: v / max(count, 1) for k, v in totals.items()}


def make_trainer(step: Any, runner: Any, disable: tuple[str, ...]) -> Any:
    """A ``train.Trainer`` whose executables skip the target's disabled compiler passes."""
    from caramba import train

    class Trainer(train.Trainer):
        def executable(self, fetch: Any) -> Any:
            key = tuple(fetch)
            if disable and key not in self._exes:
                self._exes[key] = self.runner.compile(self.train_step.graph, targets=key, disable=disable)
            return super().executable(fetch)

    return Trainer(step, runner)


__all__ = ["Evaluator", "Feeder", "eval_batch_size", "eval_splits", "make_trainer"]
